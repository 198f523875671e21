//! `gantry device-plugin`: the kubelet device plugin for `gantry.dev/gpu` and
//! `gantry.dev/gpu-memory`.
//!
//! Thin: validate flags, open the GPU backend, start the health monitor, then
//! `gantry_k8s::device_plugin::run` until SIGTERM/SIGINT.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gantry_gpu::Collector;
use gantry_gpu::findings::FindingsConfig;
use gantry_gpu::health::HealthConfig;
use gantry_k8s::device_plugin::api::DEFAULT_DIR;
use gantry_k8s::device_plugin::{Devices, HealthMonitor, PluginConfig, run as serve};

use super::backend::BackendArgs;
use super::exporter::{init_logging, runtime};
use super::up::shutdown_signal;

/// `gantry device-plugin` flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub backend: BackendArgs,
    /// The kubelet's device-plugins directory (holds kubelet.sock; our sockets go there too).
    #[arg(long, default_value = DEFAULT_DIR)]
    pub kubelet_dir: PathBuf,
    /// GPU indices offered as memory slices (`gantry.dev/gpu-memory`, MiB) instead of whole GPUs
    /// (`gantry.dev/gpu`), comma-separated, e.g. `6,7`. Default: none, every GPU is whole.
    #[arg(long, value_delimiter = ',', value_name = "INDEX,...")]
    pub slice_gpus: Vec<u32>,
    /// Time between health checks of the GPUs, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub interval_ms: u64,
    /// Seconds without critical events before a recovering GPU is healthy again.
    #[arg(long, default_value_t = 300)]
    pub quiet_period_s: u64,
    /// Seconds before the first re-probe of an unhealthy GPU (doubles on each failure).
    #[arg(long, default_value_t = 10)]
    pub probe_backoff_s: u64,
    /// How often to look for a kubelet restart (kubelet.sock re-created), in milliseconds.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub kubelet_poll_ms: u64,
}

/// Runs the device plugin until SIGINT/SIGTERM.
pub fn run(args: Args) -> anyhow::Result<()> {
    init_logging();
    anyhow::ensure!(
        args.kubelet_dir.is_dir(),
        "--kubelet-dir {} is not a directory (is the kubelet's device-plugins directory mounted?)",
        args.kubelet_dir.display()
    );
    let opened = args.backend.open()?;
    let devices = Devices::new(opened.backend.inventory(), &args.slice_gpus)?;
    anyhow::ensure!(!devices.resources().is_empty(), "no GPUs found: nothing to offer the kubelet");
    devices.check_message_size()?;
    let health = HealthConfig {
        quiet_period: Duration::from_secs(args.quiet_period_s),
        probe_backoff_initial: Duration::from_secs(args.probe_backoff_s),
        ..HealthConfig::default()
    };
    let collector = Collector::new(opened.backend, health, FindingsConfig::default());
    let monitor = HealthMonitor::start(collector, Duration::from_millis(args.interval_ms))
        .context("starting the GPU health thread")?;
    let cfg =
        PluginConfig { dir: args.kubelet_dir.clone(), poll: Duration::from_millis(args.kubelet_poll_ms) };
    let rt = runtime()?;
    rt.block_on(serve(cfg, Arc::new(devices), monitor.subscribe(), shutdown_signal()))?;
    tracing::info!("device plugin stopped");
    Ok(())
}
