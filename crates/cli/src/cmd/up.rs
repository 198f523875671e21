//! `gantry up`: the control plane and a local agent in one process, on an embedded store.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gantry_agent::exporter::{self, ExporterConfig};
use gantry_agent::runner::{self, AgentConfig, Gpus, Sandbox};
use gantry_core::PolicyKind;
use gantry_server::{Server, ServerConfig};
use gantry_store::{Role, SqliteStore, Store};

use super::agent::backend_choice;
use super::client::{self, ClientConfig, home};
use super::sandbox::{SandboxArgs, parse_size};

/// Arguments of `gantry up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Where the store, job logs and agent state live (default `$XDG_DATA_HOME/gantry` or
    /// `~/.local/share/gantry`).
    #[arg(long, env = "GANTRY_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// `auto` (NVML when it initialises, else simulated), `nvml` or `simulated`.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Simulated fleet used when there is no NVIDIA GPU.
    #[arg(long, default_value = "4xA100-80GB")]
    simulated_gpus: String,
    /// Placement policy.
    #[arg(long, default_value = "gantry")]
    policy: PolicyKind,
    /// Seconds without heartbeat before an agent is lost.
    #[arg(long, default_value_t = 10.0)]
    heartbeat_timeout: f64,
    /// Seconds between SIGTERM and SIGKILL when a job is stopped.
    #[arg(long, default_value_t = 10)]
    grace: u64,
    /// Run only the control plane (agents join with `gantry agent`).
    #[arg(long)]
    no_agent: bool,
    /// Node id of the local agent (default: the host name).
    #[arg(long)]
    node_id: Option<String>,
    /// Where the local agent serves its GPUs' metrics (dcgm-exporter's names, port and labels,
    /// plus per-job attribution); if the address is taken, `up` runs without them and says so.
    #[arg(long, default_value = "127.0.0.1:9400")]
    metrics_listen: SocketAddr,
    /// Do not serve GPU metrics.
    #[arg(long)]
    no_metrics: bool,
    /// Most output kept per job and stream (stdout, stderr), e.g. `64MiB`; older output is
    /// rotated away.
    #[arg(long, default_value = "64MiB")]
    log_limit: String,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// Runs until Ctrl-C or SIGTERM.
pub fn run(args: UpArgs) -> anyhow::Result<()> {
    let data = match &args.data_dir {
        Some(d) => d.clone(),
        None => default_data_dir()?,
    };
    if !(0.5..=3600.0).contains(&args.heartbeat_timeout) {
        anyhow::bail!("--heartbeat-timeout must be between 0.5 and 3600 seconds");
    }
    let log_limit = parse_size(&args.log_limit).context("--log-limit")?;
    if log_limit < 4096 {
        anyhow::bail!("--log-limit must be at least 4KiB");
    }
    let choice = backend_choice(&args.backend, &args.simulated_gpus)?;
    let _lock = lock_data_dir(&data)?;
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&data).with_context(|| format!("cannot open the store in {}", data.display()))?,
    );
    let sandbox = if args.no_agent { None } else { Some(args.sandbox.build(&data, &data.join("agent"))?) };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(serve(args, data, store, choice, sandbox, log_limit))
}

async fn serve(
    args: UpArgs,
    data: PathBuf,
    store: Arc<dyn Store>,
    choice: runner::BackendChoice,
    sandbox: Option<Arc<Sandbox>>,
    log_limit: u64,
) -> anyhow::Result<()> {
    let mut config = ServerConfig::local(data.join("logs"));
    config.listen = args.listen;
    config.policy = args.policy;
    config.heartbeat_timeout = Duration::from_secs_f64(args.heartbeat_timeout);
    config.log_limit_bytes = log_limit;
    let server = Server::bind(config, Arc::clone(&store)).await?;
    let url = format!("http://{}", server.local_addr()?);
    announce_tokens(&*store, &url)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let agent = if let Some(sandbox) = sandbox {
        let mut gpus = Gpus::open(&choice, 1).context("opening GPUs")?;
        println!("{}", gpus.description);
        if !args.no_metrics {
            serve_metrics(&mut gpus, args.metrics_listen, stop_rx.clone()).await;
        }
        let agent_config = AgentConfig {
            server: url.clone(),
            token: agent_token(&*store, &data)?,
            node_id: args.node_id.clone().unwrap_or_else(local_node_id),
            logs_dir: data.join("logs"),
            state_dir: data.join("agent"),
            grace: Duration::from_secs(args.grace),
            sandbox,
        };
        Some(tokio::spawn(runner::run(agent_config, gpus, stop_rx)))
    } else {
        None
    };
    println!("gantry is up at {url} (data in {}); Ctrl-C stops it", data.display());
    let (server_stop_tx, server_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async move {
        let _ = server_stop_rx.await;
    }));
    shutdown_signal().await;
    eprintln!("shutting down: stopping jobs, then the server");
    let _ = stop_tx.send(true);
    if let Some(agent) = agent {
        agent.await?.context("agent failed")?;
    }
    let _ = server_stop_tx.send(());
    serving.await??;
    Ok(())
}

/// Serves the agent's GPU collections on `/metrics`; a taken address is a warning, not a failure
/// (another exporter may already own dcgm-exporter's port).
async fn serve_metrics(gpus: &mut Gpus, listen: SocketAddr, mut stop: tokio::sync::watch::Receiver<bool>) {
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "warning: GPU metrics are not served: cannot listen on {listen}: {e} (see --metrics-listen)"
            );
            return;
        }
    };
    let cell = gpus.publish_metrics(&ExporterConfig::new());
    let router = exporter::server::router(cell, Duration::from_secs(30));
    let addr = listener.local_addr().map_or_else(|_| listen.to_string(), |a| a.to_string());
    println!("GPU metrics (dcgm-exporter names) at http://{addr}/metrics");
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop.changed().await;
        };
        if let Err(e) = exporter::server::serve(listener, router, shutdown).await {
            tracing::warn!(error = %e, "GPU metrics server stopped");
        }
    });
}

/// On a fresh store, creates the admin token, prints it and saves it to the client config.
fn announce_tokens(store: &dyn Store, url: &str) -> anyhow::Result<()> {
    let mut saved = client::load_config().unwrap_or_default();
    saved.server = Some(url.to_owned());
    match gantry_server::ensure_admin_token(store)? {
        Some(token) => {
            saved.token = Some(token.clone());
            let path = client::save_config(&saved)?;
            println!("created an admin token; it is saved in {} for this user:", path.display());
            println!(
                "  export GANTRY_SERVER={url} GANTRY_TOKEN={token}   # only needed on other accounts/machines"
            );
        }
        None => {
            if saved.token.is_none() {
                eprintln!(
                    "note: the admin token was shown on first start; set GANTRY_TOKEN to use this server"
                );
            }
            client::save_config(&ClientConfig { ..saved })?;
        }
    }
    Ok(())
}

/// The local agent's join token, kept in `<data>/agent-token`.
fn agent_token(store: &dyn Store, data: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = data.join("agent-token");
    if let Ok(token) = std::fs::read_to_string(&path) {
        return Ok(token.trim().to_owned());
    }
    let token = gantry_server::create_token(store, Role::Agent, None, "local agent")?;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    std::io::Write::write_all(&mut file, token.as_bytes())?;
    Ok(token)
}

/// Holds an exclusive lock on `<data>/gantry.lock` for the life of the process (released by the
/// kernel even on SIGKILL), so two `gantry up` never share a store.
///
/// A run killed while starting a job leaves a forked child that holds copies of its descriptors,
/// the lock's too, until it execs (a few milliseconds, longer on a loaded machine): a restart
/// right after a crash waits that long before calling the store taken.
fn lock_data_dir(data: &Path) -> anyhow::Result<std::fs::File> {
    const PATIENCE: Duration = Duration::from_secs(3);
    std::fs::create_dir_all(data).with_context(|| format!("cannot create {}", data.display()))?;
    let file = std::fs::File::create(data.join("gantry.lock"))?;
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                anyhow::bail!("another gantry up is already using {}", data.display())
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
        }
    }
}

fn default_data_dir() -> anyhow::Result<PathBuf> {
    match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir).join("gantry")),
        None => Ok(home()?.join(".local/share/gantry")),
    }
}

fn local_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let id: String =
        host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).collect();
    if id.is_empty() { "local".into() } else { id }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
