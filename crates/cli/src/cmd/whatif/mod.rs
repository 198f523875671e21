//! `gantry whatif`: the cluster's own history replayed on a changed fleet.
//!
//! Reads the recorded jobs from the server (`GET /v1/history`, admins), or a Pollux/Sia
//! workload with `--trace`, replays them through the core's queue and placement on the fleet as
//! it is and as changed (`--add`, `--remove`, `--replace`), and prints the recorded figures, the
//! unchanged fleet's and the changed one's side by side (see `gantry_sim::whatif`).

mod history;
mod output;
mod trace;

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::history::HistoryResponse;
use gantry_core::PolicyKind;
use gantry_core::queue::QueueWeights;
use gantry_sim::jobs::ClusterShape;
use gantry_sim::whatif::{self, FleetChange, NodeShape, Question, Settings, SpeedModel, SpeedTable};

use super::client::{Api, ServerArgs, block_on};

/// Arguments of `gantry whatif`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry whatif --add 4x8xH100                       # four more nodes of eight H100
  gantry whatif --replace V100:H100 --speedups testdata/speedups/gavel.csv --price V100=1.2,H100=2.5
  gantry whatif --remove node-7,node-8 --json
  gantry whatif --trace workload.csv --cluster 16x4xT4 --add 4x4xT4

`recorded` is what the jobs saw; `baseline` is the same jobs replayed on the unchanged fleet (how
close the replay comes to the record), `changed` on the changed one. Replayed figures are means
over seeds, with their range.")]
pub struct WhatifArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// How much history, e.g. `7d`, `30d`.
    #[arg(long, default_value = "30d")]
    since: String,
    /// Add nodes: COUNTxGPUSxMODEL, e.g. `4x8xH100` (repeatable).
    #[arg(long, value_parser = NodeShape::parse)]
    add: Vec<NodeShape>,
    /// Remove nodes: names `NODE,…` or a shape such as `8xV100` or `2x8xV100` (repeatable).
    #[arg(long, value_parser = FleetChange::parse_remove)]
    remove: Vec<FleetChange>,
    /// Replace a GPU model everywhere: `FROM:TO`, e.g. `V100:H100` (repeatable).
    #[arg(long, value_parser = FleetChange::parse_replace)]
    replace: Vec<FleetChange>,
    /// Placement policy of the replay (the server's `--policy`).
    #[arg(long, default_value = "gantry")]
    policy: PolicyKind,
    /// Price per GPU-hour by model: `H100=2.5,A100=1.2`.
    #[arg(long, value_delimiter = ',', value_parser = parse_price)]
    price: Vec<(String, f64)>,
    /// Seeds: 1 replays the history exactly; more add run-time noise for intervals.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    seeds: u64,
    /// Speed table CSV (`job_type,gpu_model,throughput`) for models the history has not seen.
    #[arg(long)]
    speedups: Option<PathBuf>,
    /// Replay a Pollux/Sia workload CSV instead of the cluster's history (needs `--cluster`).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// The fleet a `--trace` ran on, e.g. `16x4xT4`.
    #[arg(long, value_parser = ClusterShape::parse)]
    cluster: Option<ClusterShape>,
    /// Pollux job profiles for `--trace` (default: `job-profiles/` beside or above the workload).
    #[arg(long)]
    profiles: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Write CSVs and SVG charts (wait CDFs) here.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn parse_price(s: &str) -> Result<(String, f64), String> {
    let bad = || format!("`{s}` is not a price; write MODEL=PRICE_PER_GPU_HOUR, e.g. H100=2.5");
    let (model, price) = s.split_once('=').ok_or_else(bad)?;
    let price: f64 = price.trim().parse().map_err(|_| bad())?;
    if model.trim().is_empty() || !price.is_finite() || price < 0.0 {
        return Err(bad());
    }
    Ok((model.trim().to_string(), price))
}

/// Runs `gantry whatif`.
pub fn run(args: WhatifArgs) -> anyhow::Result<()> {
    let table = args.speedups.as_deref().map(SpeedTable::read).transpose()?;
    let recorded = match &args.trace {
        Some(path) => {
            let shape = args
                .cluster
                .as_ref()
                .context("--trace needs --cluster, the fleet it ran on (e.g. 16x4xT4)")?;
            trace::convert(path, shape, args.profiles.as_deref())?
        }
        None => {
            let back = super::token::parse_ttl(&args.since)
                .map_err(|e| anyhow::anyhow!(e.to_string().replace("--ttl", "--since")))?;
            let since = gantry_server::now_ms() - 1000 * i64::try_from(back)?;
            let api = Api::connect(&args.server)?;
            let h: HistoryResponse = block_on(api.get(&format!("/v1/history?since={since}")))??;
            history::convert(&h)
        }
    };
    if recorded.jobs.is_empty() {
        bail!(
            "the history has no finished GPU job to replay ({} left out: still queued or running, or never ran); widen --since or run some jobs first",
            recorded.left_out
        );
    }
    if recorded.fleet.nodes.is_empty() {
        bail!("the cluster has no GPU node to replay on");
    }
    let changes: Vec<FleetChange> = args
        .add
        .iter()
        .cloned()
        .map(FleetChange::Add)
        .chain(args.remove.iter().cloned())
        .chain(args.replace.iter().cloned())
        .collect();
    let (changed, replaced) = recorded.fleet.changed(&changes)?;
    let speeds = SpeedModel { observed: recorded.observed.clone(), table };
    let settings = Settings {
        teams: recorded.teams.clone(),
        weights: QueueWeights::default(),
        pass_delay_s: recorded.pass_delay_s,
        policy: args.policy,
    };
    let question = Question {
        fleet: &recorded.fleet,
        changed: &changed,
        replaced: &replaced,
        settings: &settings,
        speeds: &speeds,
        seeds: args.seeds,
        prices: &args.price,
    };
    let started = std::time::Instant::now();
    let comparison = whatif::compare(&recorded.jobs, question);
    let elapsed = started.elapsed();
    if let Some(dir) = &args.out {
        output::write_dir(dir, &comparison)?;
    }
    if args.json {
        output::json(&comparison, &recorded, &changed)
    } else {
        output::print(&comparison, &recorded, &changed, &changes, elapsed);
        Ok(())
    }
}
