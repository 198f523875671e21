//! A throwaway PostgreSQL for tests, from Debian's `postgresql` package: `initdb` into a
//! temporary directory, the server started on a free loopback port (no unix socket), as
//! `nobody` when the tests run as root (PostgreSQL refuses to run as root). It stops, and its
//! directory goes, when dropped, and also when the test process ends however it ends: the
//! server runs under a small shell that waits on a pipe from this process and stops the server
//! once the pipe closes.
//!
//! Other crates' tests use it too: `#[path = "../../../store/tests/postgres/harness.rs"] mod
//! harness;`. It needs nothing but the standard library and the package's binaries.
//!
//! A machine without PostgreSQL fails the tests that need it, loudly: CI must run them. Set
//! `GANTRY_TEST_NO_POSTGRES=1` to skip them locally instead (each says so on stderr).

#![allow(dead_code, reason = "each test binary uses a different part of the harness")]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A running throwaway server.
#[derive(Debug)]
pub struct TempPostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    guard: Child,
    databases: AtomicU32,
}

/// The user the server runs as when the tests run as root.
const UNPRIVILEGED: &str = "nobody";

impl TempPostgres {
    /// Starts a server, or says why it cannot.
    pub fn start() -> Result<Self, String> {
        Self::start_with(None)
    }

    /// Starts a server that offers TLS (`ssl=on`) with this certificate and key (PEM).
    pub fn start_with_tls(cert_pem: &str, key_pem: &str) -> Result<Self, String> {
        Self::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Result<Self, String> {
        let bin = bin_dir()?;
        let dir = std::env::temp_dir().join(format!("gantry-pg-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let root = is_root();
        if root {
            let (uid, gid) = ids(UNPRIVILEGED)?;
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(|e| format!("chown: {e}"))?;
        }
        let data = dir.join("data");
        let out = as_user(root, &bin.join("initdb"))
            .args(["-D", &data.to_string_lossy(), "-U", "gantry", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .map_err(|e| format!("cannot run initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let port = free_port()?;
        let postgres = bin.join("postgres");
        let mut ssl = String::new();
        if let Some((cert, key)) = tls {
            use std::os::unix::fs::PermissionsExt;
            let (cert_file, key_file) = (dir.join("server.crt"), dir.join("server.key"));
            std::fs::write(&cert_file, cert).map_err(|e| format!("write the certificate: {e}"))?;
            std::fs::write(&key_file, key).map_err(|e| format!("write the key: {e}"))?;
            // PostgreSQL refuses a key file that others may read, or that is not its user's.
            std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| e.to_string())?;
            if root {
                let (uid, gid) = ids(UNPRIVILEGED)?;
                for file in [&cert_file, &key_file] {
                    std::os::unix::fs::chown(file, Some(uid), Some(gid))
                        .map_err(|e| format!("chown: {e}"))?;
                }
            }
            ssl = format!(
                "-c ssl=on -c ssl_cert_file='{}' -c ssl_key_file='{}' ",
                cert_file.display(),
                key_file.display()
            );
        }
        let script = format!(
            "'{}' -D '{}' -p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories= \
             -c max_connections=400 -c fsync=on -c synchronous_commit=on {ssl}>'{}' 2>&1 & pid=$!; \
             read _; kill -INT $pid; wait $pid; rm -rf '{}'",
            postgres.display(),
            data.display(),
            dir.join("server.log").display(),
            dir.display()
        );
        let guard = as_user(root, Path::new("/bin/sh"))
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start postgres: {e}"))?;
        let server = Self { dir, bin, port, guard, databases: AtomicU32::new(0) };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        Err(format!("postgres did not accept connections within 60 s:\n{log}"))
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A `postgres://` URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://gantry@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a fresh, empty database and returns its URL.
    pub fn create_database(&self) -> String {
        let name = format!("t{}_{}", std::process::id(), self.databases.fetch_add(1, Ordering::Relaxed));
        let out = Command::new(self.bin.join("createdb"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "gantry", &name])
            .output()
            .expect("run createdb");
        assert!(out.status.success(), "createdb failed: {}", String::from_utf8_lossy(&out.stderr));
        self.url(&name)
    }

    /// Runs SQL in database `url` outside any store (what a test does behind the store's back).
    pub fn psql(&self, url: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args([url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql])
            .output()
            .map_err(|e| format!("cannot run psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        if let Some(stdin) = self.guard.stdin.as_mut() {
            let _ = stdin.write_all(b"stop\n");
        }
        drop(self.guard.stdin.take());
        let _ = self.guard.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One server for the whole test process, started on first use. `None` (with the reason on
/// stderr) only when `GANTRY_TEST_NO_POSTGRES` is set; a server that cannot start otherwise
/// fails the test.
pub fn shared() -> Option<&'static TempPostgres> {
    static SERVER: OnceLock<Result<TempPostgres, String>> = OnceLock::new();
    let skip = std::env::var_os("GANTRY_TEST_NO_POSTGRES").is_some_and(|v| !v.is_empty() && v != "0");
    if skip {
        eprintln!("skipped: GANTRY_TEST_NO_POSTGRES is set, so this PostgreSQL test does not run");
        return None;
    }
    match SERVER.get_or_init(TempPostgres::start) {
        Ok(server) => Some(server),
        Err(why) => panic!(
            "cannot start a throwaway PostgreSQL ({why}); install Debian's postgresql package \
             (scripts/test.sh does), or set GANTRY_TEST_NO_POSTGRES=1 to skip these tests locally"
        ),
    }
}

fn bin_dir() -> Result<PathBuf, String> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("no /usr/lib/postgresql ({e}): is the postgresql package installed?"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
        .collect();
    // The newest major version.
    found.sort_by_key(|p| p.parent().and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok()));
    found.pop().ok_or_else(|| "no initdb under /usr/lib/postgresql/*/bin".to_owned())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn ids(user: &str) -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new("id").args([flag, user]).output().map_err(|e| format!("id: {e}"))?;
        String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| format!("no user {user}"))
    };
    Ok((id("-u")?, id("-g")?))
}

/// `program` as the unprivileged user when running as root, else as is.
fn as_user(root: bool, program: &Path) -> Command {
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", UNPRIVILEGED, "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn unique() -> u32 {
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
