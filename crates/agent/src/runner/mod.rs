//! The job runner: register, then heartbeat ([`beat`]): each heartbeat carries GPU health and
//! samples and the state of every local job; the answer lists the jobs this node must run, and
//! [`jobs::Jobs::reconcile`] starts and stops processes to match. The server holds each
//! heartbeat until the node's work changes (or an interval passes), so new work, cancels and
//! preemptions arrive without waiting for a poll; an older server is polled every interval.
//! A 409 answer (stale epoch) means the server fenced this agent off: everything is killed at
//! once and the node registers again under a new epoch.
//!
//! Jobs run in a sandbox ([`sandbox`]): their own user, directory, environment, cgroup and, when
//! the agent is root and has the CNI plugins, network namespace ([`network`]), with their output
//! copied through pipes to capped files ([`logs`]).
//!
//! Jobs outlive the agent: each attempt is supervised by its own shim process ([`shim`]), and
//! the agent keeps a record of it ([`record`]). A restarted agent adopts the attempts whose shim
//! still runs (checked by pid and start time), reports those that ended meanwhile with their
//! real exit, and registers with the list of both, so the server keeps them instead of
//! requeueing them. Stopping the agent leaves its jobs running unless
//! [`AgentConfig::stop_jobs_on_exit`] is set.

pub mod attempt;
pub mod backoff;
pub mod beat;
pub mod bpf_devices;
pub mod cache;
pub mod cgroup;
pub mod child;
pub mod client;
pub mod cni;
pub mod credential;
pub mod devices;
pub mod egress;
pub mod env;
pub mod error;
pub mod gpus;
pub mod guard;
pub mod images;
pub mod jobs;
pub mod logs;
pub mod meter;
pub mod mounts;
pub mod netns;
pub mod network;
pub mod outputs;
pub mod process;
pub mod record;
pub mod sandbox;
pub mod shim;
pub mod ship;
pub mod sources;
pub mod stage;
pub mod team_user;
pub mod upload;
pub mod users;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gantry_api::model::AttemptRef;
use gantry_api::types::RegisterRequest;
use tokio::sync::{mpsc, watch};

pub use client::Client;
pub use error::AgentError;
pub use gpus::{BackendChoice, Gpus};
pub use sandbox::{Sandbox, SandboxConfig};

/// Validated agent settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Server base URL, e.g. `http://127.0.0.1:7070`, or several replicas' separated by commas
    /// (`https://a:7070,https://b:7070`): requests fail over between them ([`client`]).
    pub server: String,
    /// A one-time join token, used when `<state_dir>/credential` does not exist yet (the node's
    /// credential is stored there after joining).
    pub token: String,
    /// Stable node id.
    pub node_id: String,
    /// Where job output goes (`<job id>/stdout`, `stderr`).
    pub logs_dir: PathBuf,
    /// Where the agent keeps pid files and its sandbox scope.
    pub state_dir: PathBuf,
    /// Time between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Send job output to the server in heartbeats (an agent that does not share the server's
    /// data directory; `gantry up`'s own agent writes where the server reads).
    pub ship_logs: bool,
    /// The cluster CA to pin (PEM); `None` trusts the system's roots.
    pub ca_pem: Option<String>,
    /// A client certificate and its key (PEM) for mutual TLS.
    pub client_cert: Option<(String, String)>,
    /// Users, work directories and cgroups of jobs (built from the same `state_dir`).
    pub sandbox: Arc<Sandbox>,
    /// The executable started as each attempt's shim, with the argument [`shim::ARG`] (the
    /// `gantry` binary itself: [`default_shim`]).
    pub shim: PathBuf,
    /// Stop every job (SIGTERM, grace, SIGKILL) when the agent stops; by default they keep
    /// running and the next start of the agent takes them up again.
    pub stop_jobs_on_exit: bool,
    /// The address this node's peers reach it at, when not its host name (validated by the
    /// caller with [`gantry_api::types::address_problem`]; the server checks it again).
    pub advertise_addr: Option<String>,
    /// Labels the node declares (`--label pool=inference`): its pool and what node selectors
    /// match.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The dataset cache's limits (`--cache-size`, `--cache-team-quota`).
    pub cache: cache::CacheConfig,
    /// The networks and hosts an admin opened to jobs' sources and outputs
    /// (`--allow-source-net`, `--allow-source-host`); by default none of the node's own.
    pub egress: Arc<egress::Egress>,
    /// How this node pulls and runs container images (`--insecure-registry`, `--oci-runtime`,
    /// `--pull-stall-timeout`).
    pub images: images::ImagesConfig,
    /// The server's unix socket when it runs on this machine (`gantry up`'s own agent): requests
    /// go through it, where no number of TCP connections to the server can hold them out.
    pub server_socket: Option<PathBuf>,
}

/// The running executable, which serves as the shim when run with [`shim::ARG`].
pub fn default_shim() -> Result<PathBuf, AgentError> {
    std::env::current_exe()
        .map_err(|source| AgentError::Io { what: "finding the agent's own executable".into(), source })
}

/// Runs the agent until `stop` turns true; then leaves its jobs running, or with
/// [`AgentConfig::stop_jobs_on_exit`] stops them (SIGTERM, grace, SIGKILL).
pub async fn run(config: AgentConfig, gpus: Gpus, mut stop: watch::Receiver<bool>) -> Result<(), AgentError> {
    logs::private_dir(&config.logs_dir)?;
    process::kill_orphans(&config.state_dir);
    let (exit_tx, mut exits) = mpsc::unbounded_channel();
    let (fetched_tx, mut fetched) = mpsc::unbounded_channel();
    let ctx = attempt::Context {
        sandbox: Arc::clone(&config.sandbox),
        logs: config.logs_dir.clone(),
        state: config.state_dir.clone(),
        shim: config.shim.clone(),
        minors: Arc::new(gpus.minors()),
        images: match images::Images::open(&config.state_dir, &config.images, Arc::clone(&config.egress)) {
            Ok(i) => Some(Arc::new(i)),
            Err(e) => {
                tracing::warn!(error = %e, "container images are not available on this node");
                None
            }
        },
    };
    let images = ctx.images.clone();
    let mut jobs = jobs::Jobs::new(exit_tx, fetched_tx, ctx, config.grace);
    let keep = jobs.recover(record::recover(&config.state_dir), &gpus);
    let sandbox = Arc::clone(&config.sandbox);
    let _ = tokio::task::spawn_blocking(move || sandbox.remove_orphans_except(&keep)).await;
    let identity = loop {
        match credential::obtain(&config).await {
            Ok(identity) => break identity,
            Err(AgentError::Status { status: 401 | 403, body }) => {
                return Err(AgentError::CredentialRefused(body));
            }
            Err(e) => tracing::warn!(error = %e, "joining failed; retrying"),
        }
        tokio::select! {
            _ = stop.changed() => {
                stop_jobs(&config, &mut jobs, &mut exits, &gpus).await;
                return Ok(());
            }
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    };
    let client_cert =
        identity.client_cert.as_ref().or(config.client_cert.as_ref()).map(|(c, k)| (c.as_str(), k.as_str()));
    let client = Client::with_socket(
        &config.server,
        &identity.credential,
        config.ca_pem.as_deref(),
        client_cert,
        config.server_socket.as_deref(),
    )?;
    jobs.set_client(client.clone());
    let reporter = Arc::new(
        outputs::Reporter::new(client.clone(), config.node_id.clone())
            .with_egress(Arc::clone(&config.egress)),
    );
    jobs.set_reporter(Arc::clone(&reporter));
    let cache_root = config.sandbox.cache_root();
    let cache = cache::Cache::open(&cache_root, config.cache).map_err(|e| {
        AgentError::Sandbox(format!("opening the dataset cache at {}: {e}", cache_root.display()))
    })?;
    let cache_metrics = Arc::new(crate::exporter::cache::CacheMetrics::new(&config.node_id));
    gpus.publish_cache(Arc::clone(&cache_metrics));
    let stager = Arc::new(
        stage::Stager::new(Arc::new(cache), Arc::clone(&config.sandbox))
            .with_metrics(cache_metrics)
            .with_egress(Arc::clone(&config.egress))
            .with_images(images.clone()),
    );
    jobs.set_stager(Arc::clone(&stager));
    // Held for its drop: the previous registration's loop ends as the next starts, and the
    // last one with `run`.
    let mut _staging: Option<stage::AbortOnDrop> = None;
    let mut shipper = config.ship_logs.then(|| ship::Shipper::new(config.logs_dir.clone()));
    let inventory = gpus.inventory();
    config.sandbox.set_node_gpus(inventory.len());
    let capacity = config.sandbox.capacity(node_cpu_milli(), node_memory_mib());
    let mut register = RegisterRequest {
        node_id: config.node_id.clone(),
        hostname: hostname(),
        advertise_addr: config.advertise_addr.clone(),
        network: config.sandbox.network_kind(),
        cpu_milli: capacity.0,
        memory_mib: capacity.1,
        gpus: inventory,
        job_defaults: Some(config.sandbox.job_defaults()),
        attempts: Vec::new(),
        labels: config.labels.clone(),
    };
    let mut registering = backoff::Backoff::new(Duration::from_secs(1));
    'register: loop {
        let (epoch, interval) = loop {
            register.attempts =
                jobs.claims().into_iter().map(|(job_id, attempt)| AttemptRef { job_id, attempt }).collect();
            match client.register(&register).await {
                Ok(r) => {
                    log_change("registration", registering.succeeded(), None);
                    break (r.epoch, Duration::from_millis(r.heartbeat_interval_ms.max(50)));
                }
                Err(AgentError::Status { status: 401, body }) => {
                    registering.failed();
                    tracing::error!(%body, "the node credential was refused (revoked?); remove {} and join with a new join token",
                        credential::path(&config.state_dir).display());
                }
                Err(e) => log_change("registration", registering.failed(), Some(&e)),
            }
            tokio::select! {
                _ = stop.changed() => {
                    stop_jobs(&config, &mut jobs, &mut exits, &gpus).await;
                    return Ok(());
                }
                () = tokio::time::sleep(registering.delay(backoff::jitter())) => {}
            }
        };
        tracing::info!(node = %config.node_id, epoch, "registered");
        reporter.set_epoch(epoch);
        let reporting = stage::report_loop(
            Arc::clone(&stager),
            images.clone(),
            client.clone(),
            config.node_id.clone(),
            epoch,
        );
        _staging = Some(stage::AbortOnDrop(tokio::spawn(reporting)));
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut beating = backoff::Backoff::new(interval);
        let mut retry_at = tokio::time::Instant::now();
        let mut beats = beat::Beats::new(client.clone(), interval);
        let node = config.node_id.as_str();
        loop {
            tokio::select! {
                _ = stop.changed() => {
                    stop_jobs(&config, &mut jobs, &mut exits, &gpus).await;
                    return Ok(());
                }
                Some(exit) = exits.recv() => {
                    jobs.exited(exit, &gpus);
                    beats.wake(node);
                }
                Some(done) = fetched.recv() => jobs.fetched(done, &gpus),
                _ = tick.tick() => {
                    jobs.enforce_time_limits();
                    jobs.enforce_grace();
                    // A server that holds heartbeats has one in flight; else this tick polls.
                    if beats.idle() && tokio::time::Instant::now() >= retry_at {
                        beats.send(node, epoch, &gpus, &mut jobs, shipper.as_mut());
                    }
                }
                beat = beats.answered() => match beat.answer {
                    Ok(resp) => {
                        log_change("heartbeat", beating.succeeded(), None);
                        if let Some(s) = &mut shipper {
                            s.acknowledged(&beat.heartbeat.logs);
                        }
                        jobs.acknowledged(&beat.heartbeat.jobs);
                        jobs.reconcile(resp.assignments, &gpus);
                        if beats.held() {
                            // At once: the server holds it until there is news (a start, a stop).
                            beats.send(node, epoch, &gpus, &mut jobs, shipper.as_mut());
                        }
                    }
                    Err(AgentError::Fenced(why)) => {
                        tracing::warn!(%why, "fenced by the server; stopping all jobs and registering again");
                        jobs.kill_all(&gpus);
                        continue 'register;
                    }
                    Err(e) => {
                        log_change("heartbeat", beating.failed(), Some(&e));
                        retry_at = tokio::time::Instant::now() + beating.delay(backoff::jitter());
                    }
                },
            }
        }
    }
}

/// What a stopping agent does with its jobs: by default leaves them to their shims (the next
/// start takes them up); with `stop_jobs_on_exit` stops them all and releases the sandbox.
async fn stop_jobs(
    config: &AgentConfig,
    jobs: &mut jobs::Jobs,
    exits: &mut mpsc::UnboundedReceiver<attempt::Ended>,
    gpus: &Gpus,
) {
    if config.stop_jobs_on_exit {
        jobs.shutdown(exits, gpus).await;
        config.sandbox.release();
    } else if !jobs.claims().is_empty() {
        tracing::info!(
            jobs = jobs.claims().len(),
            "leaving the jobs running; the next start of the agent takes them up"
        );
    }
}

/// One line per change of the server's reachability, not one per try.
fn log_change(what: &str, change: backoff::Change, error: Option<&AgentError>) {
    let error = error.map(ToString::to_string).unwrap_or_default();
    match change {
        backoff::Change::Failing => tracing::warn!(
            %error,
            "{what} failed; retrying with back-off (up to {} s), logged again when it succeeds",
            backoff::MAX.as_secs()
        ),
        backoff::Change::StillFailing => tracing::debug!(%error, "{what} failed again"),
        backoff::Change::Recovered(n) => tracing::info!("{what} succeeded again after {n} failed tries"),
        backoff::Change::Fine => {}
    }
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "localhost".into(), |h| h.trim().to_owned())
}

/// The node's CPUs, milli-cores.
pub fn node_cpu_milli() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64) * 1000
}

/// The node's memory, MiB.
pub fn node_memory_mib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}
