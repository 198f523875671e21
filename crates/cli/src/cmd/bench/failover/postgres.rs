//! The benchmark's own throwaway PostgreSQL, from Debian's `postgresql` package, as the store
//! tests start theirs (`crates/store/tests/postgres/harness.rs`): `initdb` into a directory
//! of the bench, the server on a free loopback port and no unix socket, as `nobody` when the
//! bench runs as root (PostgreSQL refuses root). Unlike the tests' server, this one is driven
//! by `pg_ctl`, so that a fault can restart it: `stop -m immediate` is a crash (no checkpoint,
//! the next start replays the WAL), then `start -w`. Stopped when dropped; its directory, with
//! the server's log (lock waits logged), goes with the bench's.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, bail};

/// The user the server runs as when the bench runs as root.
const UNPRIVILEGED: &str = "nobody";

/// A running throwaway server with one database, `gantry`.
#[derive(Debug)]
pub struct LocalPostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    root: bool,
}

impl LocalPostgres {
    /// Initialises a cluster in `dir` (created; it must not exist yet) and starts it.
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        let bin = bin_dir()?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let root = is_root();
        if root {
            let (uid, gid) = ids(UNPRIVILEGED)?;
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .context("giving the database directory away")?;
        }
        let port = super::cluster::free_port()?;
        let server = Self { dir: dir.to_owned(), bin, port, root };
        let data = server.data();
        let out = server
            .command("initdb")
            .args(["-D", &data, "-U", "gantry", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .context("cannot run initdb")?;
        check("initdb", &out)?;
        server.pg_ctl_start()?;
        let out = Command::new(server.bin.join("createdb"))
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "gantry", "gantry"])
            .output()
            .context("cannot run createdb")?;
        check("createdb", &out)?;
        Ok(server)
    }

    /// The URL of its database.
    pub fn url(&self) -> String {
        format!("postgres://gantry@127.0.0.1:{}/gantry", self.port)
    }

    /// Crashes the server (`pg_ctl stop -m immediate`: no checkpoint) and starts it again.
    pub fn restart(&self) -> anyhow::Result<()> {
        self.stop()?;
        self.pg_ctl_start()
    }

    /// Terminates every other connection to the database (`pg_terminate_backend`): the
    /// replicas'. Returns how many it terminated.
    pub fn terminate_connections(&self) -> anyhow::Result<u32> {
        let out = Command::new(self.bin.join("psql"))
            .args([&self.url(), "-v", "ON_ERROR_STOP=1", "-qAt", "-c"])
            .arg(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = 'gantry' AND pid <> pg_backend_pid()) AS t",
            )
            .output()
            .context("cannot run psql")?;
        check("psql", &out)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0))
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn stop(&self) -> anyhow::Result<()> {
        let out =
            self.command("pg_ctl").args(["-D", &self.data(), "-m", "immediate", "-w", "stop"]).output()?;
        check("pg_ctl stop", &out)
    }

    fn pg_ctl_start(&self) -> anyhow::Result<()> {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c max_connections=200 \
             -c fsync=on -c synchronous_commit=on -c log_lock_waits=on",
            self.port
        );
        let log = self.dir.join("server.log").display().to_string();
        let out = self
            .command("pg_ctl")
            .args(["-D", &self.data(), "-l", &log, "-o", &options, "-w", "-t", "60", "start"])
            .output()
            .context("cannot run pg_ctl")?;
        check("pg_ctl start", &out).map_err(|e| {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            anyhow::anyhow!("{e}\n{log}")
        })
    }

    /// `program` of the package, as the unprivileged user when running as root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.root {
            let mut c = Command::new("runuser");
            c.args(["-u", UNPRIVILEGED, "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        // Its directory (and log) goes with the bench's.
        let _ = self.stop();
    }
}

fn check(what: &str, out: &Output) -> anyhow::Result<()> {
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The newest major version's binaries under `/usr/lib/postgresql`.
fn bin_dir() -> anyhow::Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .context("no /usr/lib/postgresql: install Debian's postgresql package to run this benchmark")?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
        .collect();
    found.sort_by_key(|p| p.parent().and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok()));
    found.pop().context("no initdb under /usr/lib/postgresql/*/bin: is the postgresql package installed?")
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn ids(user: &str) -> anyhow::Result<(u32, u32)> {
    let id = |flag: &str| -> anyhow::Result<u32> {
        let out = Command::new("id").args([flag, user]).output().context("cannot run id")?;
        String::from_utf8_lossy(&out.stdout).trim().parse().with_context(|| format!("no user {user}"))
    };
    Ok((id("-u")?, id("-g")?))
}
