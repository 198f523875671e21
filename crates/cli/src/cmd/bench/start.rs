//! `gantry bench start`: how long a job waits between its submission and its start on an idle
//! cluster, the delay an interactive `gantry run` feels. The bench starts what `gantry up`
//! starts, in this process: a control plane on a fresh on-disk store and one agent on a
//! simulated fleet, its jobs in the agent's sandbox (the node's network: CNI setup is not what
//! is measured). Then it submits tiny jobs over HTTP one at a time, each once the previous one
//! has started, and times each from the submission until the API first shows it running (or
//! already ended, for a job quicker than the polling below). The API is polled every
//! millisecond, so a figure is at most that much late.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use gantry_agent::runner::network::{Mode, NetworkConfig};
use gantry_agent::runner::{self, AgentConfig, BackendChoice, Gpus, Sandbox, SandboxConfig};
use gantry_server::{Server, ServerConfig};
use gantry_store::{SqliteStore, Store};

use crate::cmd::client::Api;

/// Arguments of `gantry bench start`.
#[derive(Debug, Args)]
pub struct StartBenchArgs {
    /// Jobs to time, one at a time (after one untimed job that warms up the team's user).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    jobs: u32,
    /// The agent's simulated fleet.
    #[arg(long, default_value = "4xA100-80GB")]
    simulated_gpus: String,
    /// GPUs each job asks for.
    #[arg(long, default_value_t = 1)]
    gpus: u32,
    /// Data directory (default: a fresh directory under /var/tmp, removed after; not under /tmp,
    /// which a job's private /tmp hides).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Print one JSON object (`p50_s`, `p90_s`, `p99_s`, `max_s`, `jobs`, and with
    /// `--baseline` the same figures prefixed `baseline_`).
    #[arg(long)]
    json: bool,
    /// Also time the same jobs on a second cluster whose server answers heartbeats at once, as
    /// servers before held heartbeats did (its agent polls every heartbeat interval).
    #[arg(long)]
    baseline: bool,
}

/// Runs the benchmark.
pub fn run(args: &StartBenchArgs) -> anyhow::Result<()> {
    let (dir, remove) = match &args.data_dir {
        Some(d) => (d.clone(), false),
        None => (PathBuf::from(format!("/var/tmp/gantry-bench-start-{}", std::process::id())), true),
    };
    let rt = tokio::runtime::Runtime::new()?;
    let result = rt.block_on(bench(args, &dir.join("held"), true));
    let baseline = match (&result, args.baseline) {
        (Ok(_), true) => Some(rt.block_on(bench(args, &dir.join("polled"), false))),
        _ => None,
    };
    if remove {
        let _ = std::fs::remove_dir_all(&dir);
    }
    report(&result?, baseline.transpose()?.as_deref(), args.json);
    Ok(())
}

/// A running control plane and agent.
struct Cluster {
    api: Api,
    stop: tokio::sync::watch::Sender<bool>,
    serving: tokio::task::JoinHandle<Result<(), gantry_server::ServerError>>,
    agent: tokio::task::JoinHandle<Result<(), gantry_agent::runner::AgentError>>,
}

/// Times the jobs on a fresh cluster in `dir` whose server holds heartbeats or not.
async fn bench(args: &StartBenchArgs, dir: &Path, hold: bool) -> anyhow::Result<Vec<Duration>> {
    let cluster = start(args, dir, hold).await?;
    let measured = measure(&cluster.api, args).await;
    let _ = cluster.stop.send(true);
    cluster.agent.await?.context("the agent failed")?;
    cluster.serving.await??;
    measured
}

/// Starts the control plane and the agent, and waits for the node to be ready.
async fn start(args: &StartBenchArgs, dir: &Path, hold: bool) -> anyhow::Result<Cluster> {
    use std::os::unix::fs::PermissionsExt;
    // The data is private to this user; the work root must be reachable by the jobs' users.
    let data = dir.join("data");
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))?;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))?;
    crate::cmd::logging::init(&data)?;
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&data.join("store")).context("opening the store")?);
    let token =
        gantry_server::ensure_admin_token(&*store)?.context("the bench store already has an admin token")?;
    let node_id = "bench-node";
    let state_dir = data.join("agent");
    // Where the agent looks for its credential, as `gantry up` keeps its own agent's.
    let credential = gantry_server::create_node_credential(&*store, node_id)?;
    runner::credential::save(&runner::credential::path(&state_dir), &credential)?;
    let mut config = ServerConfig::local(data.join("logs"));
    config.listen = ([127, 0, 0, 1], 0).into();
    config.hold_heartbeats = hold;
    let server = Server::bind(config, store).await?;
    let url = format!("http://{}", server.local_addr()?);
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut server_stop = stop_rx.clone();
    let serving = tokio::spawn(server.serve(async move {
        let _ = server_stop.changed().await;
    }));
    let sandbox_config = SandboxConfig {
        work_dir: dir.join("work"),
        network: NetworkConfig { mode: Mode::Shared, ..NetworkConfig::default() },
        ..SandboxConfig::default()
    };
    let sandbox = Arc::new(Sandbox::build(&sandbox_config, &state_dir)?);
    let gpus = Gpus::open(&BackendChoice::Simulated(args.simulated_gpus.clone()), 1)?;
    let agent_config = AgentConfig {
        server: url.clone(),
        token: credential,
        node_id: node_id.into(),
        logs_dir: data.join("logs"),
        state_dir,
        grace: Duration::from_secs(1),
        ship_logs: false,
        ca_pem: None,
        client_cert: None,
        sandbox,
        shim: runner::default_shim()?,
        stop_jobs_on_exit: true,
        advertise_addr: None,
        labels: Default::default(),
        cache: Default::default(),
        egress: Default::default(),
        server_socket: None,
        images: Default::default(),
    };
    let agent = tokio::spawn(runner::run(agent_config, gpus, stop_rx));
    let api = Api::new(&url, &token)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let nodes: serde_json::Value = api.get("/v1/nodes").await?;
        let ready = nodes.as_array().is_some_and(|n| n.iter().any(|n| n["state"] == "ready"));
        if ready {
            break;
        }
        if Instant::now() > deadline {
            bail!("the bench's agent did not register within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Cluster { api, stop, serving, agent })
}

/// Submits the jobs one at a time; each one's time from submission to running.
async fn measure(api: &Api, args: &StartBenchArgs) -> anyhow::Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(args.jobs as usize);
    for i in 0..=args.jobs {
        let body = serde_json::json!({
            "command": ["true"],
            "gpus": args.gpus,
            "request_id": format!("bench-start-{i}"),
        });
        let t = Instant::now();
        let submitted: serde_json::Value = api.post("/v1/jobs", &body).await?;
        let id = submitted["id"].as_i64().with_context(|| format!("the submission answered {submitted}"))?;
        started(api, id).await?;
        // The first job creates the team's user on the node: not what is measured.
        if i > 0 {
            times.push(t.elapsed());
        }
    }
    Ok(times)
}

/// Waits until job `id` runs or has run.
async fn started(api: &Api, id: i64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let job: serde_json::Value = api.get(&format!("/v1/jobs/{id}")).await?;
        match job["job"]["state"].as_str() {
            Some("running" | "succeeded") => return Ok(()),
            Some("failed" | "cancelled") => bail!("bench job {id} did not run: {job}"),
            _ => {}
        }
        if Instant::now() > deadline {
            bail!("bench job {id} did not start within 30 s: {job}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The `p`th percentile (nearest rank) of sorted times, in seconds.
fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).map_or(0.0, Duration::as_secs_f64)
}

/// p50, p90, p99 and max of `times`, seconds.
fn figures(times: &[Duration]) -> [f64; 4] {
    let mut sorted = times.to_vec();
    sorted.sort();
    [0.5, 0.9, 0.99, 1.0].map(|p| percentile(&sorted, p))
}

fn report(times: &[Duration], baseline: Option<&[Duration]>, json: bool) {
    const KEYS: [&str; 4] = ["p50_s", "p90_s", "p99_s", "max_s"];
    let held = figures(times);
    let polled = baseline.map(figures);
    if json {
        let mut out = serde_json::Map::new();
        out.insert("jobs".into(), times.len().into());
        for (key, value) in KEYS.iter().zip(held) {
            out.insert((*key).into(), value.into());
        }
        for (key, value) in polled.iter().flat_map(|p| KEYS.iter().zip(*p)) {
            out.insert(format!("baseline_{key}"), value.into());
        }
        println!("{}", serde_json::Value::Object(out));
        return;
    }
    let line = |[p50, p90, p99, max]: [f64; 4]| {
        format!("p50 {p50:.3} s, p90 {p90:.3} s, p99 {p99:.3} s, max {max:.3} s")
    };
    println!("{} jobs, submission to running on an idle cluster: {}", times.len(), line(held));
    if let Some(polled) = polled {
        println!("baseline, the agent polling every heartbeat interval: {}", line(polled));
    }
}
