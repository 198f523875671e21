//! Job-completion simulator: who runs when, measured by job completion time (JCT).
//!
//! Jobs arrive over virtual time, run at the speed the Pollux (OSDI'21) artifact measured for
//! their placement ([`profile`]), and finish after a fixed number of epochs. Policies decide
//! every 60 s which jobs hold which GPUs ([`engine`]). The baselines ([`baselines`]) reproduce
//! the artifact's Tiresias job by job; `gantry` ([`gantry`]) is the server's scheduling pass,
//! [`gantry_core::sched::plan`], with no knowledge of job durations. Under `--elastic`
//! (`SimConfig::elastic`) `gantry` runs every job as an elastic job of its range
//! ([`engine::elastic_range`]), resized by the server's elastic rule, and jobs pick their batch
//! size per width and epoch ([`profile::Application::best_split`]).
//!
//! Start reading at [`run_matrix`]: policies × workload files, in parallel, into a [`Report`].

pub mod baselines;
pub mod data;
mod datarun;
pub mod engine;
pub mod gantry;
pub mod profile;
pub mod report;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use engine::{ClusterShape, JobOutcome, JobPolicy, JobView, RunResult, SimConfig, SimError, simulate};
pub use gantry::GantryPolicy;
pub use profile::{Application, Profiles};
pub use report::{PolicyReport, Report, WorkloadReport};
pub use workload::{JobRow, read_workload, workload_files};

use gantry_core::queue::QueueWeights;

/// A policy of the job simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobPolicyKind {
    /// Strict FIFO, no preemption.
    Fifo,
    /// Preemptive shortest remaining service, with oracle durations (a bound).
    Srtf,
    /// Tiresias as the Pollux artifact implements it.
    Tiresias,
    /// Gantry's queue.
    Gantry,
}

impl JobPolicyKind {
    /// The name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fifo => "fifo",
            Self::Srtf => "srtf",
            Self::Tiresias => "tiresias",
            Self::Gantry => "gantry",
        }
    }

    /// A fresh policy instance; under `config.elastic` the policies that can resize jobs do.
    pub fn build(self, weights: &QueueWeights, config: &SimConfig) -> Box<dyn JobPolicy + Send> {
        match self {
            Self::Fifo => Box::new(baselines::Fifo),
            Self::Srtf => Box::new(baselines::Srtf),
            Self::Tiresias => Box::new(baselines::Tiresias::default()),
            Self::Gantry if config.elastic => Box::new(GantryPolicy::elastic(weights.clone())),
            Self::Gantry => Box::new(GantryPolicy::new(weights.clone())),
        }
    }

    /// Whether this policy resizes elastic jobs under `--elastic` (the others run every job rigid).
    pub fn resizes(self) -> bool {
        matches!(self, Self::Gantry)
    }
}

impl std::str::FromStr for JobPolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "fifo" => Ok(Self::Fifo),
            "srtf" => Ok(Self::Srtf),
            "tiresias" => Ok(Self::Tiresias),
            "gantry" => Ok(Self::Gantry),
            other => Err(format!("unknown job policy `{other}`; choose fifo, srtf, tiresias or gantry")),
        }
    }
}

/// One workload file, read and ready.
#[derive(Debug, Clone)]
pub struct Workload {
    /// File name as reported (`workload-1.csv`).
    pub file: String,
    /// Jobs in submission order.
    pub jobs: Vec<JobRow>,
}

/// Reads every workload file `path` names.
pub fn read_workloads(path: &Path) -> Result<Vec<Workload>, crate::TraceError> {
    let mut out = Vec::new();
    for file in workload_files(path)? {
        let name =
            file.file_name().map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned());
        out.push(Workload { file: name, jobs: read_workload(&file)? });
    }
    Ok(out)
}

/// Finds `job-profiles/` next to the workload: in the workload's directory or any directory
/// above it (`traces/pollux-workloads/workloads` → `traces/job-profiles`).
pub fn find_profiles(workload: &Path) -> Option<PathBuf> {
    let start = std::fs::canonicalize(workload).ok()?;
    start.ancestors().map(|dir| dir.join("job-profiles")).find(|p| p.is_dir())
}

/// Loads the profiles every workload needs.
pub fn load_profiles(
    dir: &Path,
    shape: &ClusterShape,
    workloads: &[Workload],
) -> Result<Profiles, crate::TraceError> {
    let mut apps: Vec<String> = workloads.iter().flat_map(|w| w.jobs.iter().map(|j| j.app.clone())).collect();
    apps.sort();
    apps.dedup();
    Profiles::load(dir, shape.profile_suffix().as_deref(), &apps)
}

/// What every run of a matrix shares.
#[derive(Debug, Clone, Copy)]
pub struct Setup<'a> {
    /// Application profiles.
    pub profiles: &'a Profiles,
    /// The cluster.
    pub shape: &'a ClusterShape,
    /// Simulator settings.
    pub config: SimConfig,
    /// Weights of the `gantry` policy.
    pub weights: &'a QueueWeights,
    /// Datasets (`--datasets`): `gantry` runs once per [`data::DataMode`], the others not at all.
    pub data: Option<&'a data::DataSetup>,
}

/// Runs every (policy, workload) pair on `threads` threads; `progress` is called with the number
/// of runs finished so far.
pub fn run_matrix(
    policies: &[JobPolicyKind],
    workloads: &[Workload],
    setup: Setup<'_>,
    threads: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Report, SimError> {
    let Setup { profiles, shape, config, weights, data } = setup;
    // (policy, data mode) runs: with datasets, `gantry` once per mode.
    let runs: Vec<(JobPolicyKind, Option<data::DataMode>)> = match data {
        None => policies.iter().map(|p| (*p, None)).collect(),
        Some(_) => policies
            .iter()
            .filter(|p| **p == JobPolicyKind::Gantry)
            .flat_map(|p| data::DataMode::ALL.into_iter().map(move |m| (*p, Some(m))))
            .collect(),
    };
    let pairs: Vec<(usize, usize)> =
        (0..runs.len()).flat_map(|p| (0..workloads.len()).map(move |w| (p, w))).collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<RunResult, SimError>>>> =
        Mutex::new((0..pairs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, pairs.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some((p, w)) = pairs.get(k).copied() else { break };
                    let (kind, mode) = runs[p];
                    let mut policy = match (mode, data) {
                        (Some(mode), Some(setup)) => {
                            let gantry = if config.elastic {
                                GantryPolicy::elastic(weights.clone())
                            } else {
                                GantryPolicy::new(weights.clone())
                            };
                            Box::new(gantry.with_data(setup.clone(), mode, config.tick_s))
                        }
                        _ => kind.build(weights, &config),
                    };
                    let run = simulate(&workloads[w].jobs, profiles, shape, policy.as_mut(), config);
                    results.lock().expect("no thread panics while holding the lock")[k] = Some(run);
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                }
            });
        }
    });
    let mut results = results.into_inner().expect("no thread panicked while holding the lock").into_iter();
    let mut report = Report { cluster: shape.clone(), policies: Vec::new() };
    for (policy, mode) in runs {
        let mut files = Vec::new();
        for workload in workloads {
            let run = results.next().flatten().expect("every pair ran")?;
            files.push((workload.file.clone(), run));
        }
        let mut r = PolicyReport::new(policy, config.elastic && policy.resizes(), files);
        r.data = mode;
        report.policies.push(r);
    }
    Ok(report)
}
