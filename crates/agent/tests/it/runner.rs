//! The job runner against an in-process control plane on a simulated fleet.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_agent::runner::sandbox::{JobDefaults, NodeReserve};
use gantry_agent::runner::{self, AgentConfig, BackendChoice, Gpus, Sandbox, SandboxConfig};
use gantry_gpu::FaultKind;
use gantry_server::{Server, ServerConfig};
use gantry_store::{
    GpuHealth, GpuRange, Job, JobFilter, JobState, NewJob, SqliteStore, Store, SubmitRequest, history,
};

/// The attempt supervisor the agent starts for each job.
pub const SHIM: &str = env!("CARGO_BIN_EXE_gantry-shim");

pub struct Harness {
    pub store: Arc<dyn Store>,
    gpus_fleet: gantry_gpu::FleetHandle,
    pub dir: tempfile::TempDir,
    /// Holds the work root (mode 0711, like `/var/lib`) and `shared`.
    pub outside: tempfile::TempDir,
    /// A directory every job user may write to (for markers).
    pub shared: std::path::PathBuf,
    pub stop: tokio::sync::watch::Sender<bool>,
    /// `--job-user` of every agent started here.
    job_users: std::collections::BTreeMap<String, String>,
    /// `--job-network` and the CNI settings of every agent started here.
    network: gantry_agent::runner::network::NetworkConfig,
    /// `--default-job-memory`, `--default-job-cpu` and `pids.max` of every agent started here.
    defaults: JobDefaults,
    reserve: NodeReserve,
    work: std::path::PathBuf,
    url: String,
    token: String,
    pub agent: tokio::task::JoinHandle<Result<(), gantry_agent::runner::AgentError>>,
}

/// How to start the control plane and agent.
pub struct Setup {
    pub fleet: &'static str,
    pub log_limit_bytes: u64,
    /// `--job-user TEAM=USER` mappings.
    pub job_users: std::collections::BTreeMap<String, String>,
    /// `--job-network` and the CNI settings (default: auto).
    pub network: gantry_agent::runner::network::NetworkConfig,
    /// The limits of a job that asks for none.
    pub defaults: JobDefaults,
    /// The work root (default `work` in [`Harness::outside`]).
    pub work_dir: Option<std::path::PathBuf>,
    /// What jobs can never take.
    pub reserve: NodeReserve,
    /// How often the agent heartbeats (the longest the server holds one).
    pub heartbeat_interval: Duration,
    /// Whether the server holds heartbeats (false: as servers before the hold, polled).
    pub hold_heartbeats: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            fleet: "1xA100-80GB",
            log_limit_bytes: 64 << 20,
            job_users: Default::default(),
            network: Default::default(),
            defaults: JobDefaults::default(),
            work_dir: None,
            reserve: NodeReserve::default(),
            heartbeat_interval: Duration::from_millis(250),
            hold_heartbeats: true,
        }
    }
}

/// A temporary directory outside `/tmp`: a job has a `/tmp` of its own, so markers and probes
/// a test shares with its jobs (and the work root) live in the target directory instead.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(outside_tmp()).expect("temp dir")
}

/// Where test directories shared with jobs go: the target directory, unless the checkout itself
/// is under `/tmp` (which a job's private `/tmp` hides), then `/var/tmp/gantry-tests`.
pub fn outside_tmp() -> std::path::PathBuf {
    let target = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if !target.starts_with("/tmp") {
        return target;
    }
    let dir = std::path::PathBuf::from("/var/tmp/gantry-tests");
    std::fs::create_dir_all(&dir).expect("/var/tmp/gantry-tests");
    dir
}

async fn start(fleet: &'static str) -> Harness {
    start_with(Setup { fleet, ..Setup::default() }).await
}

pub async fn start_with(setup: Setup) -> Harness {
    use std::os::unix::fs::PermissionsExt;
    // The data directory is private to the agent's user, as `gantry up` and `gantry agent` make it.
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let outside = tempdir();
    std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let shared = outside.path().join("shared");
    let outside_work = outside.path().join("work");
    std::fs::create_dir(&shared).expect("shared dir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("store")).expect("store"));
    let mut config = ServerConfig::local(dir.path().join("logs"));
    config.listen = ([127, 0, 0, 1], 0).into();
    config.schedule_interval = Duration::from_millis(100);
    config.log_limit_bytes = setup.log_limit_bytes;
    config.heartbeat_interval = setup.heartbeat_interval;
    config.heartbeat_timeout = config.heartbeat_timeout.max(setup.heartbeat_interval * 6);
    config.node_lost_after = config.node_lost_after.max(config.heartbeat_timeout);
    config.hold_heartbeats = setup.hold_heartbeats;
    let server = Server::bind(config, Arc::clone(&store)).await.expect("bind");
    let url = format!("http://{}", server.local_addr().expect("addr"));
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut server_stop = stop_rx.clone();
    tokio::spawn(server.serve(async move {
        let _ = server_stop.changed().await;
    }));
    let ttl = std::time::Duration::from_secs(3600);
    let token = gantry_server::create_join_token(&*store, Some("n1"), ttl).expect("join token");
    let gpus = Gpus::open(&BackendChoice::Simulated(setup.fleet.into()), 3).expect("fleet");
    let gpus_fleet = gpus.fleet().expect("simulated");
    let mut h = Harness {
        store,
        gpus_fleet,
        dir,
        outside,
        shared,
        stop,
        job_users: setup.job_users,
        network: setup.network,
        defaults: setup.defaults,
        reserve: setup.reserve,
        work: setup.work_dir.unwrap_or_else(|| outside_work.clone()),
        url,
        token,
        agent: tokio::spawn(async { Ok(()) }),
    };
    h.agent = h.start_agent(gpus);
    h
}

impl Harness {
    /// Starts an agent on this harness's data directory (a second call is a restarted agent);
    /// it stops its jobs when it stops.
    pub fn start_agent(
        &self,
        gpus: Gpus,
    ) -> tokio::task::JoinHandle<Result<(), gantry_agent::runner::AgentError>> {
        self.start_agent_with(gpus, true)
    }

    /// Starts an agent that leaves its jobs running when it stops unless `stop_jobs_on_exit`.
    pub fn start_agent_with(
        &self,
        gpus: Gpus,
        stop_jobs_on_exit: bool,
    ) -> tokio::task::JoinHandle<Result<(), gantry_agent::runner::AgentError>> {
        self.start_agent_until(gpus, stop_jobs_on_exit, self.stop.subscribe())
    }

    /// Starts an agent that stops when `stop` turns true (the server keeps running).
    pub fn start_agent_until(
        &self,
        gpus: Gpus,
        stop_jobs_on_exit: bool,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<Result<(), gantry_agent::runner::AgentError>> {
        let state_dir = self.dir.path().join("agent");
        let sandbox = Arc::new(Sandbox::build(&self.sandbox_config(), &state_dir).expect("sandbox"));
        let config = AgentConfig {
            server: self.url.clone(),
            token: self.token.clone(),
            node_id: "n1".into(),
            logs_dir: self.dir.path().join("logs"),
            state_dir,
            grace: Duration::from_secs(1),
            ca_pem: None,
            client_cert: None,
            ship_logs: false,
            sandbox,
            shim: SHIM.into(),
            stop_jobs_on_exit,
            advertise_addr: None,
            labels: Default::default(),
            cache: Default::default(),
            egress: Default::default(),
            server_socket: None,
            images: Default::default(),
        };
        tokio::spawn(runner::run(config, gpus, stop))
    }

    /// The sandbox settings of every agent started here.
    pub fn sandbox_config(&self) -> SandboxConfig {
        SandboxConfig {
            work_dir: self.work_root(),
            job_users: self.job_users.clone(),
            network: self.network.clone(),
            defaults: self.defaults,
            reserve: self.reserve,
            ..SandboxConfig::default()
        }
    }

    /// Root of the agent's work directories.
    pub fn work_root(&self) -> std::path::PathBuf {
        self.work.clone()
    }

    /// The control plane's URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The agent's join token (a secret no job may see).
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl Drop for Harness {
    /// A failed test leaves its jobs running: end them the way a restarted agent would.
    fn drop(&mut self) {
        if let Ok(sandbox) = Sandbox::build(&self.sandbox_config(), &self.dir.path().join("agent")) {
            sandbox.remove_orphans();
            sandbox.release();
        }
    }
}

pub fn submit(store: &dyn Store, command: &str, gpus: u32) -> i64 {
    let job = NewJob {
        team: "t".into(),
        name: "test".into(),
        spec: SubmitRequest {
            command: vec!["sh".into(), "-c".into(), command.into()],
            gpus: GpuRange::count(gpus),
            max_retries: Some(3),
            ..NewJob::default().spec
        },
        submitted_at: gantry_server::now_ms(),
        ..NewJob::default()
    };
    store.submit(&job).expect("submit").0
}

pub async fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn job(store: &dyn Store, id: i64) -> Job {
    store.job(id).expect("read").expect("exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_sees_its_gpu_and_id_and_puts_simulated_load_on_the_gpu() {
    let h = start("2xA100-80GB").await;
    let id = submit(&*h.store, "echo \"$CUDA_VISIBLE_DEVICES $GANTRY_JOB_ID\"; sleep 3", 1);
    let running =
        until("the job to run", || Some(job(&*h.store, id)).filter(|j| j.state == JobState::Running)).await;
    let uuid = running.gpu_uuids[0].clone();
    let used = until("simulated memory to show in the GPU's sample", || {
        let gpus = h.store.gpus().ok()?;
        let gpu = gpus.into_iter().find(|g| g.info.uuid == uuid)?;
        let used = gpu.sample?.pointer("/sample/memory_used_bytes")?.as_u64()?;
        (used >= 4096 * 1024 * 1024).then_some(used)
    })
    .await;
    assert!(used > 0);
    until("the job to succeed", || Some(job(&*h.store, id)).filter(|j| j.state == JobState::Succeeded)).await;
    let out =
        std::fs::read_to_string(h.dir.path().join("logs").join(id.to_string()).join("1").join("stdout"))
            .expect("log");
    assert_eq!(out, format!("{uuid} {id}\n"));
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_xid_79_makes_the_gpu_unhealthy_and_its_job_is_requeued_onto_another_gpu() {
    let h = start("2xA100-80GB").await;
    let id = submit(&*h.store, "sleep 30", 1);
    let first =
        until("the job to run", || Some(job(&*h.store, id)).filter(|j| j.state == JobState::Running)).await;
    let bad = first.gpu_uuids[0].clone();
    h.gpus_fleet.inject_now(bad.as_str(), FaultKind::Xid(79)).expect("inject");
    let again = until("the job to run again elsewhere", || {
        Some(job(&*h.store, id)).filter(|j| j.state == JobState::Running && j.attempt == 2)
    })
    .await;
    assert_ne!(again.gpu_uuids[0], bad);
    let health = h.store.gpus().expect("gpus").into_iter().find(|g| g.info.uuid == bad).map(|g| g.health);
    assert_eq!(health, Some(GpuHealth::Unhealthy));
    let other = submit(&*h.store, "sleep 30", 1);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(job(&*h.store, other).state, JobState::Pending, "no new work on the unhealthy GPU");
    let held = h.store.allocations(false).expect("history");
    assert!(history::conflicts(&held, &h.store.gpus().expect("gpus")).is_empty());
    let all = h.store.jobs(&JobFilter::default()).expect("jobs");
    assert_eq!(all.len(), 2);
    let _ = h.stop.send(true);
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_job_that_ignores_sigterm_kills_it_after_the_grace_period() {
    let h = start("1xA100-80GB").await;
    let id = submit(&*h.store, "trap '' TERM; sleep 60 & wait; sleep 60", 1);
    until("the job to run", || Some(job(&*h.store, id)).filter(|j| j.state == JobState::Running)).await;
    let asked = Instant::now();
    h.store.cancel(id, gantry_server::now_ms()).expect("cancel");
    let done =
        until("the job to be cancelled", || Some(job(&*h.store, id)).filter(|j| j.state.is_terminal())).await;
    assert_eq!(done.state, JobState::Cancelled);
    assert!(asked.elapsed() >= Duration::from_millis(900), "SIGKILL only after the grace period");
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_job_using_more_gpu_memory_than_its_grant_is_stopped_with_the_reason() {
    let h = start("1xA100-80GB").await;
    let job_spec = NewJob {
        team: "t".into(),
        name: "greedy".into(),
        spec: SubmitRequest {
            command: vec!["sleep".into(), "60".into()],
            gpu_memory_mib: 10_000,
            ..NewJob::default().spec
        },
        submitted_at: gantry_server::now_ms(),
        ..NewJob::default()
    };
    let id = h.store.submit(&job_spec).expect("submit").0;
    let running =
        until("the job to run", || Some(job(&*h.store, id)).filter(|j| j.state == JobState::Running)).await;
    // A second process of the job grabs 20 GB more than the slice allows.
    let profile = gantry_gpu::UtilProfile::Steady { percent: 50.0 };
    h.gpus_fleet
        .start_process(running.gpu_uuids[0].as_str(), 4_000_000, Some(id.to_string()), 20_000, profile)
        .expect("extra process");
    let ended =
        until("the job to be stopped", || Some(job(&*h.store, id)).filter(|j| j.state.is_terminal())).await;
    assert_eq!(ended.state, JobState::Failed);
    let reason = ended.reason.unwrap_or_default();
    assert!(reason.contains("GPU memory grant exceeded"), "{reason}");
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_fenced_off_while_alive_kills_its_jobs_and_registers_under_a_new_epoch() {
    let h = start("1xA100-80GB").await;
    let marker = h.shared.join("first-attempt-survived");
    let script = format!(
        "if [ ! -e {m}.started ]; then touch {m}.started; sleep 3; touch {m}; else sleep 30; fi",
        m = marker.display()
    );
    let id = submit(&*h.store, &script, 1);
    until("the job to run", || Some(job(&*h.store, id)).filter(|j| j.state == JobState::Running)).await;
    // The node looks silent to the server (a partition): it is marked lost while the agent lives.
    h.store.expire_nodes(i64::MAX, gantry_server::now_ms()).expect("expire");
    let again = until("the job to run again under a new epoch", || {
        Some(job(&*h.store, id)).filter(|j| j.state == JobState::Running && j.attempt == 2)
    })
    .await;
    assert_eq!(again.epoch, Some(2));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(marker.with_extension("started").exists(), "the first attempt ran");
    assert!(!marker.exists(), "the fenced-off first attempt kept running");
    let held = h.store.allocations(false).expect("history");
    assert!(history::conflicts(&held, &h.store.gpus().expect("gpus")).is_empty());
    let _ = h.stop.send(true);
}
