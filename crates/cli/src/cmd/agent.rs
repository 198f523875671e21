//! `gantry agent`: the node daemon on its own, joining a server with a join token; over
//! https it pins the cluster CA (`--ca`) and, given one, presents a client certificate.
//! Logs go to stderr and `<data>/gantry.log`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gantry_agent::runner::{self, AgentConfig, BackendChoice, Gpus};

use super::client::{home, read_ca};
use super::logging;
use super::sandbox::SandboxArgs;
use super::up::shutdown_signal;

/// Arguments of `gantry agent`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  GANTRY_JOIN_TOKEN=gty_… gantry agent --server https://head:7070 --ca-sha256 3f…   # first start
  gantry agent --server https://head:7070 --join-token-file /run/secrets/join   # or from a file
  gantry agent --server https://head:7070 --stop-jobs-on-exit   # stopping the agent stops its jobs
  gantry agent --server https://head:7070 --advertise-addr 10.0.0.7   # gang peers reach it there")]
pub struct AgentArgs {
    /// Server URL; several replicas' separated by commas (`https://a:7070,https://b:7070`): the
    /// agent moves to the next when one cannot be reached.
    #[arg(long, env = "GANTRY_SERVER")]
    server: String,
    /// One-time join token (`gantry token create --role agent`); needed on the first start only:
    /// the node's own credential is kept in its data directory afterwards. Prefer
    /// `GANTRY_JOIN_TOKEN` or `--join-token-file`: a command line is visible to every user in
    /// `ps`.
    #[arg(long, env = "GANTRY_JOIN_TOKEN", hide_env_values = true, conflicts_with = "join_token_file")]
    join_token: Option<String>,
    /// A file holding the one-time join token (surrounding whitespace ignored).
    #[arg(long, value_name = "FILE")]
    join_token_file: Option<PathBuf>,
    /// Seed of the simulated fleet's GPU UUIDs (default: derived from the node id, so several
    /// simulated agents on one machine have distinct GPUs).
    #[arg(long)]
    seed: Option<u64>,
    /// Node id (default: the host name).
    #[arg(long)]
    node_id: Option<String>,
    /// Where job output and pid files go.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// `auto`, `nvml` or `simulated`.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Simulated fleet when NVML is absent (or with `--backend simulated`).
    #[arg(long, default_value = "4xA100-80GB")]
    simulated_gpus: String,
    /// Seconds between SIGTERM and SIGKILL when a job is stopped.
    #[arg(long, default_value_t = 10)]
    grace: u64,
    /// The cluster CA to trust for an https:// server (the server's `<data>/tls/ca.pem`).
    #[arg(long, env = "GANTRY_CA", value_name = "FILE", conflicts_with = "ca_sha256")]
    ca: Option<PathBuf>,
    /// Fetch the cluster CA from the server and trust it only if its SHA-256 is this (printed by
    /// `gantry token create --role agent`); it is kept in the data directory for later starts.
    #[arg(long, value_name = "HEX")]
    ca_sha256: Option<String>,
    /// A client certificate (PEM) issued by the cluster CA, for mutual TLS; needs --client-key.
    #[arg(long, value_name = "FILE", requires = "client_key")]
    client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    client_key: Option<PathBuf>,
    /// Stop every running job when the agent stops (Ctrl-C, SIGTERM). By default jobs keep
    /// running and the next start of the agent on the same data directory takes them up again.
    #[arg(long)]
    stop_jobs_on_exit: bool,
    /// The address this node's peers reach it at (a host name or an IP address), when its host
    /// name is not: gang workers whose rank 0 runs here get it as `MASTER_ADDR`.
    #[arg(long, value_name = "ADDR", value_parser = advertise_addr)]
    advertise_addr: Option<String>,
    /// A label of this node, `KEY=VALUE` (repeatable): `pool=inference` puts it in that pool
    /// (without one it is in `default`); jobs select nodes by labels (`--node-selector`).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = node_label)]
    labels: Vec<(String, String)>,
}

/// `--label KEY=VALUE`, by the rules of node labels.
pub(super) fn node_label(value: &str) -> Result<(String, String), String> {
    let pair = gantry_api::workflow::parse_label(value)?;
    let one = std::collections::BTreeMap::from([pair.clone()]);
    gantry_api::pools::check_node_labels(&one)?;
    Ok(pair)
}

/// The simulated fleet's seed for a node: FNV-1a of its id, stable across runs and versions
/// (std's hashers are neither), so a node keeps its GPU UUIDs and two nodes do not share them.
fn node_seed(node_id: &str) -> u64 {
    node_id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// `--advertise-addr`: a host name or an IP address.
pub(super) fn advertise_addr(value: &str) -> Result<String, String> {
    match gantry_api::types::address_problem(value) {
        Some(why) => Err(format!("{value:?} {why}")),
        None => Ok(value.to_owned()),
    }
}

/// Runs the agent until Ctrl-C or SIGTERM.
pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    let choice = backend_choice(&args.backend, &args.simulated_gpus)?;
    gantry_api::failover::parse_servers(&args.server).map_err(|e| anyhow::anyhow!("--server: {e}"))?;
    let data = match args.data_dir {
        Some(d) => d,
        None => home()?.join(".local/share/gantry-agent"),
    };
    let node_id = args.node_id.unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_or_else(|_| "node".into(), |h| h.trim().to_owned())
    });
    let client_cert = match (&args.client_cert, &args.client_key) {
        (Some(cert), Some(key)) => Some((read_pem(cert)?, read_pem(key)?)),
        _ => None,
    };
    std::fs::create_dir_all(&data).with_context(|| format!("cannot create {}", data.display()))?;
    logging::init(&data)?;
    let ca_pem =
        cluster_ca(&args.server, args.ca.as_deref(), args.ca_sha256.as_deref(), &data.join("agent"))?;
    let sandbox = args.sandbox.build(&data, &data.join("agent"))?;
    let cache = args.sandbox.cache()?;
    let egress = args.sandbox.egress()?;
    let token = match (&args.join_token, &args.join_token_file) {
        (_, Some(file)) => std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the join token file {}", file.display()))?
            .trim()
            .to_owned(),
        (Some(token), None) => token.clone(),
        (None, None) => String::new(),
    };
    let seed = args.seed.unwrap_or_else(|| node_seed(&node_id));
    let config = AgentConfig {
        server: args.server,
        token,
        node_id,
        logs_dir: data.join("logs"),
        state_dir: data.join("agent"),
        grace: Duration::from_secs(args.grace),
        ca_pem,
        client_cert,
        ship_logs: true,
        sandbox,
        shim: runner::default_shim()?,
        stop_jobs_on_exit: args.stop_jobs_on_exit,
        advertise_addr: args.advertise_addr,
        labels: args.labels.into_iter().collect(),
        cache,
        egress,
        server_socket: None,
        images: args.sandbox.images()?,
    };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let gpus = Gpus::open(&choice, seed).context("opening GPUs")?;
        eprintln!("{}", gpus.description);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = stop_tx.send(true);
        });
        runner::run(config, gpus, stop_rx).await.context("agent failed")
    })
}

/// The CA to pin: `--ca`, else the one `--ca-sha256` names (fetched and checked, then kept as
/// `<state>/ca.pem`), else the one kept from an earlier start.
fn cluster_ca(
    server: &str,
    file: Option<&std::path::Path>,
    sha256: Option<&str>,
    state: &std::path::Path,
) -> anyhow::Result<Option<String>> {
    let kept = state.join("ca.pem");
    if let Some(file) = file {
        return read_ca(file).map(Some);
    }
    if let Some(hash) = sha256 {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let pem = rt.block_on(runner::client::fetch_ca(server, hash)).context("fetching the cluster CA")?;
        runner::credential::save(&kept, &pem)?;
        return Ok(Some(pem));
    }
    Ok(std::fs::read_to_string(&kept).ok())
}

fn read_pem(path: &std::path::Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Parses `--backend`.
pub fn backend_choice(backend: &str, fleet: &str) -> anyhow::Result<BackendChoice> {
    match backend {
        "auto" => Ok(BackendChoice::Auto(fleet.to_owned())),
        "nvml" => Ok(BackendChoice::Nvml),
        "simulated" => Ok(BackendChoice::Simulated(fleet.to_owned())),
        other => anyhow::bail!("--backend must be auto, nvml or simulated, not {other}"),
    }
}
