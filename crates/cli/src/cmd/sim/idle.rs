//! `gantry sim idle`: the idle policy on a model of idle jobs (see [`gantry_sim::idle`]): idle
//! allocated GPU-hours recovered and wrong reclaims, per `--act-after`.

use clap::Args;
use gantry_core::idle::{IdleAction, IdlePolicy};
use gantry_sim::idle::{IdleRun, run as simulate};

use super::Seeds;

/// Arguments of `gantry sim idle`.
#[derive(Debug, Args)]
#[command(after_help = "Example:
  gantry sim idle --act-after 2h,1h,30m,10m --seeds 1-10
  gantry sim idle --act-after 30m,10m,5m --action lend")]
pub struct IdleArgs {
    /// Idle time before the action, one run per value (warned at half of it).
    #[arg(long, value_name = "DURATIONS", value_delimiter = ',', value_parser = crate::cmd::submit::parse_time,
        default_value = "2h,1h,30m,10m")]
    act_after: Vec<u64>,
    /// A sample below this utilisation (percent) is idle.
    #[arg(long, default_value_t = 1.0)]
    below: f64,
    /// `requeue`, `cancel` or `lend` (the job keeps its GPUs; counted recovered while lent).
    #[arg(long, default_value = "requeue", value_parser = ["requeue", "cancel", "lend"])]
    action: String,
    /// Jobs per seed.
    #[arg(long, default_value_t = 5000)]
    jobs: usize,
    /// Seeds: `1-10`, `1,2` or `1`.
    #[arg(long, default_value = "1-10", value_parser = super::parse_seeds)]
    seeds: Seeds,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs every `--act-after` over the seeds and prints recovered and wrong shares.
pub fn run(args: IdleArgs) -> anyhow::Result<()> {
    let action =
        IdleAction::parse(&args.action).ok_or_else(|| anyhow::anyhow!("--action: `{}`", args.action))?;
    let mut rows = Vec::new();
    for act in &args.act_after {
        let policy =
            IdlePolicy { warn_after_s: act / 2, act_after_s: *act, below_percent: args.below, action };
        let runs: Vec<IdleRun> = args.seeds.0.iter().map(|s| simulate(&policy, *s, args.jobs)).collect();
        rows.push((*act, runs));
    }
    let stat = |runs: &[IdleRun], f: fn(&IdleRun) -> f64| {
        let v: Vec<f64> = runs.iter().map(f).collect();
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        (
            mean,
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        )
    };
    if args.json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|(act, runs)| {
                let (rec, rec_lo, rec_hi) = stat(runs, IdleRun::recovered_pct);
                let (wrong, wrong_lo, wrong_hi) = stat(runs, IdleRun::wrong_pct);
                serde_json::json!({"act_after_s": act, "recovered_pct": rec, "recovered_min": rec_lo,
                    "recovered_max": rec_hi, "wrong_pct": wrong, "wrong_min": wrong_lo, "wrong_max": wrong_hi,
                    "idle_gpu_h": stat(runs, |r| r.idle_gpu_h).0, "actions": stat(runs, |r| r.actions as f64).0,
                    "action": args.action, "early_return_pct": stat(runs, IdleRun::early_return_pct).0})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "Idle reclaim on the model ({} jobs per seed, {} seeds; mean [min–max] over seeds; {} below {}%)",
        args.jobs,
        args.seeds.0.len(),
        args.action,
        args.below
    );
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(act, runs)| {
            let (rec, rec_lo, rec_hi) = stat(runs, IdleRun::recovered_pct);
            let (wrong, wrong_lo, wrong_hi) = stat(runs, IdleRun::wrong_pct);
            vec![
                format!("{} min", act / 60),
                format!("{:.0}", stat(runs, |r| r.idle_gpu_h).0),
                format!("{rec:.1} [{rec_lo:.1}–{rec_hi:.1}]"),
                format!("{:.0}", stat(runs, |r| r.actions as f64).0),
                format!("{wrong:.2} [{wrong_lo:.2}–{wrong_hi:.2}]"),
                if action == IdleAction::Lend {
                    let (early, lo, hi) = stat(runs, IdleRun::early_return_pct);
                    format!("{early:.1} [{lo:.1}–{hi:.1}]")
                } else {
                    "-".into()
                },
            ]
        })
        .collect();
    let header = ["ACT AFTER", "IDLE GPU-H", "RECOVERED %", "ACTIONS", "WRONG %", "GIVEN BACK <10MIN %"];
    crate::cmd::table::print(&header, &table);
    Ok(())
}
