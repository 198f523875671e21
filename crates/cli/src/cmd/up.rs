//! `gantry up`: the control plane and a local agent in one process, on an embedded store.
//! The control plane's part is shared with `gantry server` (see [`super::control`]).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gantry_agent::exporter::{self, ExporterConfig};
use gantry_agent::runner::{self, AgentConfig, Gpus, Sandbox};
use gantry_store::Store;

use super::agent::backend_choice;
use super::control::{self, ControlArgs, Prepared};
use super::sandbox::SandboxArgs;

/// Arguments of `gantry up`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry up                                  # server + agent here, simulated GPUs when NVML finds none
  gantry up --data-dir ~/gantry-b --listen 127.0.0.1:7071   # a second cluster, its own context
  gantry up --stop-jobs-on-exit              # Ctrl-C stops running jobs too (default: they keep running)
  gantry up --resize-interval 10m            # elastic jobs change width at most every 10 minutes")]
pub struct UpArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// `auto` (NVML when it initialises, else simulated), `nvml` or `simulated`.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Simulated fleet used when there is no NVIDIA GPU.
    #[arg(long, default_value = "4xA100-80GB")]
    simulated_gpus: String,
    /// Seconds between SIGTERM and SIGKILL when a job is stopped.
    #[arg(long, default_value_t = 10)]
    grace: u64,
    /// Run only the control plane (agents join with `gantry agent`); the same as `gantry server`.
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
    /// Stop every running job when `up` stops (Ctrl-C, SIGTERM). By default jobs keep running
    /// and the next `gantry up` on the same data directory takes them up again.
    #[arg(long)]
    stop_jobs_on_exit: bool,
    /// The address other nodes reach this one at (a host name or an IP address), when its host
    /// name is not: gang workers whose rank 0 runs on the local agent get it as `MASTER_ADDR`.
    #[arg(long, value_name = "ADDR", value_parser = super::agent::advertise_addr, conflicts_with = "no_agent")]
    advertise_addr: Option<String>,
    /// A label of the local node, `KEY=VALUE` (repeatable): `pool=inference` puts it in that
    /// pool (without one it is in `default`).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = super::agent::node_label, conflicts_with = "no_agent")]
    labels: Vec<(String, String)>,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// Runs until Ctrl-C or SIGTERM.
pub fn run(args: UpArgs) -> anyhow::Result<()> {
    let choice = backend_choice(&args.backend, &args.simulated_gpus)?;
    let prepared = control::prepare(&args.control)?;
    let data = &prepared.data;
    let sandbox = if args.no_agent { None } else { Some(args.sandbox.build(data, &data.join("agent"))?) };
    // Checked before anything binds: a bad --allow-source-net exits with its sentence.
    args.sandbox.egress()?;
    let rt = control::runtime()?;
    rt.block_on(serve(args, prepared, choice, sandbox))
}

async fn serve(
    args: UpArgs,
    prepared: Prepared,
    choice: runner::BackendChoice,
    sandbox: Option<Arc<Sandbox>>,
) -> anyhow::Result<()> {
    let control = control::bind(&args.control, prepared).await?;
    let (data, url) = (control.prepared.data.clone(), control.url.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let agent = if let Some(sandbox) = sandbox {
        let mut gpus = Gpus::open(&choice, 1).context("opening GPUs")?;
        println!("{}", gpus.description);
        if !args.no_metrics {
            serve_metrics(&mut gpus, args.metrics_listen, stop_rx.clone()).await;
        }
        let node_id = args.node_id.clone().unwrap_or_else(local_node_id);
        let client_cert = match &control.pki {
            Some(pki) => Some(pki.issue_client(&node_id)?),
            None => None,
        };
        let agent_config = AgentConfig {
            server: url.clone(),
            token: local_credential(&*control.prepared.store, &data, &node_id)?,
            node_id,
            logs_dir: data.join("logs"),
            state_dir: data.join("agent"),
            grace: Duration::from_secs(args.grace),
            ca_pem: control.pki.as_ref().map(|p| p.ca_pem().to_owned()),
            client_cert,
            ship_logs: false,
            sandbox,
            shim: runner::default_shim()?,
            stop_jobs_on_exit: args.stop_jobs_on_exit,
            advertise_addr: args.advertise_addr.clone(),
            labels: args.labels.iter().cloned().collect(),
            cache: args.sandbox.cache()?,
            egress: args.sandbox.egress()?,
            server_socket: control.server.socket_path().map(Path::to_path_buf),
            images: args.sandbox.images()?,
        };
        Some(tokio::spawn(runner::run(agent_config, gpus, stop_rx)))
    } else {
        None
    };
    let jobs = if args.stop_jobs_on_exit || args.no_agent { "" } else { " (running jobs keep running)" };
    println!("gantry is up at {url} (data in {}); Ctrl-C stops it{jobs}", data.display());
    let (server_stop_tx, server_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(control.server.serve(async move {
        let _ = server_stop_rx.await;
    }));
    shutdown_signal().await;
    match (args.no_agent, args.stop_jobs_on_exit) {
        (true, _) => eprintln!("shutting down"),
        (false, true) => eprintln!("shutting down: stopping jobs, then the server"),
        (false, false) => eprintln!("shutting down; {}", still_running(&*control.prepared.store)),
    }
    let _ = stop_tx.send(true);
    if let Some(agent) = agent {
        agent.await?.context("agent failed")?;
    }
    let _ = server_stop_tx.send(());
    serving.await??;
    drop(control.prepared);
    Ok(())
}

/// What keeps running when `up` stops without `--stop-jobs-on-exit`, and how it is taken back.
fn still_running(store: &dyn Store) -> String {
    let filter =
        gantry_store::JobFilter { state: Some(gantry_store::JobState::Running), ..Default::default() };
    let ids: Vec<String> = store.jobs(&filter).unwrap_or_default().iter().map(|j| j.id.to_string()).collect();
    match ids.len() {
        0 => "no job is running".into(),
        n => {
            let shown = if n > 10 { format!("{}, …", ids[..10].join(", ")) } else { ids.join(", ") };
            let (count, verb) = if n == 1 {
                ("1 running job".to_owned(), "keeps")
            } else {
                (format!("{n} running jobs"), "keep")
            };
            format!(
                "{count} ({shown}) {verb} running under their supervisors; the next `gantry up` with this \
                 data dir takes them back (`gantry up --stop-jobs-on-exit` stops them instead)"
            )
        }
    }
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

/// The local agent's node credential, kept where the agent looks for it
/// (`<data>/agent/credential`); created on first start.
fn local_credential(store: &dyn Store, data: &Path, node_id: &str) -> anyhow::Result<String> {
    let path = gantry_agent::runner::credential::path(&data.join("agent"));
    if let Ok(token) = std::fs::read_to_string(&path) {
        let token = token.trim().to_owned();
        let found = gantry_server::credentials::usable(store, &token)?;
        if found.is_some_and(|t| t.node.as_deref() == Some(node_id)) {
            return Ok(token);
        }
    }
    let token = gantry_server::create_node_credential(store, node_id)?;
    gantry_agent::runner::credential::save(&path, &token)?;
    Ok(token)
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
