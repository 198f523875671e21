//! `gantry sim serve`: autoscaling policies on an LLM request trace (Azure format).

use std::path::{Path, PathBuf};

use anyhow::bail;
use clap::Args;
use gantry_sim::serve::{self, DEFAULT_PROFILE, Profile, Report, ServePolicy, Settings};

/// Arguments of `gantry sim serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Request trace CSV: `TIMESTAMP,ContextTokens,GeneratedTokens` (Azure LLM inference format).
    #[arg(long)]
    trace: PathBuf,
    /// Replica profile `MODEL-GPU-tpN`, e.g. llama2-70b-h100-tp4 or opt-13b-a100-tp1.
    #[arg(long, default_value = DEFAULT_PROFILE)]
    profile: String,
    /// Policies, comma-separated: gantry, hpa, kpa, rayserve, fixed.
    #[arg(long, default_value = "gantry,hpa,kpa,rayserve,fixed", value_delimiter = ',')]
    policy: Vec<ServePolicy>,
    /// Compress the trace's time by this factor (10: ten times the request rate).
    #[arg(long, default_value_t = 1.0)]
    rate_scale: f64,
    /// The time-to-first-token SLO in seconds.
    #[arg(long, default_value_t = 2.0)]
    slo_ttft_s: f64,
    /// The most replicas a policy may hold.
    #[arg(long, default_value_t = 64)]
    max_replicas: u32,
    /// Replicas ready when the trace starts (default: the `fixed` oracle's count).
    #[arg(long)]
    initial: Option<u32>,
    /// Seed of the gateway's two-choice balancer.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write results.json, summary.csv, series.csv, decisions.csv, grid.csv and replicas.svg here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Runs `gantry sim serve`.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    if !(args.rate_scale.is_finite() && args.rate_scale > 0.0 && args.rate_scale <= 10_000.0) {
        bail!("--rate-scale must be above 0 and at most 10000, got {}", args.rate_scale);
    }
    if !(args.slo_ttft_s.is_finite() && args.slo_ttft_s > 0.0) {
        bail!("--slo-ttft-s must be a positive number of seconds, got {}", args.slo_ttft_s);
    }
    if args.policy.is_empty() {
        bail!("--policy needs at least one of gantry, hpa, kpa, rayserve, fixed");
    }
    if !(1..=1024).contains(&args.max_replicas) {
        bail!("--max-replicas must be between 1 and 1024, got {}", args.max_replicas);
    }
    let profile = Profile::named(&args.profile).map_err(anyhow::Error::msg)?;
    let requests = serve::read_requests(&args.trace)?;
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let settings = Settings {
        rate_scale: args.rate_scale,
        slo_ttft_s: args.slo_ttft_s,
        max_replicas: args.max_replicas,
        initial: args.initial,
        seed: args.seed,
        threads,
    };
    let outcomes = serve::evaluate(&requests, &profile, &args.policy, settings);
    let trace = args.trace.file_stem().map_or("trace".into(), |s| s.to_string_lossy().into_owned());
    let report = Report {
        trace,
        profile: profile.name.clone(),
        rate_scale: args.rate_scale,
        slo_ttft_s: args.slo_ttft_s,
        outcomes,
    };
    if let Some(dir) = &args.out {
        write_outputs(dir, &report)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

fn write_outputs(dir: &Path, report: &Report) -> anyhow::Result<()> {
    super::write_files(
        dir,
        [
            ("results.json", serde_json::to_string_pretty(&report.json())?),
            ("summary.csv", report.summary_csv()),
            ("series.csv", report.series_csv()),
            ("decisions.csv", report.decisions_csv()),
            ("grid.csv", report.grid_csv()),
            ("replicas.svg", report.svg()),
        ],
    )
}
