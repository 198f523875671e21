//! `gantry extender`: the kube-scheduler extender (filter, prioritize, bind) on the core's policy.
//!
//! Thin: validate flags, load the optional node list, serve `gantry_k8s::extender::router`.
//! Until the API-server watcher lands, the model is filled from `--nodes` and by `/bind`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use gantry_core::NodeSpec;
use gantry_k8s::extender::{Model, bench, router};

use super::exporter::{init_logging, runtime};
use super::up::shutdown_signal;

/// `gantry extender` flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address kube-scheduler calls (`urlPrefix` in the KubeSchedulerConfiguration).
    #[arg(long, default_value = "127.0.0.1:8888")]
    pub listen: SocketAddr,
    /// JSON list of nodes (`name`, `cpu_milli`, `memory_mib`, `gpus`, `gpu_model`, `gpu_memory_mib`).
    #[arg(long)]
    pub nodes: Option<PathBuf>,
    /// Instead of serving: time filter+prioritize on a model of this many nodes against a
    /// plain best-fit scorer, print p50/p99 and the p99 ratio, and exit.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub bench_nodes: Option<u64>,
}

/// Runs the extender until SIGINT/SIGTERM (or the benchmark).
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(n) = args.bench_nodes {
        println!("{}", bench::run(n as usize, 1000));
        return Ok(());
    }
    init_logging();
    let mut model = Model::gantry();
    if let Some(path) = &args.nodes {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let specs: Vec<NodeSpec> = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a JSON list of nodes", path.display()))?;
        for spec in specs {
            model.upsert_node(spec)?;
        }
    }
    let app = router(Arc::new(Mutex::new(model)));
    let rt = runtime()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        tracing::info!(listen = %args.listen, "gantry extender serving /filter, /prioritize, /bind");
        axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await?;
        anyhow::Ok(())
    })
}
