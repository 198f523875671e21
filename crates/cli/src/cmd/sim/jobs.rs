//! `gantry sim jobs`: job completion times of queueing policies on Pollux-format workloads.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use gantry_core::queue::QueueWeights;
use gantry_sim::jobs::{self, ClusterShape, JobPolicyKind, Report, SimConfig};

/// Arguments of `gantry sim jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// A workload CSV (`name,time,application,num_replicas,batch_size`) or a directory of them.
    #[arg(long)]
    workload: PathBuf,
    /// The cluster: NODESxGPUSxMODEL.
    #[arg(long, default_value = "16x4xT4", value_parser = ClusterShape::parse)]
    cluster: ClusterShape,
    /// Policies, comma-separated: fifo, srtf (oracle bound), tiresias, gantry.
    #[arg(long, default_value = "fifo,srtf,tiresias,gantry", value_delimiter = ',')]
    policy: Vec<JobPolicyKind>,
    /// Elastic jobs: `gantry` runs each job on 1 GPU up to what its batch size can use, resizing
    /// it between rounds, and jobs pick their batch size; the other policies run every job as
    /// requested.
    #[arg(long)]
    elastic: bool,
    /// Profile directory (`<app>/placements.csv`, …); default: `job-profiles/` found in a
    /// directory above the workload.
    #[arg(long)]
    profiles: Option<PathBuf>,
    /// Teams assigned round-robin when the workload has no `team` column.
    #[arg(long, default_value_t = 4)]
    teams: usize,
    /// Seconds without progress after every allocation change.
    #[arg(long, default_value_t = 30)]
    restart_s: u64,
    /// Weights of the `gantry` policy, `key=value,…` (see `docs/scheduling.md`).
    #[arg(long, default_value = "")]
    gantry_weights: String,
    /// Datasets: a CSV `application,url,bytes[,source]`, one dataset per application. `gantry`
    /// then runs three times: copying the dataset at every start with its GPUs held, staging
    /// it while pending, and staging it with placement that prefers the nodes caching it; the
    /// other policies do not run (see `docs/data.md`).
    #[arg(long)]
    datasets: Option<PathBuf>,
    /// Node-local stage bandwidth with `--datasets`, MB/s (10^6 bytes a second).
    #[arg(long, default_value_t = 500.0)]
    stage_bandwidth: f64,
    /// Each node's dataset cache with `--datasets`, GB (10^9 bytes).
    #[arg(long, default_value_t = 1000.0)]
    cache_size: f64,
    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write results.json, summary.csv, jobs.csv, queue.csv, jct-cdf.svg and queue.svg here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Runs `gantry sim jobs`.
pub fn run(args: JobsArgs) -> anyhow::Result<()> {
    if args.policy.is_empty() {
        bail!("--policy needs at least one of fifo, srtf, tiresias, gantry");
    }
    let weights = QueueWeights::parse(&args.gantry_weights).map_err(anyhow::Error::msg)?;
    let workloads = jobs::read_workloads(&args.workload)?;
    let dir = match &args.profiles {
        Some(dir) => dir.clone(),
        None => jobs::find_profiles(&args.workload).with_context(|| {
            format!("no job-profiles/ directory above {}; pass --profiles", args.workload.display())
        })?,
    };
    let profiles = jobs::load_profiles(&dir, &args.cluster, &workloads)?;
    let data = match &args.datasets {
        None => None,
        Some(path) => {
            if !args.policy.contains(&JobPolicyKind::Gantry) {
                bail!("--datasets compares how gantry brings data to the GPUs; add gantry to --policy");
            }
            if !(args.stage_bandwidth.is_finite() && args.stage_bandwidth > 0.0) {
                bail!("--stage-bandwidth must be a positive number of MB/s, not {}", args.stage_bandwidth);
            }
            if !(args.cache_size.is_finite() && args.cache_size >= 0.0) {
                bail!("--cache-size must be a number of GB, not {}", args.cache_size);
            }
            let datasets = jobs::data::read_datasets(path)?;
            Some(jobs::data::DataSetup {
                datasets,
                bandwidth_bps: (args.stage_bandwidth * 1e6) as u64,
                cache_bytes: (args.cache_size * 1e9) as u64,
            })
        }
    };
    let config =
        SimConfig { tick_s: 60, restart_s: args.restart_s, teams: args.teams.max(1), elastic: args.elastic };
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let runs = if data.is_some() { jobs::data::DataMode::ALL.len() } else { args.policy.len() };
    let total = runs * workloads.len();
    let bar = super::runs_bar(total)?;
    let report = jobs::run_matrix(
        &args.policy,
        &workloads,
        jobs::Setup {
            profiles: &profiles,
            shape: &args.cluster,
            config,
            weights: &weights,
            data: data.as_ref(),
        },
        threads,
        &|done| bar.set_position(done as u64),
    )?;
    bar.finish_and_clear();
    if let Some(dir) = &args.out {
        write_outputs(dir, &report)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.table());
        if data.is_some() {
            print!("\n{}", report.data_table());
        }
    }
    Ok(())
}

fn write_outputs(dir: &Path, report: &Report) -> anyhow::Result<()> {
    super::write_files(
        dir,
        [
            ("results.json", serde_json::to_string_pretty(&report.json())?),
            ("summary.csv", report.summary_csv()),
            ("jobs.csv", report.jobs_csv()),
            ("queue.csv", report.queue_csv()),
            ("jct-cdf.svg", report.cdf_svg()),
            ("queue.svg", report.queue_svg()),
        ],
    )
}
