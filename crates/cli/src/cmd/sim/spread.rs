//! `gantry sim spread`: how evenly a node pool's placement (`pack` or `spread`) loads the nodes
//! of a half-full cluster, on the FGD experiment's node and pod lists (see
//! [`gantry_sim::balance`]).

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use gantry_core::{PolicyKind, Preference};
use gantry_sim::{Balance, Experiment, read_nodes, read_pods};

use super::Seeds;

/// Arguments of `gantry sim spread`.
#[derive(Debug, Args)]
#[command(after_help = "Example (the openb traces):
  gantry sim spread --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv --fill 50")]
pub struct SpreadArgs {
    /// Node list CSV (sn,cpu_milli,memory_mib,gpu,model).
    #[arg(long)]
    nodes: PathBuf,
    /// Pod list CSV.
    #[arg(long)]
    pods: PathBuf,
    /// The pack policy (spread replaces its choice for every request).
    #[arg(long, default_value = "gantry")]
    policy: PolicyKind,
    /// Seeds: `42-51`, `42,43` or `42`.
    #[arg(long, default_value = "42-51", value_parser = super::parse_seeds)]
    seeds: Seeds,
    /// Stop once this share of the GPUs is allocated, %.
    #[arg(long, default_value_t = 50.0)]
    fill: f64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs both preferences over the seeds and prints the spread of each.
pub fn run(args: SpreadArgs) -> anyhow::Result<()> {
    if !(args.fill > 0.0 && args.fill <= 100.0) {
        bail!("--fill must be between 0 and 100 (%), got {}", args.fill);
    }
    let experiment = Experiment::new(read_nodes(&args.nodes)?, read_pods(&args.pods)?, 1.3)
        .context("building the cluster")?;
    let mut rows = Vec::new();
    for preference in [Preference::Pack, Preference::Spread] {
        let mut runs = Vec::new();
        for seed in &args.seeds.0 {
            runs.push(experiment.balance(args.policy, preference, *seed, args.fill / 100.0)?);
        }
        rows.push((preference, runs));
    }
    if args.json {
        let value: serde_json::Value = rows
            .iter()
            .map(|(p, runs)| {
                let m = mean(runs);
                (p.as_str().to_owned(), serde_json::json!({
                    "fill_pct": m.fill_pct, "spread_pct": m.spread_pct, "spread_gpus": m.spread_gpus, "p90_p10_pct": m.p90_p10_pct,
                    "stdev_pct": m.stdev_pct, "failed": m.failed, "seeds": runs.len(),
                }))
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!(
        "GPU allocation across the GPU nodes of {} nodes at {}% full ({} policy, {} seeds; mean over seeds)",
        experiment.node_count(),
        args.fill,
        args.policy.as_str(),
        args.seeds.0.len()
    );
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(p, runs)| {
            let m = mean(runs);
            vec![
                p.as_str().to_owned(),
                format!("{:.1}", m.fill_pct),
                format!("{:.1}", m.spread_pct),
                format!("{:.2}", m.spread_gpus),
                format!("{:.1}", m.p90_p10_pct),
                format!("{:.1}", m.stdev_pct),
                m.failed.to_string(),
            ]
        })
        .collect();
    super::super::table::print(
        &[
            "PLACEMENT",
            "FILL %",
            "SPREAD MAX-MIN (PP)",
            "SPREAD (GPUS)",
            "P90-P10 (PP)",
            "STDEV (PP)",
            "FAILED",
        ],
        &table,
    );
    Ok(())
}

fn mean(runs: &[Balance]) -> Balance {
    let n = runs.len().max(1) as f64;
    let avg = |f: fn(&Balance) -> f64| runs.iter().map(f).sum::<f64>() / n;
    Balance {
        fill_pct: avg(|b| b.fill_pct),
        spread_pct: avg(|b| b.spread_pct),
        spread_gpus: avg(|b| b.spread_gpus),
        p90_p10_pct: avg(|b| b.p90_p10_pct),
        stdev_pct: avg(|b| b.stdev_pct),
        failed: runs.iter().map(|b| b.failed).sum::<usize>() / runs.len().max(1),
    }
}
