//! `gantry exporter`: the dcgm-exporter-compatible Prometheus exporter.

use super::backend::BackendArgs;
use super::bench::exporter as bench;
use anyhow::Context;
use gantry_agent::exporter::pods::{PodCell, PodMap, PodRef};
use gantry_agent::exporter::sampler::local_hostname;
use gantry_agent::exporter::{Exporter, ExporterConfig, server};
use gantry_gpu::Collector;
use gantry_gpu::findings::FindingsConfig;
use gantry_gpu::health::HealthConfig;
use gantry_k8s::pod_resources::client::{self, Assignment, GpuId};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// `gantry exporter` flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Address to serve /metrics and /healthz on (dcgm-exporter's port by default).
    #[arg(long, default_value = "0.0.0.0:9400")]
    pub listen: SocketAddr,
    /// Time between collections, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub interval_ms: u64,
    /// `hostname` label (default: this machine's hostname).
    #[arg(long)]
    pub hostname: Option<String>,
    /// Seconds without critical events before a recovering GPU is healthy again.
    #[arg(long, default_value_t = 300)]
    pub quiet_period_s: u64,
    /// Seconds before the first re-probe of an unhealthy GPU (doubles on each failure).
    #[arg(long, default_value_t = 10)]
    pub probe_backoff_s: u64,
    /// Utilisation (percent) under which an allocated GPU counts as idle.
    #[arg(long, default_value_t = 5.0)]
    pub idle_below_percent: f64,
    /// Seconds an allocated GPU must stay idle to be flagged.
    #[arg(long, default_value_t = 300)]
    pub idle_window_s: u64,
    /// Memory use (percent of usable) flagged as near the limit.
    #[arg(long, default_value_t = 95.0)]
    pub memory_near_percent: f64,
    /// Where to read process environments and cgroups for job attribution.
    #[arg(long, default_value = "/proc")]
    pub proc_root: PathBuf,
    /// The kubelet's pod-resources socket: on a Kubernetes node, label each GPU's series with
    /// the pod, namespace and container holding it, and each process with its pod UID
    /// (usually /var/lib/kubelet/pod-resources/kubelet.sock; off when not given).
    #[arg(long)]
    pub pod_resources_socket: Option<PathBuf>,
    /// The kubelet's pod log directory (usually /var/log/pods, mounted read-only): with
    /// `--pod-resources-socket`, name the pod (namespace, pod, and container where the layout
    /// tells) of each process series from its `<namespace>_<pod>_<uid>` entries, without any
    /// API-server access. Listed again when an unknown pod UID shows up, at most every 10 s.
    #[arg(long, requires = "pod_resources_socket")]
    pub pod_logs_dir: Option<PathBuf>,
    /// Seconds between pod-resources `List` calls (the answer is cached, never fetched per scrape).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub pod_resources_interval_s: u64,
    #[command(flatten)]
    pub bench: bench::BenchArgs,
}

impl Args {
    /// Validated settings.
    pub fn configs(&self) -> anyhow::Result<(HealthConfig, FindingsConfig, ExporterConfig)> {
        for (name, v) in [
            ("--idle-below-percent", self.idle_below_percent),
            ("--memory-near-percent", self.memory_near_percent),
        ] {
            anyhow::ensure!((0.0..=100.0).contains(&v), "{name} must be between 0 and 100, not {v}");
        }
        let health = HealthConfig {
            quiet_period: Duration::from_secs(self.quiet_period_s),
            probe_backoff_initial: Duration::from_secs(self.probe_backoff_s),
            ..HealthConfig::default()
        };
        let findings = FindingsConfig {
            idle_below_percent: self.idle_below_percent,
            idle_window: Duration::from_secs(self.idle_window_s),
            memory_near_percent: self.memory_near_percent,
            ..FindingsConfig::default()
        };
        let exporter = ExporterConfig {
            interval: Duration::from_millis(self.interval_ms),
            hostname: self.hostname.clone().unwrap_or_else(local_hostname),
            proc_root: self.proc_root.clone(),
            pods: None,
            pod_logs: None,
        };
        Ok((health, findings, exporter))
    }
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(addr) = args.bench.bench_client {
        return bench::client(addr, args.bench.bench_scrapes);
    }
    init_logging();
    if args.bench.bench {
        return bench::run(args);
    }
    let (health, findings, mut cfg) = args.configs()?;
    let opened = args.backend.open()?;
    let rt = runtime()?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(args.listen))
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    if let Some(socket) = &args.pod_resources_socket {
        let cell = Arc::new(PodCell::new());
        cfg.pods = Some(cell.clone());
        cfg.pod_logs.clone_from(&args.pod_logs_dir);
        let every = Duration::from_secs(args.pod_resources_interval_s);
        tracing::info!(socket = %socket.display(), every_s = args.pod_resources_interval_s, "pod attribution on");
        let publish = move |assignments: &[Assignment]| {
            if cell.publish(pod_map(assignments)) {
                tracing::info!(devices = assignments.len(), "pod attribution changed");
            }
        };
        rt.spawn(client::poll(socket.clone(), every, publish, std::future::pending()));
    }
    let exporter = Exporter::start(Collector::new(opened.backend, health, findings), cfg)?;
    tracing::info!(listen = %args.listen, interval_ms = args.interval_ms, "serving /metrics and /healthz");
    let router = server::router(exporter.cell(), exporter.interval() * 3 + Duration::from_secs(10));
    rt.block_on(server::serve(listener, router, shutdown_signal()))?;
    Ok(())
}

/// Who holds which GPU, from the kubelet's assignments (devices that name no GPU are skipped).
pub fn pod_map(assignments: &[Assignment]) -> PodMap {
    let mut map = PodMap::default();
    for a in assignments {
        let holder =
            PodRef { namespace: a.namespace.clone(), pod: a.pod.clone(), container: a.container.clone() };
        match client::gpu_of_device(&a.resource, &a.device_id) {
            Some(GpuId::Uuid(uuid)) => map.add_uuid(&uuid, holder),
            Some(GpuId::Index(index)) => map.add_index(index, holder),
            None => {}
        }
    }
    map
}

/// One thread is plenty: a scrape copies a prepared buffer.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
    tracing::info!("shutting down");
}

/// Logs to stderr, `info` unless `RUST_LOG` says otherwise.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
