//! `gantry bench pass`: what one scheduling pass costs the server with a long pending queue, on a
//! fresh on-disk store — a full reload of the store and a plan (every pass before the scheduler
//! kept a copy of the store), beside the incremental passes measured in the same run: idle
//! (nothing changed: the change log is read and the pass is skipped), a pass for the time-based
//! rules (aging, fair share: planned from memory, nothing read), and a pass after one submission;
//! and the job gauges' refresh, the counts kept by the store beside a count over every job.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use gantry_core::{PolicyKind, RandomSource, SplitMix64};
use gantry_server::scheduler::{QueueInput, State, Synced, placement, plan};
use gantry_store::{
    GpuInfo, GpuRange, NewJob, NodeRegistration, RegisterRequest, SqliteStore, Store, SubmitRequest, Team,
};

/// Flags of `gantry bench pass`.
#[derive(Debug, Args)]
pub struct PassBenchArgs {
    /// Pending jobs (1, 2 or 4 whole GPUs, two teams, priorities 0–2), queued behind a full
    /// cluster.
    #[arg(long, default_value_t = 34_000)]
    pub pending: u32,
    /// Nodes (each with `--gpus-per-node` GPUs), filled by running jobs before the queue is
    /// submitted.
    #[arg(long, default_value_t = 16)]
    pub nodes: u32,
    /// GPUs per node (H100, 80 GB).
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// Times each kind of pass is run (the median is reported).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Store directory (default: a fresh directory under the system temp dir, removed after).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The store: `sqlite` (in the data directory) or an empty PostgreSQL database,
    /// `postgres://USER@HOST:PORT/DB`.
    #[arg(long, value_name = "sqlite|postgres://…", default_value = "sqlite", value_parser = crate::cmd::control::Database::parse)]
    pub db: crate::cmd::control::Database,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Fills a store, times each kind of pass, prints the figures.
pub fn run(args: &PassBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.nodes > 0 && args.gpus_per_node > 0, "--nodes and --gpus-per-node must be positive");
    let (dir, remove) = match &args.data_dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("gantry-bench-pass-{}", std::process::id())), true),
    };
    let result = bench(args, &dir);
    if remove {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// Medians, seconds.
struct Figures {
    full_pass: f64,
    full_reload: f64,
    idle_pass: f64,
    timed_pass: f64,
    change_pass: f64,
    job_counts: f64,
    /// The count over every job (SQLite's; not measured on PostgreSQL).
    job_counts_scan: Option<f64>,
}

fn bench(args: &PassBenchArgs, dir: &Path) -> anyhow::Result<()> {
    let sqlite = match args.db {
        crate::cmd::control::Database::Sqlite => Some(SqliteStore::open(dir).context("opening the store")?),
        crate::cmd::control::Database::Postgres(_) => None,
    };
    let opened;
    let store: &dyn Store = match &sqlite {
        Some(s) => s,
        None => {
            opened = args.db.open(dir)?;
            &*opened
        }
    };
    anyhow::ensure!(store.jobs(&Default::default())?.is_empty(), "the bench needs an empty store");
    fill(store, args)?;
    let mut state = State::load(store)?;
    let pending = state.pending();
    let rounds = args.rounds as usize;
    let at = 2_000_000_000;
    let full_pass = median(rounds, || {
        // What a pass read and planned before: everything from the store, then the plan.
        let mut loaded = State::load(store)?;
        Ok(plan(loaded.plan_input(at, QueueInput::default()), PolicyKind::Gantry, 0x9a17).placements.len())
    })?;
    let full_reload = median(rounds, || Ok(State::load(store)?.pending()))?;
    let idle_pass = median(rounds, || {
        anyhow::ensure!(state.sync(store)? == Synced::Unchanged, "the store changed during the bench");
        Ok(0)
    })?;
    let timed_pass = median(rounds, || {
        state.sync(store)?;
        Ok(plan(state.plan_input(at, QueueInput::default()), PolicyKind::Gantry, 0x9a17).placements.len())
    })?;
    let mut n = 0;
    let mut submitted = Vec::new();
    for _ in 0..rounds {
        n += 1;
        submitted.push(store.submit(&job("team-0", 1, 0, i64::from(args.pending) + n))?.0);
    }
    let mut times = Vec::new();
    for _ in 0..rounds {
        // One change per pass: cancel one of the jobs just submitted, then pass.
        let id = submitted.pop().context("a job to cancel")?;
        store.cancel(id, at)?;
        let started = Instant::now();
        anyhow::ensure!(state.sync(store)? == Synced::Applied, "a change was not applied");
        std::hint::black_box(plan(state.plan_input(at, QueueInput::default()), PolicyKind::Gantry, 0x9a17));
        times.push(started.elapsed().as_secs_f64());
    }
    let change_pass = middle(times);
    // The gauges' counts as kept by the store's triggers, beside the count over every job that
    // every refresh ran before (they must agree).
    let job_counts = median(rounds, || Ok(store.job_counts()?.len()))?;
    let job_counts_scan = match &sqlite {
        Some(sqlite) => {
            anyhow::ensure!(
                store.job_counts()? == sqlite.job_counts_by_scan()?,
                "the maintained job counts differ from a count over every job"
            );
            Some(median(rounds, || Ok(sqlite.job_counts_by_scan()?.len()))?)
        }
        None => None,
    };
    let f =
        Figures { full_pass, full_reload, idle_pass, timed_pass, change_pass, job_counts, job_counts_scan };
    print(args, pending, &f);
    Ok(())
}

/// `nodes` nodes full of running 1-GPU jobs, then `pending` jobs queued behind them.
fn fill(store: &dyn Store, args: &PassBenchArgs) -> anyhow::Result<()> {
    for n in 0..args.nodes {
        let gpus = (0..args.gpus_per_node)
            .map(|i| GpuInfo {
                uuid: format!("GPU-{n}-{i}"),
                index: i,
                model: "H100-80GB".into(),
                memory_mib: 81_920,
            })
            .collect();
        store.register_node(&NodeRegistration {
            request: RegisterRequest {
                node_id: format!("node-{n:04}"),
                hostname: format!("node-{n:04}"),
                advertise_addr: None,
                network: Default::default(),
                job_defaults: None,
                labels: Default::default(),
                cpu_milli: 192_000,
                memory_mib: 2_000_000,
                gpus,
                attempts: Vec::new(),
            },
            at: 1_000,
        })?;
    }
    for t in 0..2 {
        store.set_team(&Team {
            name: format!("team-{t}"),
            gpu_quota: Some(args.nodes * args.gpus_per_node / 2),
            ..Team::default()
        })?;
    }
    let running = args.nodes * args.gpus_per_node;
    submit_all(store, (1..=i64::from(running)).map(|i| job(&format!("team-{}", i % 2), 1, 0, i)).collect())?;
    let s = State::load(store)?.snapshot(1_000_000);
    for p in plan(&s, PolicyKind::Gantry, 1).placements {
        store.place(&placement(p))?;
    }
    let mut rng = SplitMix64::new(42);
    let queue = (1..=i64::from(args.pending))
        .map(|i| {
            let gpus = [1, 1, 2, 4][(rng.next_u64() % 4) as usize].min(args.gpus_per_node);
            let team = format!("team-{}", rng.next_u64() % 2);
            job(&team, gpus, (rng.next_u64() % 3) as i32, i64::from(running) + i)
        })
        .collect();
    submit_all(store, queue)
}

/// Submits from many threads, so that the store's group commit batches them.
fn submit_all(store: &dyn Store, jobs: Vec<NewJob>) -> anyhow::Result<()> {
    let chunk = jobs.len().div_ceil(64).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().try_for_each(|j| store.submit(j).map(|_| ()))))
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("a submitting thread panicked"))??;
        }
        Ok(())
    })
}

fn job(team: &str, gpus: u32, priority: i32, submitted_at: i64) -> NewJob {
    let spec = SubmitRequest {
        command: vec!["true".into()],
        priority,
        gpus: GpuRange::count(gpus),
        cpu_milli: 4_000,
        memory_mib: 16_384,
        ..NewJob::default().spec
    };
    NewJob {
        spec,
        team: team.into(),
        name: "bench".into(),
        submitted_at,
        user: None,
        service: None,
        pending_limit: None,
        pending_bytes_limit: None,
    }
}

/// The median time of `rounds` runs of `f`.
fn median(rounds: usize, mut f: impl FnMut() -> anyhow::Result<usize>) -> anyhow::Result<f64> {
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        std::hint::black_box(f()?);
        times.push(started.elapsed().as_secs_f64());
    }
    Ok(middle(times))
}

fn middle(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).copied().unwrap_or(0.0)
}

fn print(args: &PassBenchArgs, pending: usize, f: &Figures) {
    let ratio = |x: f64| f.full_pass / x.max(1e-9);
    if args.json {
        let out = serde_json::json!({
            "pending": pending,
            "nodes": args.nodes,
            "gpus_per_node": args.gpus_per_node,
            "rounds": args.rounds,
            "full_pass_s": f.full_pass,
            "full_reload_s": f.full_reload,
            "idle_pass_s": f.idle_pass,
            "timed_pass_s": f.timed_pass,
            "change_pass_s": f.change_pass,
            "job_counts_s": f.job_counts,
            "db": args.db.name(),
            "job_counts_scan_s": f.job_counts_scan,
            "job_counts_ratio": f.job_counts_scan.map(|scan| scan / f.job_counts.max(1e-9)),
            "idle_ratio": ratio(f.idle_pass),
            "timed_ratio": ratio(f.timed_pass),
            "change_ratio": ratio(f.change_pass),
        });
        println!("{out}");
        return;
    }
    let ms = |s: f64| s * 1000.0;
    println!(
        "{pending} pending jobs behind {} nodes x {} GPUs on {}, median of {} rounds",
        args.nodes,
        args.gpus_per_node,
        args.db.name(),
        args.rounds
    );
    println!(
        "full reload + plan (every pass before): {:.3} ms (of which the reload {:.3} ms)",
        ms(f.full_pass),
        ms(f.full_reload)
    );
    println!(
        "idle pass (change log read, nothing new): {:.4} ms = {:.0}x less",
        ms(f.idle_pass),
        ratio(f.idle_pass)
    );
    println!(
        "time-based pass (plan from memory): {:.3} ms = {:.1}x less",
        ms(f.timed_pass),
        ratio(f.timed_pass)
    );
    println!(
        "pass after one change (sync + plan): {:.3} ms = {:.1}x less",
        ms(f.change_pass),
        ratio(f.change_pass)
    );
    match f.job_counts_scan {
        Some(scan) => println!(
            "gauge refresh (job counts, every 250 ms): {:.4} ms maintained, {:.3} ms counted over every job (before) = {:.0}x less",
            ms(f.job_counts),
            ms(scan),
            scan / f.job_counts.max(1e-9)
        ),
        None => println!("gauge refresh (job counts, every 250 ms): {:.4} ms maintained", ms(f.job_counts)),
    }
}
