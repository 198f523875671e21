//! `gantry sim fgd`: the FGD fragmentation benchmark on a node list and pod list(s).

pub mod idle;
pub mod jobs;
pub mod serve;
pub mod spread;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use gantry_core::PolicyKind;
use gantry_sim::{Experiment, PolicyResult, read_nodes, read_pods, report, run_all};
use indicatif::{ProgressBar, ProgressStyle};

/// Simulator subcommands.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Fill a cluster with a pod list, one attempt per pod, and report unallocated GPUs (FGD, ATC'23).
    Fgd(FgdArgs),
    /// Job completion times of queueing policies on Pollux-format workloads (fifo, srtf, tiresias, gantry).
    Jobs(jobs::JobsArgs),
    /// Autoscaling policies on an LLM request trace (gantry, hpa, kpa, rayserve, fixed).
    Serve(serve::ServeArgs),
    /// The idle policy on a model of idle jobs: GPU-hours recovered and wrong reclaims.
    Idle(idle::IdleArgs),
    /// How evenly a node pool's placement (pack or spread) loads the nodes of a half-full cluster.
    Spread(spread::SpreadArgs),
}

/// Arguments of `gantry sim fgd`.
#[derive(Debug, Args)]
pub struct FgdArgs {
    /// Node list CSV (sn,cpu_milli,memory_mib,gpu,model).
    #[arg(long)]
    nodes: PathBuf,
    /// Pod list CSV(s); repeat the flag or separate with commas to run several traces.
    #[arg(long, required = true, value_delimiter = ',')]
    pods: Vec<PathBuf>,
    /// Policies, comma-separated: random, dotprod, clustering, packing, bestfit, fgd, gantry.
    #[arg(long, default_value = "fgd,gantry", value_delimiter = ',')]
    policy: Vec<PolicyKind>,
    /// Seeds: `42-51`, `42,43` or `42`.
    #[arg(long, default_value = "42-51", value_parser = parse_seeds)]
    seeds: Seeds,
    /// Tune the workload to this multiple of the cluster's GPU capacity.
    #[arg(long, default_value_t = 1.3)]
    tune: f64,
    /// Print one JSON object on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write results.json, curves.csv, summary.csv and chart.svg under this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// A list of seeds.
#[derive(Debug, Clone)]
pub struct Seeds(pub(crate) Vec<u64>);

pub(crate) fn parse_seeds(s: &str) -> Result<Seeds, String> {
    let bad = || format!("`{s}` is not a seed list; use e.g. 42-51, 42,43 or 42");
    let mut seeds = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        if let Some((a, b)) = part.split_once('-') {
            let a: u64 = a.trim().parse().map_err(|_| bad())?;
            let b: u64 = b.trim().parse().map_err(|_| bad())?;
            if b < a || b - a > 100_000 {
                return Err(bad());
            }
            seeds.extend(a..=b);
        } else {
            seeds.push(part.parse().map_err(|_| bad())?);
        }
    }
    if seeds.is_empty() {
        return Err(bad());
    }
    Ok(Seeds(seeds))
}

/// Runs a simulator subcommand.
pub fn run(command: SimCommand) -> anyhow::Result<()> {
    match command {
        SimCommand::Fgd(args) => fgd(args),
        SimCommand::Jobs(args) => jobs::run(args),
        SimCommand::Serve(args) => serve::run(args),
        SimCommand::Spread(args) => spread::run(args),
        SimCommand::Idle(args) => idle::run(args),
    }
}

fn fgd(args: FgdArgs) -> anyhow::Result<()> {
    if !(args.tune > 0.0 && args.tune <= 10.0) {
        bail!("--tune must be between 0 and 10, got {}", args.tune);
    }
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let nodes = read_nodes(&args.nodes)?;
    let mut traces = Vec::new();
    for path in &args.pods {
        traces.push((stem(path), read_pods(path)?));
    }
    let seeds = &args.seeds.0;
    let total = traces.len() * args.policy.len() * seeds.len();
    let bar = runs_bar(total)?;
    let started = Instant::now();
    let mut outputs = Vec::new();
    for (name, pods) in traces {
        let experiment = Experiment::new(nodes.clone(), pods, args.tune).context("building the cluster")?;
        let base = bar.position();
        let t0 = Instant::now();
        let results =
            run_all(&experiment, &args.policy, seeds, threads, &|done| bar.set_position(base + done as u64))?;
        outputs.push((name, experiment.total_gpus(), t0.elapsed().as_secs_f64(), results));
    }
    bar.finish_and_clear();
    let wall = started.elapsed().as_secs_f64();
    if let Some(dir) = &args.out {
        write_outputs(dir, &outputs)?;
    }
    print(&outputs, args.json, wall)
}

/// The progress bar of both simulators, on stderr (hidden when stderr is not a terminal): runs
/// finished out of `total`, elapsed time and an estimate of what is left. It ticks every
/// 250 ms, so a long run in progress still shows the clock moving.
pub(crate) fn runs_bar(total: usize) -> anyhow::Result<ProgressBar> {
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} runs, eta {eta}")
            .context("progress bar template")?,
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(250));
    Ok(bar)
}

type Output = (String, u64, f64, Vec<PolicyResult>);

fn print(outputs: &[Output], as_json: bool, wall: f64) -> anyhow::Result<()> {
    if as_json {
        let value = if let [(name, gpus, _, results)] = outputs {
            report::json(name, *gpus, wall, results)
        } else {
            let traces: Vec<_> = outputs.iter().map(|(n, g, w, r)| report::json(n, *g, *w, r)).collect();
            serde_json::json!({"wall_seconds": wall, "traces": traces})
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        for (name, gpus, seconds, results) in outputs {
            print!("{}", report::table(name, *gpus, results));
            println!("({} runs in {seconds:.2} s)\n", results.iter().map(|r| r.runs.len()).sum::<usize>());
        }
        println!("total wall time {wall:.2} s");
    }
    Ok(())
}

fn write_outputs(dir: &Path, outputs: &[Output]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let multi = outputs.len() > 1;
    for (name, gpus, seconds, results) in outputs {
        let prefix = if multi { format!("{name}-") } else { String::new() };
        let files = [
            ("results.json", serde_json::to_string_pretty(&report::json(name, *gpus, *seconds, results))?),
            ("curves.csv", report::curves_csv(results)),
            ("summary.csv", report::summary_csv(results)),
            ("chart.svg", report::svg(name, results)),
        ];
        for (file, body) in files {
            let path = dir.join(format!("{prefix}{file}"));
            std::fs::write(&path, body).with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    Ok(())
}

fn stem(path: &Path) -> String {
    path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned())
}

/// Writes each `(file name, contents)` into `dir`, made first; an error names the path.
pub fn write_files<const N: usize>(dir: &std::path::Path, files: [(&str, String); N]) -> anyhow::Result<()> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (file, body) in files {
        let path = dir.join(file);
        std::fs::write(&path, body).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
