//! Starting `gantry up` (and `gantry agent`) as child processes in a private HOME.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gantry_agent::runner::attempt::end_orphaned;
use gantry_agent::runner::record::{self, Found};
use gantry_agent::runner::{Sandbox, SandboxConfig};
use gantry_store::{SqliteStore, Store, history};

pub const GANTRY: &str = env!("CARGO_BIN_EXE_gantry");

/// A `gantry up` process on a private port, HOME and data dir.
#[derive(Debug)]
pub struct Cluster {
    pub home: tempfile::TempDir,
    pub port: u16,
    /// Where the local agent serves GPU metrics.
    pub metrics_port: u16,
    /// Whether the server speaks TLS (the default; `--no-tls` turns it off on loopback).
    pub tls: bool,
    /// Outside HOME and reachable by job users: the jobs' work root and [`Cluster::shared`].
    pub outside: tempfile::TempDir,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// A program (and its arguments) that runs the binary, e.g. `prlimit --nofile=1024: --`.
    wrapper: Vec<String>,
    child: Option<Child>,
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// A `Command` for the binary with an isolated environment, run in an empty directory of
/// `home` (`submit` and `run` upload the directory they run in; the test's own, `crates/cli`,
/// is not the job's).
pub fn command(home: &Path) -> Command {
    isolated(Command::new(GANTRY), home)
}

/// [`command`] run through `wrapper` (a program and its arguments, the binary's path last).
pub fn command_via(home: &Path, wrapper: &[String]) -> Command {
    let Some((program, args)) = wrapper.split_first() else { return command(home) };
    let mut cmd = Command::new(program);
    cmd.args(args).arg(GANTRY);
    isolated(cmd, home)
}

fn isolated(mut cmd: Command, home: &Path) -> Command {
    let cwd = home.join("cwd");
    std::fs::create_dir_all(&cwd).expect("an empty working directory");
    cmd.current_dir(cwd)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("GANTRY_CONFIG")
        .env_remove("GANTRY_SERVER")
        .env_remove("GANTRY_TOKEN")
        .env_remove("GANTRY_DATA_DIR")
        .env_remove("GANTRY_CA")
        .env_remove("GANTRY_LOG")
        .env("RUST_LOG", "warn");
    cmd
}

impl Cluster {
    /// Starts `gantry up` with extra arguments and waits until it answers.
    pub fn start(extra: &[&str]) -> Self {
        Self::start_full("up", "127.0.0.1", extra, &[])
    }

    /// Starts `gantry up` with extra arguments and environment variables.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_full("up", "127.0.0.1", extra, env)
    }

    /// Starts `gantry <subcommand>` (`up` or `server`) listening on `host` and a free port.
    pub fn start_as(subcommand: &str, host: &str, extra: &[&str]) -> Self {
        Self::start_full(subcommand, host, extra, &[])
    }

    /// Starts `gantry up` through `wrapper` (see [`command_via`]).
    pub fn start_via(wrapper: &[&str], extra: &[&str]) -> Self {
        let mut cluster = Self::prepare("up", "127.0.0.1", extra, &[]);
        cluster.wrapper = wrapper.iter().map(|s| (*s).to_owned()).collect();
        cluster.restart();
        cluster
    }

    fn start_full(subcommand: &str, host: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cluster = Self::prepare(subcommand, host, extra, env);
        cluster.restart();
        cluster
    }

    fn prepare(subcommand: &str, host: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        use std::os::unix::fs::PermissionsExt;
        // Outside /tmp: a job has a /tmp of its own, and these hold what a test shares with its
        // jobs (markers, probes, the work root).
        let home = tempfile::tempdir_in(outside_tmp()).expect("temp home");
        let outside = tempfile::tempdir_in(outside_tmp()).expect("temp dir");
        let shared = outside.path().join("shared");
        std::fs::create_dir(&shared).expect("shared dir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let port = free_port();
        let metrics_port = free_port();
        let mut args = vec![subcommand.to_owned(), "--listen".into(), format!("{host}:{port}")];
        if subcommand == "up" {
            args.extend(["--metrics-listen".into(), format!("127.0.0.1:{metrics_port}")]);
        }
        args.extend(["--data-dir".into(), home.path().join("data").display().to_string()]);
        if subcommand == "up" {
            args.extend(["--work-dir".into(), outside.path().join("work").display().to_string()]);
        }
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let tls = !extra.contains(&"--no-tls");
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Self { home, port, metrics_port, tls, outside, args, env, wrapper: Vec::new(), child: None }
    }

    /// The command line [`Cluster::restart`] runs (after the binary's name), to change before a
    /// restart: the same HOME, port and data directory under another subcommand or `--db`.
    pub fn args_mut(&mut self) -> &mut Vec<String> {
        &mut self.args
    }

    /// A directory every job user may write to (for markers).
    pub fn shared(&self) -> PathBuf {
        self.outside.path().join("shared")
    }

    /// The URL on this machine (loopback, which the server certificate always names).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.home.path().join("data")
    }

    /// The cluster CA `gantry up` made (what clients pin).
    pub fn ca_path(&self) -> PathBuf {
        self.data_dir().join("tls/ca.pem")
    }

    /// An HTTP client for [`Cluster::url`] that trusts the cluster CA and nothing else.
    pub fn http(&self) -> reqwest::Client {
        self.http_builder().build().expect("client")
    }

    /// [`Cluster::http`], to add settings to.
    pub fn http_builder(&self) -> reqwest::ClientBuilder {
        let ca = self.tls.then(|| std::fs::read_to_string(self.ca_path()).expect("the cluster CA"));
        gantry_agent::runner::client::builder(ca.as_deref(), None).expect("client")
    }

    /// Base64 SHA-256 of the cluster CA's public key: what a browser pins.
    pub fn ca_spki(&self) -> Option<String> {
        use rustls::pki_types::pem::PemObject;
        if !self.tls {
            return None;
        }
        let der = rustls::pki_types::CertificateDer::from_pem_file(self.ca_path()).expect("CA PEM");
        gantry_server::tls::spki_sha256_base64(&der)
    }

    /// (Re)starts the process and waits for `/healthz`.
    pub fn restart(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.home.path().join("up.log"))
            .expect("log file");
        let child = command_via(self.home.path(), &self.wrapper)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::from(log.try_clone().expect("clone log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start gantry up");
        self.child = Some(child);
        if !wait_healthy(&self.url()) {
            let log = std::fs::read_to_string(self.home.path().join("up.log")).unwrap_or_default();
            panic!("gantry up did not start listening on {}; its output:\n{log}", self.url());
        }
        // `gantry up`'s own agent registers just after the server listens: a test that submits
        // at once would race it (what a request could ever get is judged against registered
        // nodes). Wait for it a while; a test whose agent cannot register goes on without.
        let has_agent =
            self.args.first().is_some_and(|a| a == "up") && !self.args.iter().any(|a| a == "--no-agent");
        if has_agent {
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < until {
                let out = self.try_gantry(&["nodes"]);
                if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ready") {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process without waiting for anything.
    /// The `gantry up` process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// A line of the server process's `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`: the peak).
    pub fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("a memory figure")
    }

    pub fn send(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill").args([&format!("-{signal}"), &pid]).status().expect("kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// SIGKILLs the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGINT (Ctrl-C) and waits for the process to exit.
    pub fn interrupt(&mut self) -> std::process::ExitStatus {
        self.signal("-INT")
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal("-TERM")
    }

    fn signal(&mut self, signal: &str) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill").args([signal, &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "gantry up did not exit after {signal}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the local agent has registered: the server judges what a request could ever
    /// get against registered nodes only, and a cluster without any refuses nothing.
    pub fn wait_for_agent(&self) {
        eventually(Duration::from_secs(20), "the local agent to register", || {
            self.gantry(&["nodes"]).contains("ready").then_some(())
        });
    }

    /// Runs a client command as the same user; panics with its stderr if it fails.
    pub fn gantry(&self, args: &[&str]) -> String {
        let out = self.try_gantry(args);
        assert!(out.status.success(), "gantry {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn try_gantry(&self, args: &[&str]) -> Output {
        command(self.home.path()).args(args).output().expect("run gantry")
    }

    /// The admin token `gantry up` saved in the client config's current context.
    pub fn token(&self) -> String {
        let text = std::fs::read_to_string(self.home.path().join(".config/gantry/config.toml"))
            .expect("client config");
        let config: toml::Value = toml::from_str(&text).expect("config toml");
        let current = config["current-context"].as_str().expect("current context");
        config["contexts"][current]["token"].as_str().expect("token").to_owned()
    }

    /// Jobs as `gantry jobs -o json` prints them.
    pub fn jobs(&self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.gantry(&["jobs", "-o", "json"])).expect("jobs json")
    }

    /// Opens the store beside the running server (WAL allows a second reader).
    pub fn store(&self) -> SqliteStore {
        SqliteStore::open(&self.data_dir()).expect("open store")
    }

    /// Panics if the allocation history ever gave a GPU beyond its capacity.
    pub fn assert_no_double_allocation(&self) {
        let store = self.store();
        let history_rows = store.allocations(false).expect("history");
        let conflicts = history::conflicts(&history_rows, &store.gpus().expect("gpus"));
        assert!(conflicts.is_empty(), "double allocation: {conflicts:#?}");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM first so the agent stops its jobs; SIGKILL if it hangs.
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline && !matches!(child.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // Jobs outlive `gantry up`: end those it left (their shims then exit), and the cgroups
        // of any whose shim is gone.
        let state = self.data_dir().join("agent");
        for found in record::recover(&state) {
            if let Found::Running(r) | Found::Dead(r) = found {
                end_orphaned(&r);
            }
        }
        if state.join("sandbox-scope").exists() {
            let work_dir = self.outside.path().join("work");
            let config = SandboxConfig { work_dir, ..SandboxConfig::default() };
            if let Ok(sandbox) = Sandbox::build(&config, &state) {
                sandbox.remove_orphans();
                sandbox.release();
            }
        }
    }
}

/// Waits until `/healthz` answers 200 (the listener is bound a moment before serving starts);
/// for an https URL, until the listener answers plain HTTP with its "serves HTTPS" 400;
/// false after 30 s.
pub fn wait_healthy(url: &str) -> bool {
    use std::io::{Read, Write};
    let tls = url.starts_with("https://");
    let addr = url.trim_start_matches("http://").trim_start_matches("https://").to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(mut conn) = std::net::TcpStream::connect(&addr) {
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let mut answer = String::new();
            let asked = conn.write_all(b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n");
            let answered = asked.is_ok() && conn.read_to_string(&mut answer).is_ok();
            if answered && (answer.starts_with("HTTP/1.0 200") || (tls && answer.contains("serves HTTPS"))) {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// Polls `check` until it returns `Some` or the timeout passes.
pub fn eventually<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Where test directories shared with jobs go: the target directory, unless the checkout itself
/// is under `/tmp` (which a job's private `/tmp` hides), then `/var/tmp/gantry-tests`.
pub fn outside_tmp() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if !target.starts_with("/tmp") {
        return target;
    }
    let dir = PathBuf::from("/var/tmp/gantry-tests");
    std::fs::create_dir_all(&dir).expect("/var/tmp/gantry-tests");
    dir
}
