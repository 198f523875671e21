//! The processes a failover trial acts on: `gantry server` replicas on one PostgreSQL and
//! `gantry agent`s on simulated fleets that know every replica, each a child process of this
//! binary (so that a fault is a real `kill -9` or `SIGSTOP`), with its output in a log file of
//! the bench directory. A killed replica starts again on its own data directory, so it keeps its
//! replica id, as a restarted server does.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

/// A free loopback port.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("no free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// One `gantry server` replica.
#[derive(Debug)]
pub struct Replica {
    /// Its port on 127.0.0.1 (plain HTTP).
    pub port: u16,
    args: Vec<String>,
    log: PathBuf,
    home: PathBuf,
    child: Option<Child>,
}

impl Replica {
    /// Starts replica `index` of the bench in `dir`, on database `url`.
    pub fn start(dir: &Path, index: usize, url: &str, lease_ttl_s: u64) -> anyhow::Result<Self> {
        let port = free_port()?;
        let data = dir.join(format!("replica-{index}"));
        let args = vec![
            "server".to_owned(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--data-dir".into(),
            data.display().to_string(),
            "--db".into(),
            url.to_owned(),
            "--lease-ttl".into(),
            format!("{lease_ttl_s}s"),
            "--no-tls".into(),
            "--gateway-listen".into(),
            "none".into(),
        ];
        let log = dir.join(format!("replica-{index}.log"));
        let mut replica = Self { port, args, log, home: dir.join("home"), child: None };
        replica.spawn()?;
        Ok(replica)
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts the process again (after [`Replica::kill`]).
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = child_command(&self.home)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("cannot start a gantry server replica")?;
        self.child = Some(child);
        Ok(())
    }

    /// `kill -9`, and reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`).
    pub fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status();
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.signal("CONT");
        self.kill();
    }
}

/// One `gantry agent` on a simulated fleet.
#[derive(Debug)]
pub struct Agent {
    child: Child,
}

impl Agent {
    /// Starts node `node_id` with its credential already in `<dir>/<node>/agent/credential`.
    pub fn start(dir: &Path, node_id: &str, servers: &str, fleet: &str) -> anyhow::Result<Self> {
        let data = dir.join(node_id);
        let log = std::fs::File::create(dir.join(format!("{node_id}.log")))?;
        let child = child_command(&dir.join("home"))
            .args(["agent", "--server", servers, "--node-id", node_id, "--backend", "simulated"])
            .args([
                "--simulated-gpus",
                fleet,
                "--grace",
                "1",
                "--stop-jobs-on-exit",
                "--job-network",
                "shared",
            ])
            .arg("--data-dir")
            .arg(&data)
            .arg("--work-dir")
            .arg(dir.join(format!("work-{node_id}")))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("cannot start a gantry agent")?;
        Ok(Self { child })
    }

    /// Where the agent of `node_id` keeps its state (its credential goes there first).
    pub fn state_dir(dir: &Path, node_id: &str) -> PathBuf {
        dir.join(node_id).join("agent")
    }

    /// Stops it (SIGTERM: it stops its jobs), waiting up to 10 s before SIGKILL.
    pub fn stop(mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// This binary with an environment of the bench's own: its own home (client config), nothing of
/// the caller's Gantry settings, and a process group of its own.
fn child_command(home: &Path) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("gantry"));
    let mut cmd = Command::new(exe);
    // A process group of its own: Ctrl-C at the terminal ends the bench's trials, not its cluster.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("GANTRY_CONFIG")
        .env_remove("GANTRY_SERVER")
        .env_remove("GANTRY_TOKEN")
        .env_remove("GANTRY_DATA_DIR")
        .env_remove("GANTRY_DB")
        .env_remove("GANTRY_CA")
        .env("RUST_LOG", "info");
    cmd
}

/// What `GET /healthz` of a replica says: its role (`leader`, `follower`) and epoch, or `None`
/// when it does not answer within 800 ms.
pub async fn health(http: &reqwest::Client, url: &str) -> Option<(String, u64)> {
    let resp = http.get(format!("{url}/healthz")).timeout(Duration::from_millis(800)).send().await.ok()?;
    let v: serde_json::Value = resp.json().await.ok()?;
    Some((v["role"].as_str()?.to_owned(), v["epoch"].as_u64()?))
}
