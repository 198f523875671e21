//! `gantry extender`: the kube-scheduler extender (filter, prioritize, bind) on the core's policy.
//!
//! Thin: validate flags, pick the mode, serve `gantry_k8s::extender::routes`. Two modes, said on
//! stderr at start:
//! - default: connect to the API server (in-cluster service account, else the kubeconfig), keep
//!   the model from its nodes and pods with watchers, create `Binding`s; no API server is an
//!   error that names `--no-kube`;
//! - `--no-kube`: no API server; the model holds the `--nodes` list and this extender's own binds,
//!   and `/bind` records only (tests, local runs).
//!
//! `/bind` creates Bindings with the extender's service account, so the listener is guarded:
//! with `--tls-cert`, `--tls-key` and `--client-ca` it serves HTTPS and refuses any client without
//! a certificate signed by the CA (kube-scheduler's `tlsConfig`); without them it listens on a
//! loopback address only, unless `--insecure-listen` says an open port is intended.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use gantry_core::NodeSpec;
use gantry_k8s::extender::{Binder, Extender, Model, bench, routes, tls, watch};
use gantry_server::transport::{self, Limits};

use super::exporter::{init_logging, runtime};
use super::up::shutdown_signal;

/// `gantry extender` flags.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gantry extender --listen 0.0.0.0:8888 --tls-cert tls.crt --tls-key tls.key \
    --client-ca ca.crt\n  gantry extender --listen 127.0.0.1:8888 --gang-timeout 60\n  \
    gantry extender --no-kube --nodes nodes.json\n  gantry extender --bench-nodes 1000"
)]
pub struct Args {
    /// Address kube-scheduler calls (`urlPrefix` in the KubeSchedulerConfiguration). A
    /// non-loopback address needs the TLS flags (or `--insecure-listen`).
    #[arg(long, default_value = "127.0.0.1:8888")]
    pub listen: SocketAddr,
    /// Serve HTTPS with this certificate (PEM, chain first); needs `--tls-key` and `--client-ca`.
    #[arg(long, requires_all = ["tls_key", "client_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, requires_all = ["tls_cert", "client_ca"])]
    pub tls_key: Option<PathBuf>,
    /// CA certificate(s) (PEM) that sign the clients' certificates: a client (kube-scheduler)
    /// without a certificate signed by one of them is refused at the TLS handshake.
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    pub client_ca: Option<PathBuf>,
    /// Allow plain HTTP without client authentication on a non-loopback `--listen`: anyone who
    /// can reach the port can then bind pods to nodes. For networks locked down otherwise.
    #[arg(long, conflicts_with = "tls_cert")]
    pub insecure_listen: bool,
    /// Run without an API server: the model holds `--nodes` and this extender's own binds, and
    /// `/bind` records the decision without creating a `Binding`.
    #[arg(long)]
    pub no_kube: bool,
    /// JSON list of nodes (`name`, `cpu_milli`, `memory_mib`, `gpus`, `gpu_model`,
    /// `gpu_memory_mib`); with `--no-kube` only (otherwise nodes come from the API server).
    #[arg(long, requires = "no_kube")]
    pub nodes: Option<PathBuf>,
    /// Seconds a gang (pods sharing the `gantry.dev/gang` annotation) may hold partial
    /// reservations before they are released; kube-scheduler's `httpTimeout` must be longer.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub gang_timeout: u64,
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
    let tls = match (&args.tls_cert, &args.tls_key, &args.client_ca) {
        (Some(cert), Some(key), Some(ca)) => Some(tls::server_config(cert, key, ca)?),
        _ => None,
    };
    if tls.is_none() && !args.listen.ip().is_loopback() && !args.insecure_listen {
        anyhow::bail!(
            "refusing to listen on {} without TLS: any pod that reaches it could bind pods to nodes; \
             pass --tls-cert, --tls-key and --client-ca (mutual TLS with kube-scheduler), listen on a \
             loopback address, or pass --insecure-listen if the network is locked down otherwise",
            args.listen
        );
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
    let model = Arc::new(Mutex::new(model));
    let gang_timeout = Duration::from_secs(args.gang_timeout);
    let rt = runtime()?;
    rt.block_on(async {
        let ext = if args.no_kube {
            eprintln!(
                "gantry extender: no API server (--no-kube): the model holds --nodes and this extender's \
                 own binds; /bind records the decision and creates no Binding"
            );
            Extender::new(model, Binder::Record, gang_timeout)
        } else {
            let (client, url) = watch::connect().await.context(
                "gantry extender needs a Kubernetes API server; pass --no-kube to run without one",
            )?;
            eprintln!(
                "gantry extender: API server {url}: the model follows its nodes and bound pods; \
                 /bind creates Bindings"
            );
            let ext = Extender::new(model, Binder::Api(client.clone()), gang_timeout);
            tokio::spawn(watch::run(client, ext.clone(), |what| {
                tracing::info!("the model holds every {what} the API server lists")
            }));
            ext
        };
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let scheme = if tls.is_some() { "https, client certificates required" } else { "plain http" };
        tracing::info!(listen = %args.listen, scheme, "gantry extender serving /filter, /prioritize, /bind");
        if tls.is_none() && !args.listen.ip().is_loopback() {
            tracing::warn!(listen = %args.listen, "--insecure-listen: anyone who reaches this port can bind pods");
        }
        // The server's accept loop: handshake and header timeouts, a connection cap; a gang
        // member's /bind may be held up to --gang-timeout, so requests get that and a margin.
        let limits = Limits {
            max_connections: 256,
            max_connections_per_address: 256,
            loopback_is_one_source: false,
            header_read_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            request_timeout: gang_timeout + Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
        };
        transport::serve(vec![listener], None, routes(ext), tls, limits, shutdown_signal()).await;
        anyhow::Ok(())
    })
}
