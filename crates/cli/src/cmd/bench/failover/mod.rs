//! `gantry bench failover`: faults injected into a highly available control plane, and a
//! checker that reads the whole history afterwards.
//!
//! The bench starts a throwaway PostgreSQL ([`postgres`]), `--replicas` `gantry server`
//! processes on it and `--agents` `gantry agent` processes on simulated fleets that know every
//! replica ([`cluster`]); `--clients` submitting clients in this process send tiny jobs with an
//! idempotency key to the replicas in turn, repeating a submission (same key) at the next replica
//! until one acknowledges it. Trials share the database and the cluster. Each trial waits until
//! the cluster is whole (every replica answers, one leads, all agree on the epoch), waits a random
//! moment (up to half the lease), injects one fault, waits until the cluster is whole again and
//! a job submitted after the fault has been placed. The faults take turns: `kill -9` the leader
//! (restarted once another replica leads), `SIGSTOP` the leader until another leads and a random
//! moment more, then `SIGCONT`; `kill -9` a follower (restarted 200 ms later); a crash and
//! restart of PostgreSQL (`pg_ctl stop -m immediate`); `pg_terminate_backend` of every replica
//! connection. Then everything stops and [`check`] judges the history.

mod check;
mod cluster;
mod postgres;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use gantry_core::rng::{RandomSource, SplitMix64};
use gantry_store::{JobState, PgStore, Store};

use check::{Acked, LeaderFault};
use cluster::{Agent, Replica, health};

/// Arguments of `gantry bench failover`.
#[derive(Debug, Args)]
pub struct FailoverBenchArgs {
    /// `gantry server` replicas on the one database (at least 2).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=9))]
    replicas: u32,
    /// Faults to inject, one per trial, in turn: kill -9 the leader, SIGSTOP it past its lease,
    /// kill -9 a follower, restart PostgreSQL, terminate the replicas' connections.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    trials: u32,
    /// The replicas' `--lease-ttl` (a shorter lease makes trials quicker: `1s` for a CI-sized
    /// run; failover takes about the lease and a third of it).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = crate::cmd::submit::parse_time)]
    lease_ttl: u64,
    /// Agents, each a node with `--fleet`.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    agents: u32,
    /// Each agent's simulated GPUs.
    #[arg(long, default_value = "4xA100-80GB")]
    fleet: String,
    /// Concurrent submitting clients (each sends one tiny job a second).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    clients: u32,
    /// The faults to take turns with (default: all five), of `kill-leader`, `stop-leader`,
    /// `kill-follower`, `restart-postgres`, `terminate-connections`.
    #[arg(long, value_delimiter = ',', value_parser = parse_fault)]
    faults: Vec<Fault>,
    /// Seed of the random moments and choices (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// The bench directory (default: a fresh one under /var/tmp, removed after; not under /tmp,
    /// which a job's private /tmp hides).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Print one JSON object: `trials`, `double_allocations`, `lost_acknowledged`,
    /// `duplicate_starts`, `stale_epoch_writes`, `impossible_states`, `failover_s` (`p50`,
    /// `p99`, `max`, `n`).
    #[arg(long)]
    json: bool,
}

/// The faults, in the order trials take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    KillLeader,
    StopLeader,
    KillFollower,
    RestartPostgres,
    TerminateConnections,
}

const FAULTS: [(Fault, &str); 5] = [
    (Fault::KillLeader, "kill-leader"),
    (Fault::StopLeader, "stop-leader"),
    (Fault::KillFollower, "kill-follower"),
    (Fault::RestartPostgres, "restart-postgres"),
    (Fault::TerminateConnections, "terminate-connections"),
];

fn parse_fault(text: &str) -> Result<Fault, String> {
    FAULTS.iter().find(|(_, name)| *name == text).map(|(f, _)| *f).ok_or_else(|| {
        let names: Vec<&str> = FAULTS.iter().map(|(_, n)| *n).collect();
        format!("`{text}` is not a fault; the faults are {}", names.join(", "))
    })
}

/// Runs the benchmark.
pub fn run(args: &FailoverBenchArgs) -> anyhow::Result<()> {
    let (dir, remove) = match &args.data_dir {
        Some(d) => (d.clone(), false),
        None => (PathBuf::from(format!("/var/tmp/gantry-bench-failover-{}", std::process::id())), true),
    };
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        bail!("{} is not empty: the failover bench needs a directory of its own", dir.display());
    }
    std::fs::create_dir_all(&dir)?;
    let result = tokio::runtime::Runtime::new()?.block_on(bench(args, &dir));
    if remove && result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else if result.is_err() {
        eprintln!("the bench's logs are kept in {}", dir.display());
    }
    let findings = result?;
    report(args, &findings);
    if !findings.clean() {
        bail!("the history breaks an invariant: {}", findings.details.join("; "));
    }
    Ok(())
}

/// Everything the trials act on.
struct Bench {
    pg: postgres::LocalPostgres,
    store: Arc<dyn Store>,
    replicas: Vec<Replica>,
    http: reqwest::Client,
    ttl: Duration,
    acked: Arc<Mutex<Vec<(Acked, Instant)>>>,
    /// Trials that ran (fewer than asked when interrupted).
    ran: u32,
}

async fn bench(args: &FailoverBenchArgs, dir: &Path) -> anyhow::Result<check::Findings> {
    use std::os::unix::fs::PermissionsExt;
    // Jobs run as other users and must reach their work directories below this one.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let pg = postgres::LocalPostgres::start(&dir.join("postgres"))?;
    let url = pg.url();
    let store: Arc<dyn Store> = Arc::new(PgStore::open(&url).context("opening the bench's database")?);
    let token =
        gantry_server::ensure_admin_token(&*store)?.context("the bench database has a token already")?;
    let mut replicas = Vec::new();
    for i in 0..args.replicas as usize {
        replicas.push(Replica::start(dir, i, &url, args.lease_ttl)?);
    }
    let servers = replicas.iter().map(Replica::url).collect::<Vec<_>>().join(",");
    let mut agents = Vec::new();
    for i in 0..args.agents {
        let node = format!("node-{i}");
        let credential = gantry_server::create_node_credential(&*store, &node)?;
        let state = Agent::state_dir(dir, &node);
        gantry_agent::runner::credential::save(&gantry_agent::runner::credential::path(&state), &credential)?;
        agents.push(Agent::start(dir, &node, &servers, &args.fleet)?);
    }
    let http = gantry_agent::runner::client::builder(None, None)?.no_proxy().build()?;
    let ttl = Duration::from_secs(args.lease_ttl);
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut bench = Bench { pg, store, replicas, http, ttl, acked: Arc::clone(&acked), ran: args.trials };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let urls: Vec<String> = bench.replicas.iter().map(Replica::url).collect();
    let clients: Vec<_> = (0..args.clients)
        .map(|c| {
            let (http, urls, token, acked, stopped) =
                (bench.http.clone(), urls.clone(), token.clone(), Arc::clone(&acked), stopped.clone());
            tokio::spawn(async move { client(c, http, urls, token, acked, stopped).await })
        })
        .collect();
    let mut rng = SplitMix64::new(args.seed.unwrap_or_else(|| gantry_server::clock::now_ms() as u64));
    let faults: Vec<Fault> =
        if args.faults.is_empty() { FAULTS.iter().map(|(f, _)| *f).collect() } else { args.faults.clone() };
    let trials = trials(&mut bench, args.trials, &faults, &mut rng).await;
    let _ = stop.send(true);
    for c in clients {
        c.await??;
    }
    let trials = trials?;
    settle(&bench).await;
    for agent in agents {
        agent.stop();
    }
    for r in &mut bench.replicas {
        r.kill();
    }
    let history = check::read(&*bench.store)?;
    let acked: Vec<Acked> = acked
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .map(|(a, _)| a.clone())
        .collect();
    let mut findings = check::check(&history, &acked, &trials);
    findings.trials = bench.ran;
    drop(bench.pg);
    Ok(findings)
}

/// Runs the trials; the leader faults, for the failover figures.
async fn trials(
    b: &mut Bench,
    n: u32,
    faults: &[Fault],
    rng: &mut SplitMix64,
) -> anyhow::Result<Vec<LeaderFault>> {
    let mut leader_faults = Vec::new();
    // SIGINT or SIGTERM ends the run after the trial under way: the history so far is checked
    // and reported with the trials that ran.
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&interrupted);
    tokio::spawn(async move {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    for trial in 0..n {
        if interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!("interrupted: {trial} of {n} trials ran");
            b.ran = trial;
            return Ok(leader_faults);
        }
        let fault = faults[trial as usize % faults.len()];
        let (leader, epoch) = whole(b).await.with_context(|| format!("before trial {trial}"))?;
        tokio::time::sleep(Duration::from_millis(rng.below(b.ttl.as_millis() as u64 / 2 + 1))).await;
        let at = Instant::now();
        let at_ms = gantry_server::clock::now_ms();
        match fault {
            Fault::KillLeader => {
                b.replicas[leader].kill();
                leader_faults.push(LeaderFault { at_ms, epoch });
                elected_after(b, epoch).await.with_context(|| format!("trial {trial} ({fault:?})"))?;
                b.replicas[leader].spawn()?;
            }
            Fault::StopLeader => {
                b.replicas[leader].signal("STOP");
                leader_faults.push(LeaderFault { at_ms, epoch });
                let elected = elected_after(b, epoch).await;
                tokio::time::sleep(Duration::from_millis(rng.below(b.ttl.as_millis() as u64 / 3 + 1))).await;
                b.replicas[leader].signal("CONT");
                elected.with_context(|| format!("trial {trial} ({fault:?})"))?;
            }
            Fault::KillFollower => {
                let others: Vec<usize> = (0..b.replicas.len()).filter(|i| *i != leader).collect();
                let victim = others[rng.index(others.len())];
                b.replicas[victim].kill();
                tokio::time::sleep(Duration::from_millis(200)).await;
                b.replicas[victim].spawn()?;
            }
            Fault::RestartPostgres => b.pg.restart()?,
            Fault::TerminateConnections => {
                b.pg.terminate_connections()?;
            }
        }
        progress(b, at).await.with_context(|| format!("after trial {trial} ({fault:?})"))?;
        eprintln!("trial {trial}: {fault:?}, whole again after {:.1} s", at.elapsed().as_secs_f64());
    }
    Ok(leader_faults)
}

/// How long the cluster may take to be whole again.
fn patience(b: &Bench) -> Duration {
    b.ttl * 4 + Duration::from_secs(60)
}

/// Waits until every replica answers, one leads and all agree on the epoch: (leader, epoch).
async fn whole(b: &Bench) -> anyhow::Result<(usize, u64)> {
    let deadline = Instant::now() + patience(b);
    loop {
        let mut seen = Vec::new();
        for r in &b.replicas {
            seen.push(health(&b.http, &r.url()).await);
        }
        let leaders: Vec<usize> = seen
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().is_some_and(|(role, _)| role == "leader"))
            .map(|(i, _)| i)
            .collect();
        let epochs: Vec<u64> = seen.iter().flatten().map(|(_, e)| *e).collect();
        if let ([leader], true) = (leaders.as_slice(), seen.iter().all(Option::is_some))
            && epochs.iter().all(|e| *e == epochs[0])
        {
            return Ok((*leader, epochs[0]));
        }
        if Instant::now() > deadline {
            bail!("the cluster was not whole within {:?}: replicas said {seen:?}", patience(b));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until a replica leads under an epoch after `epoch`.
async fn elected_after(b: &Bench, epoch: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + patience(b);
    loop {
        for r in &b.replicas {
            if health(&b.http, &r.url()).await.is_some_and(|(role, e)| role == "leader" && e > epoch) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("no replica was elected after epoch {epoch} within {:?}", patience(b));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the cluster is whole and a job submitted after `since` has been placed.
async fn progress(b: &Bench, since: Instant) -> anyhow::Result<()> {
    whole(b).await?;
    let deadline = Instant::now() + patience(b);
    loop {
        let newer: Vec<i64> = {
            let acked = b.acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            acked.iter().rev().take_while(|(_, at)| *at > since).map(|(a, _)| a.job_id).collect()
        };
        for id in newer {
            let store = Arc::clone(&b.store);
            let job = tokio::task::spawn_blocking(move || store.job(id)).await?;
            if job.ok().flatten().is_some_and(|j| j.state != JobState::Pending) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("no job submitted after the fault was placed within {:?}", patience(b));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Gives the last jobs time to end (up to 30 s) before everything stops.
async fn settle(b: &Bench) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let store = Arc::clone(&b.store);
        let active =
            tokio::task::spawn_blocking(move || store.jobs(&gantry_store::JobFilter::default())).await;
        let busy = match active {
            Ok(Ok(jobs)) => jobs.iter().any(|j| !j.state.is_terminal()),
            _ => true,
        };
        if !busy {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One submitting client: a tiny job a second (below what the fleet runs, so that the queue
/// stays short and a job submitted after a fault is placed soon after it), each repeated (same request id) at the next
/// replica until one acknowledges it.
async fn client(
    c: u32,
    http: reqwest::Client,
    urls: Vec<String>,
    token: String,
    acked: Arc<Mutex<Vec<(Acked, Instant)>>>,
    stopped: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut next = c as usize % urls.len();
    for i in 0.. {
        if *stopped.borrow() {
            return Ok(());
        }
        let request = format!("failover-{c}-{i}");
        let body =
            serde_json::json!({ "command": ["true"], "gpus": 1, "name": request, "request_id": request });
        let given_up = Instant::now() + Duration::from_secs(120);
        loop {
            let sent = http
                .post(format!("{}/v1/jobs", urls[next]))
                .bearer_auth(&token)
                .json(&body)
                .timeout(Duration::from_secs(3))
                .send()
                .await;
            match sent {
                Ok(resp) if resp.status().is_success() => {
                    let v: serde_json::Value = resp.json().await.unwrap_or_default();
                    let job_id = v["id"].as_i64().or_else(|| v["job"]["id"].as_i64());
                    let job_id = job_id.with_context(|| format!("a submission answered {v}"))?;
                    acked
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((Acked { request: request.clone(), job_id }, Instant::now()));
                    break;
                }
                Ok(resp) if resp.status().is_client_error() => {
                    bail!(
                        "a submission was refused: {} {}",
                        resp.status(),
                        resp.text().await.unwrap_or_default()
                    );
                }
                _ => next = (next + 1) % urls.len(),
            }
            if Instant::now() > given_up {
                bail!("no replica acknowledged submission {request} within 120 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

fn report(args: &FailoverBenchArgs, f: &check::Findings) {
    let mut times = f.failover_s.clone();
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        let i = ((times.len() as f64 * p).ceil() as usize).clamp(1, times.len().max(1)) - 1;
        times.get(i).map(|s| (s * 1000.0).round() / 1000.0)
    };
    if args.json {
        let v = serde_json::json!({
            "trials": f.trials,
            "double_allocations": f.double_allocations,
            "lost_acknowledged": f.lost_acknowledged,
            "duplicate_starts": f.duplicate_starts,
            "stale_epoch_writes": f.stale_epoch_writes,
            "impossible_states": f.impossible_states,
            "failover_s": { "p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0), "n": times.len() },
        });
        println!("{v}");
    } else {
        println!(
            "{} trials on {} replicas: {} double allocations, {} acknowledged submissions lost, {} duplicate starts, \
             {} stale-epoch writes, {} impossible states; failover ({} leader faults) p50 {} s, p99 {} s",
            f.trials,
            args.replicas,
            f.double_allocations,
            f.lost_acknowledged,
            f.duplicate_starts,
            f.stale_epoch_writes,
            f.impossible_states,
            times.len(),
            pct(0.5).map_or("-".into(), |s| s.to_string()),
            pct(0.99).map_or("-".into(), |s| s.to_string()),
        );
    }
}
