//! `gantry bench whatif`: how fast a history replays, against real time.
//!
//! A synthetic history of `--jobs` jobs over `--days` days (Poisson arrivals; 1, 2, 4 and 8 GPUs
//! in Philly's proportions; log-normal run times around 30 min; two teams) on a fleet sized for
//! about 90 % load, replayed once on the fleet and once with a quarter more nodes, as
//! `gantry whatif --add` does. The ratio is simulated time over wall time (Slurm's simulator:
//! about 100× real time). The goal: a 30-day history of 100,000 jobs under a minute.

use std::time::Instant;

use clap::Args;
use gantry_core::queue::QueueWeights;
use gantry_core::{PolicyKind, RandomSource, SplitMix64};
use gantry_sim::whatif::{self, Fleet, FleetNode, Question, ReplayJob, Settings, SpeedModel, TeamShare};

/// Arguments of `gantry bench whatif`.
#[derive(Debug, Args)]
pub struct WhatifBenchArgs {
    /// Jobs in the history.
    #[arg(long, default_value_t = 100_000)]
    jobs: usize,
    /// Days it spans.
    #[arg(long, default_value_t = 30.0)]
    days: f64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn history(jobs: usize, days: f64, rng: &mut SplitMix64) -> (Vec<ReplayJob>, Fleet) {
    let mut uniform = move || ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64).max(1e-12);
    let span = days * 86_400.0;
    let mut t = 0.0;
    let mut out = Vec::with_capacity(jobs);
    let mut gpu_s = 0.0;
    for i in 0..jobs {
        t += -uniform().ln() * span / jobs as f64;
        let u = uniform();
        // Philly: about 70 % one GPU, then 2, 4 and 8.
        let gpus = if u < 0.7 {
            1
        } else if u < 0.85 {
            2
        } else if u < 0.95 {
            4
        } else {
            8
        };
        let z = (-2.0 * uniform().ln()).sqrt() * (std::f64::consts::TAU * uniform()).cos();
        let run_s = (1_800.0 * (1.2 * z).exp()).clamp(10.0, 7.0 * 86_400.0);
        gpu_s += f64::from(gpus) * run_s;
        out.push(ReplayJob {
            id: i as u64,
            team: if i % 3 == 0 { "b".into() } else { "a".into() },
            key: format!("type{}", i % 17),
            gpus,
            submit_s: t,
            run_s,
            ran_on: Some("H100".into()),
            recorded: Some((t, t + run_s)),
            ..ReplayJob::default()
        });
    }
    let gpus_needed = gpu_s / span / 0.9;
    let nodes = (gpus_needed / 8.0).ceil().max(1.0) as u32;
    let fleet = Fleet {
        nodes: (0..nodes)
            .map(|i| FleetNode { name: format!("n{i}"), gpus: 8, model: "H100".into() })
            .collect(),
    };
    (out, fleet)
}

/// Runs `gantry bench whatif`.
pub fn run(args: &WhatifBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.jobs > 0 && args.days > 0.0, "--jobs and --days must be positive");
    let (jobs, fleet) = history(args.jobs, args.days, &mut SplitMix64::new(0x3a7e));
    let add = (fleet.nodes.len() as u32).div_ceil(4);
    let (changed, replaced) = fleet.changed(&[whatif::FleetChange::Add(whatif::NodeShape {
        count: add,
        gpus: 8,
        model: "H100".into(),
    })])?;
    let settings = Settings {
        teams: vec![
            TeamShare { name: "a".into(), guaranteed_gpus: fleet.gpus() / 2, weight: 1.0 },
            TeamShare { name: "b".into(), guaranteed_gpus: fleet.gpus() / 4, weight: 1.0 },
        ],
        weights: QueueWeights::default(),
        pass_delay_s: 0.05,
        policy: PolicyKind::Gantry,
    };
    let speeds = SpeedModel::default();
    let q = Question {
        fleet: &fleet,
        changed: &changed,
        replaced: &replaced,
        settings: &settings,
        speeds: &speeds,
        seeds: 1,
        prices: &[],
    };
    let started = Instant::now();
    let c = whatif::compare(&jobs, q);
    let wall_s = started.elapsed().as_secs_f64();
    let simulated_s = 2.0 * args.days * 86_400.0;
    let ratio = simulated_s / wall_s.max(1e-9);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "jobs": args.jobs, "days": args.days, "gpus": fleet.gpus(), "replays": 2,
                "wall_s": wall_s, "times_real_time": ratio,
                "baseline_wait_mean_s": c.baseline.wait_mean_s, "changed_wait_mean_s": c.changed.wait_mean_s,
            })
        );
    } else {
        println!(
            "{} jobs over {} days on {} GPUs, replayed on the fleet and with {add} more nodes: {wall_s:.1} s, {ratio:.0}× real time (mean wait {:.0} s → {:.0} s)",
            args.jobs,
            args.days,
            fleet.gpus(),
            c.baseline.wait_mean_s,
            c.changed.wait_mean_s
        );
    }
    Ok(())
}
