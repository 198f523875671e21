//! `gantry up`: the control plane and a local agent in one process, on an embedded store.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gantry_agent::exporter::{self, ExporterConfig};
use gantry_agent::runner::{self, AgentConfig, Gpus};
use gantry_core::PolicyKind;
use gantry_server::{Server, ServerConfig};
use gantry_store::{SqliteStore, Store};

use super::agent::backend_choice;
use super::client::{self, ClientConfig, home};

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
    let choice = backend_choice(&args.backend, &args.simulated_gpus)?;
    let _lock = lock_data_dir(&data)?;
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&data).with_context(|| format!("cannot open the store in {}", data.display()))?,
    );
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(serve(args, data, store, choice))
}

async fn serve(
    args: UpArgs,
    data: PathBuf,
    store: Arc<dyn Store>,
    choice: runner::BackendChoice,
) -> anyhow::Result<()> {
    let mut config = ServerConfig::local(data.join("logs"));
    config.listen = args.listen;
    config.policy = args.policy;
    config.heartbeat_timeout = Duration::from_secs_f64(args.heartbeat_timeout);
    let server = Server::bind(config, Arc::clone(&store)).await?;
    let url = format!("http://{}", server.local_addr()?);
    announce_tokens(&*store, &url)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let agent = if args.no_agent {
        None
    } else {
        let mut gpus = Gpus::open(&choice, 1).context("opening GPUs")?;
        println!("{}", gpus.description);
        if !args.no_metrics {
            serve_metrics(&mut gpus, args.metrics_listen, stop_rx.clone()).await;
        }
        let node_id = args.node_id.clone().unwrap_or_else(local_node_id);
        let agent_config = AgentConfig {
            server: url.clone(),
            token: local_credential(&*store, &data, &node_id)?,
            node_id,
            logs_dir: data.join("logs"),
            state_dir: data.join("agent"),
            grace: Duration::from_secs(args.grace),
        };
        Some(tokio::spawn(runner::run(agent_config, gpus, stop_rx)))
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

/// Points the client config at this server and, unless it already holds a usable token of this
/// store (a fresh store, or the saved token expired, was revoked or belongs to another cluster),
/// creates an admin token and saves it there. Whoever may run `up` on this data directory owns
/// its database anyway. The secret goes to the config file (0600) only, never to the terminal.
fn announce_tokens(store: &dyn Store, url: &str) -> anyhow::Result<()> {
    let mut saved = client::load_config().unwrap_or_default();
    saved.server = Some(url.to_owned());
    let now = gantry_server::now_ms();
    let usable = |secret: &String| {
        let found = store.token_by_hash(&gantry_server::auth::hash(secret)).ok().flatten();
        found.is_some_and(|t| t.refusal(now).is_none() && t.role == gantry_store::Role::Admin)
    };
    let fresh = !saved.token.as_ref().is_some_and(usable);
    if fresh {
        let admin =
            gantry_store::User { name: "admin".into(), role: gantry_store::Role::Admin, teams: Vec::new() };
        let ttl = gantry_server::credentials::ADMIN_TOKEN_TTL;
        saved.token = Some(gantry_server::create_user_token(store, &admin, ttl)?);
    }
    let path = client::save_config(&ClientConfig { ..saved })?;
    if fresh {
        println!("created an admin token; it is saved in {} (readable by you only)", path.display());
        println!("  other accounts or machines: `gantry token create` a token for them");
    }
    Ok(())
}

/// The local agent's node credential, kept where the agent looks for it
/// (`<data>/agent/credential`); created on first start.
fn local_credential(store: &dyn Store, data: &Path, node_id: &str) -> anyhow::Result<String> {
    let path = gantry_agent::runner::credential::path(&data.join("agent"));
    if let Ok(token) = std::fs::read_to_string(&path) {
        let token = token.trim().to_owned();
        let found = store.token_by_hash(&gantry_server::auth::hash(&token))?;
        let now = gantry_server::now_ms();
        if found.is_some_and(|t| t.node.as_deref() == Some(node_id) && t.refusal(now).is_none()) {
            return Ok(token);
        }
    }
    let token = gantry_server::create_node_credential(store, node_id)?;
    gantry_agent::runner::credential::save(&path, &token)?;
    Ok(token)
}

/// Holds an exclusive lock on `<data>/gantry.lock` for the life of the process (released by the
/// kernel even on SIGKILL), so two `gantry up` never share a store.
fn lock_data_dir(data: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(data).with_context(|| format!("cannot create {}", data.display()))?;
    let file = std::fs::File::create(data.join("gantry.lock"))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            anyhow::bail!("another gantry up is already using {}", data.display())
        }
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
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
