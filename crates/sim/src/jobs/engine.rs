//! The job-completion simulator's clock: the Pollux artifact's loop, tick by tick.
//!
//! Every tick (60 s) each job first advances on the allocation it held, then the policy sees the
//! jobs submitted by now and not finished, and returns an allocation per job (one node index per
//! GPU). A job whose allocation changed pays a restart (30 s without progress, including the
//! first start); an emptied allocation is a preemption and costs nothing until the job resumes.
//! Every change goes through the [`gantry_core::Cluster`] ledger, so a policy that hands out a
//! GPU twice is an error, not a silently overfull node.
//!
//! Within a tick a job crosses epoch boundaries at integer seconds (round half to even) and
//! finishes at an integer second; GPUs it frees stay idle until the next tick, as in Pollux.

use std::collections::HashMap;

use gantry_core::{Cluster, NodeSpec, Placement, Request};

use super::profile::{Application, Profiles, Split};
use super::workload::JobRow;

/// A homogeneous cluster: `nodes` × `gpus_per_node` GPUs of one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterShape {
    /// Node count.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// GPU model as written (`T4`).
    pub model: String,
}

impl ClusterShape {
    /// Parses `16x4xT4`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a cluster; write NODESxGPUSxMODEL, e.g. 16x4xT4");
        let mut parts = s.splitn(3, 'x');
        let nodes: u32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let gpus: u32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let model = parts.next().filter(|m| !m.is_empty()).ok_or_else(bad)?.to_string();
        if nodes == 0 || nodes > 100_000 || gpus == 0 || gpus > 64 {
            return Err(bad());
        }
        Ok(Self { nodes, gpus_per_node: gpus, model })
    }

    /// Total GPUs.
    pub fn total_gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }

    /// Which profile files describe this GPU: `None` for T4 (Pollux's un-suffixed files), else
    /// the file suffix (`rtx`, `dgx-ext`, `quad`, `aws`, … or the model name in lower case).
    pub fn profile_suffix(&self) -> Option<String> {
        match self.model.to_ascii_lowercase().as_str() {
            "t4" => None,
            "a100" => Some("dgx-ext".into()),
            "rtx2080ti" | "2080ti" => Some("rtx".into()),
            "rtx6000" => Some("quad".into()),
            other => Some(other.to_string()),
        }
    }

    /// The cluster as the ledger sees it.
    pub fn ledger(&self) -> Cluster {
        let specs = (0..self.nodes)
            .map(|i| NodeSpec {
                name: format!("node-{i}"),
                cpu_milli: 1_000_000,
                memory_mib: 1 << 30,
                gpus: self.gpus_per_node,
                gpu_model: Some(self.model.clone()),
                gpu_memory_mib: 0,
            })
            .collect();
        Cluster::new(specs).expect("generated node names are unique and there is one model")
    }
}

/// What a policy sees of one active job.
#[derive(Debug, Clone)]
pub struct JobView<'a> {
    /// Index of the job in the workload (stable for the whole run; also its FIFO order).
    pub id: usize,
    /// The workload row.
    pub row: &'a JobRow,
    /// Team index.
    pub team: usize,
    /// Fewest GPUs the job may run on.
    pub min_gpus: u32,
    /// Most GPUs the job may use (= `min_gpus` for a rigid job).
    pub max_gpus: u32,
    /// Node index per GPU currently held (empty when pending).
    pub alloc: &'a [usize],
    /// GPU-seconds received so far (restarts included).
    pub attained_gpu_s: f64,
    /// Oracle: seconds the job still needs alone on a packed placement of its requested GPUs.
    /// Only `srtf` may read it.
    pub oracle_remaining_s: f64,
    /// Elastic jobs only (empty otherwise): goodput on `n` packed GPUs relative to one GPU,
    /// `speedup[n - 1]` for `n` up to `max_gpus`, at the batch size the job would pick there in
    /// its current epoch. This is what an elastic job reports about itself (Pollux's agents fit
    /// the same curve from their own measurements); it says nothing about how long the job runs.
    pub speedup: &'a [f64],
    /// When the job first started.
    pub first_start: Option<u64>,
    /// When its allocation last changed.
    pub last_change: Option<u64>,
}

/// A scheduling policy of the job-completion simulator.
pub trait JobPolicy {
    /// Allocations for `jobs` (same order): node index per GPU, empty for none.
    fn schedule(&mut self, now: u64, jobs: &[JobView<'_>], shape: &ClusterShape) -> Vec<Vec<usize>>;

    /// Whether the policy resizes elastic jobs. Under `--elastic` only such policies see GPU
    /// ranges (and jobs that adapt their batch size); the others run every job as requested.
    fn elastic(&self) -> bool {
        false
    }

    /// Seconds job `job` (workload index) spends copying its dataset with the GPUs of `alloc`
    /// held, as it starts on them (`--datasets`; 0 otherwise).
    fn copy_on_start(&mut self, _now: u64, _job: usize, _alloc: &[usize]) -> u64 {
        0
    }

    /// What the run measured of its datasets, when it has any (`--datasets`).
    fn data_stats(&self) -> Option<super::data::DataStats> {
        None
    }
}

/// Why a simulation stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The workload names an application without a profile.
    #[error("job `{job}` names application `{app}`, which has no profile")]
    UnknownApp {
        /// The job.
        job: String,
        /// The application.
        app: String,
    },
    /// The ledger refused an allocation the policy made.
    #[error("policy allocated job `{job}` where the ledger refuses it: {error}")]
    Refused {
        /// The job.
        job: String,
        /// The ledger's reason.
        error: gantry_core::LedgerError,
    },
    /// The policy gave a job fewer GPUs than its minimum or more than its maximum.
    #[error("policy gave job `{job}` {gpus} GPUs, outside its range {min}..={max}")]
    OutsideRange {
        /// The job.
        job: String,
        /// GPUs given.
        gpus: usize,
        /// Its minimum.
        min: u32,
        /// Its maximum.
        max: u32,
    },
    /// A job can never run on this cluster.
    #[error("job `{job}` asks for {gpus} GPUs but the cluster has {total}")]
    TooLarge {
        /// The job.
        job: String,
        /// GPUs asked.
        gpus: u32,
        /// GPUs in the cluster.
        total: u32,
    },
    /// The run did not finish within the simulated-time limit (a policy that starves a job).
    #[error("{pending} jobs were still unfinished after {limit_s} simulated seconds")]
    NoProgress {
        /// Jobs left.
        pending: usize,
        /// The limit.
        limit_s: u64,
    },
}

/// Simulator settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    /// Scheduling interval, seconds.
    pub tick_s: u64,
    /// Seconds without progress after every allocation change.
    pub restart_s: u64,
    /// Teams to assign round-robin when the workload has no `team` column.
    pub teams: usize,
    /// Jobs may run on fewer or more GPUs than requested (see [`elastic_range`]).
    pub elastic: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self { tick_s: 60, restart_s: 30, teams: 4, elastic: false }
    }
}

/// GPU range of an elastic job: from one GPU (it keeps its batch size by accumulating) to what
/// its batch size can split into (`max_batch / min_local`, one GPU for an application whose
/// batch Pollux pins), as Pollux lets its jobs range; the simulator also caps it at the cluster.
/// The request itself (`num_replicas`) does not bound an elastic job, as in Pollux.
pub fn elastic_range(app: &Application) -> (u32, u32) {
    (1, app.max_replicas())
}

/// One job's outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JobOutcome {
    /// Job name.
    pub name: String,
    /// Application.
    pub app: String,
    /// Team index.
    pub team: usize,
    /// GPUs requested.
    pub gpus: u32,
    /// Submission time, s.
    pub submit_s: f64,
    /// First start, s.
    pub start_s: u64,
    /// Completion, s.
    pub end_s: u64,
    /// Completion − submission.
    pub jct_s: f64,
    /// Allocation changes after the first start.
    pub restarts: u32,
    /// Alone on its requested GPUs, packed: how long it would have taken (restart included).
    pub ideal_s: f64,
}

/// One simulated run.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    /// Per job, in workload order.
    pub jobs: Vec<JobOutcome>,
    /// (time, jobs waiting, GPUs allocated) after each scheduling round.
    pub queue: Vec<(u64, u32, u32)>,
    /// Last completion, s.
    pub makespan_s: u64,
    /// Allocated GPU-seconds / (GPUs × makespan).
    pub utilisation: f64,
    /// Datasets (`--datasets`): GPU time idle in copies, stage-in time and how much was hidden.
    pub data: Option<super::data::DataStats>,
}

/// Memoised choices of elastic jobs: the batch split per (application, placement, epoch) and the
/// goodput curve per (application, epoch).
#[derive(Default)]
struct Splits {
    split: HashMap<(usize, Vec<u32>, usize), Split>,
    curve: HashMap<(usize, usize), Vec<f64>>,
}

fn app_key(app: &Application) -> usize {
    std::ptr::from_ref(app) as usize
}

impl Splits {
    fn best(&mut self, app: &Application, placement: &[u32], epoch: usize) -> Split {
        *self
            .split
            .entry((app_key(app), placement.to_vec(), epoch))
            .or_insert_with(|| app.best_split(placement, epoch))
    }

    /// Fills the goodput curve of `app` in `epoch` on up to `max` GPUs packed `per_node` a node.
    fn ensure_curve(&mut self, app: &Application, epoch: usize, max: u32, per_node: u32) {
        let key = (app_key(app), epoch);
        if self.curve.get(&key).is_some_and(|c| c.len() >= max as usize) {
            return;
        }
        let mut rates = Vec::with_capacity(max as usize);
        for n in 1..=max {
            let placement = packed(n, per_node);
            let split = self.best(app, &placement, epoch);
            rates.push(app.rate(&placement, split, epoch));
        }
        let base = rates.first().copied().filter(|r| *r > 0.0).unwrap_or(1.0);
        self.curve.insert(key, rates.iter().map(|r| r / base).collect());
    }

    fn curve(&self, app: &Application, epoch: usize) -> &[f64] {
        self.curve.get(&(app_key(app), epoch)).map_or(&[], Vec::as_slice)
    }
}

struct JobState<'a> {
    app: &'a Application,
    /// Picks its batch size per placement and epoch (elastic), instead of the workload's.
    adaptive: bool,
    last_change: Option<u64>,
    batch: u64,
    alloc: Vec<usize>,
    placement: Vec<u32>,
    split: Split,
    rescale_s: u64,
    progress: f64,
    epoch: usize,
    done: Option<u64>,
    changes: u32,
    first_start: Option<u64>,
    attained_gpu_s: f64,
}

impl JobState<'_> {
    /// Advances by `s` seconds from `clock` on the current placement (Pollux `simulator.py:100-157`).
    fn advance(&mut self, mut clock: u64, mut s: u64, splits: &mut Splits) {
        if self.placement.is_empty() || self.done.is_some() {
            return;
        }
        let replicas: u32 = self.placement.iter().sum();
        let d = self.rescale_s.min(s);
        self.rescale_s -= d;
        self.attained_gpu_s += (d * u64::from(replicas)) as f64;
        clock += d;
        s -= d;
        while s > 0 && self.done.is_none() {
            let rate = self.app.rate(&self.placement, self.split, self.epoch);
            let next = self.app.epoch_bounds[self.epoch + 1];
            if self.progress + rate * (s as f64) < next {
                self.progress += rate * s as f64;
                self.attained_gpu_s += (s * u64::from(replicas)) as f64;
                s = 0;
            } else {
                self.epoch += 1;
                let delta = ((next - self.progress) / rate).round_ties_even().max(0.0) as u64;
                let delta = delta.min(s);
                if self.epoch >= self.app.max_epochs {
                    self.done = Some(clock + delta);
                }
                self.progress = next;
                self.attained_gpu_s += (delta * u64::from(replicas)) as f64;
                clock += delta;
                s -= delta;
                if self.adaptive && self.done.is_none() {
                    self.split = splits.best(self.app, &self.placement, self.epoch);
                }
            }
        }
    }

    fn reallocate(&mut self, alloc: Vec<usize>, now: u64, restart_s: u64, splits: &mut Splits) {
        self.placement = run_lengths(&alloc);
        self.alloc = alloc;
        if self.placement.is_empty() {
            return;
        }
        self.last_change = Some(now);
        let replicas: u32 = self.placement.iter().sum();
        self.split = if self.adaptive {
            splits.best(self.app, &self.placement, self.epoch)
        } else {
            self.app.split(replicas, self.batch)
        };
        self.rescale_s = restart_s;
        self.changes += 1;
        self.first_start.get_or_insert(now);
    }
}

/// GPUs per node in allocation order: consecutive equal node indices form one group.
pub fn run_lengths(alloc: &[usize]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for (i, node) in alloc.iter().enumerate() {
        match out.last_mut() {
            Some(last) if i > 0 && alloc[i - 1] == *node => *last += 1,
            _ => out.push(1),
        }
    }
    out
}

/// Simulates one workload under one policy.
pub fn simulate(
    jobs: &[JobRow],
    profiles: &Profiles,
    shape: &ClusterShape,
    policy: &mut dyn JobPolicy,
    config: SimConfig,
) -> Result<RunResult, SimError> {
    let teams = assign_teams(jobs, config.teams);
    let elastic = config.elastic && policy.elastic();
    let mut splits = Splits::default();
    let mut states = Vec::with_capacity(jobs.len());
    let mut ranges = Vec::with_capacity(jobs.len());
    for row in jobs {
        let app = profiles
            .get(&row.app)
            .ok_or_else(|| SimError::UnknownApp { job: row.name.clone(), app: row.app.clone() })?;
        let range = if elastic {
            let (min, max) = elastic_range(app);
            (min, max.min(shape.total_gpus()).max(min))
        } else {
            (row.replicas, row.replicas)
        };
        if range.0 > shape.total_gpus() {
            return Err(SimError::TooLarge {
                job: row.name.clone(),
                gpus: range.0,
                total: shape.total_gpus(),
            });
        }
        ranges.push(range);
        states.push(JobState {
            app,
            adaptive: elastic,
            last_change: None,
            batch: row.batch,
            alloc: Vec::new(),
            placement: Vec::new(),
            split: Split { atomic: 1, accum: 0 },
            rescale_s: 0,
            progress: 0.0,
            epoch: 0,
            done: None,
            changes: 0,
            first_start: None,
            attained_gpu_s: 0.0,
        });
    }
    let mut ledger = shape.ledger();
    let last_submit = jobs.iter().map(|j| j.submit).fold(0.0, f64::max);
    let limit_s = last_submit as u64 + 400 * 86_400;
    let mut result = RunResult::default();
    let mut busy_gpu_s = 0.0;
    let mut now = 0u64;
    while states.iter().any(|s| s.done.is_none()) {
        for state in &mut states {
            busy_gpu_s += (state.alloc.len() as u64 * config.tick_s) as f64;
            state.advance(now, config.tick_s, &mut splits);
        }
        now += config.tick_s;
        if now > limit_s {
            let pending = states.iter().filter(|s| s.done.is_none()).count();
            return Err(SimError::NoProgress { pending, limit_s });
        }
        let active: Vec<usize> =
            (0..jobs.len()).filter(|i| jobs[*i].submit <= now as f64 && states[*i].done.is_none()).collect();
        release_finished(&mut states, &mut ledger);
        if active.is_empty() {
            continue;
        }
        if elastic {
            for i in &active {
                let s = &states[*i];
                splits.ensure_curve(s.app, s.epoch, ranges[*i].1, shape.gpus_per_node);
            }
        }
        let views: Vec<JobView<'_>> = active
            .iter()
            .map(|i| {
                let s = &states[*i];
                JobView {
                    id: *i,
                    row: &jobs[*i],
                    team: teams[*i],
                    min_gpus: ranges[*i].0,
                    max_gpus: ranges[*i].1,
                    alloc: &s.alloc,
                    attained_gpu_s: s.attained_gpu_s,
                    oracle_remaining_s: oracle_remaining(s, jobs[*i].replicas, shape),
                    speedup: if elastic { splits.curve(s.app, s.epoch) } else { &[] },
                    first_start: s.first_start,
                    last_change: s.last_change,
                }
            })
            .collect();
        let decided = policy.schedule(now, &views, shape);
        drop(views);
        let step = Step { now, restart_s: config.restart_s, ranges: &ranges };
        apply(&active, decided, &mut states, &mut ledger, jobs, step, &mut splits, policy)?;
        let waiting = active.iter().filter(|i| states[**i].alloc.is_empty()).count() as u32;
        let held: usize = states.iter().map(|s| s.alloc.len()).sum();
        result.queue.push((now, waiting, held as u32));
    }
    result.data = policy.data_stats();
    finish(jobs, &states, &teams, shape, config, busy_gpu_s, result)
}

fn release_finished(states: &mut [JobState<'_>], ledger: &mut Cluster) {
    for (i, s) in states.iter_mut().enumerate() {
        if s.done.is_some() && !s.alloc.is_empty() {
            release(ledger, i, &s.alloc);
            s.alloc.clear();
            s.placement.clear();
        }
    }
}

/// What [`apply`] needs to know about the round.
struct Step<'a> {
    now: u64,
    restart_s: u64,
    /// (min, max) GPUs per job.
    ranges: &'a [(u32, u32)],
}

#[allow(clippy::too_many_arguments)]
fn apply(
    active: &[usize],
    decided: Vec<Vec<usize>>,
    states: &mut [JobState<'_>],
    ledger: &mut Cluster,
    jobs: &[JobRow],
    step: Step<'_>,
    splits: &mut Splits,
    policy: &mut dyn JobPolicy,
) -> Result<(), SimError> {
    let mut decided = decided.into_iter();
    let mut changed = Vec::new();
    for i in active {
        // A job the policy left out loses its allocation.
        let alloc = decided.next().unwrap_or_default();
        let (min, max) = step.ranges[*i];
        if !alloc.is_empty() && !(min as usize..=max as usize).contains(&alloc.len()) {
            return Err(SimError::OutsideRange { job: jobs[*i].name.clone(), gpus: alloc.len(), min, max });
        }
        if alloc != states[*i].alloc {
            release(ledger, *i, &states[*i].alloc);
            changed.push((*i, alloc));
        }
    }
    for (i, alloc) in changed {
        hold(ledger, i, &alloc).map_err(|error| SimError::Refused { job: jobs[i].name.clone(), error })?;
        // A job that copies its dataset as it starts holds its GPUs idle meanwhile.
        let copy = if alloc.is_empty() { 0 } else { policy.copy_on_start(step.now, i, &alloc) };
        states[i].reallocate(alloc, step.now, step.restart_s + copy, splits);
    }
    Ok(())
}

/// Ledger allocation ids: one per (job, node) part.
fn part_id(job: usize, node: usize) -> u64 {
    (job as u64) << 24 | node as u64
}

fn hold(ledger: &mut Cluster, job: usize, alloc: &[usize]) -> Result<(), gantry_core::LedgerError> {
    let mut nodes: Vec<usize> = alloc.to_vec();
    nodes.sort_unstable();
    nodes.dedup();
    for node in nodes {
        let count = alloc.iter().filter(|n| **n == node).count() as u32;
        let request = Request { gpus: count, gpu_milli: 1000, ..Request::cpu_only(0, 0) };
        let gpus = ledger
            .node(node)
            .and_then(|n| n.lowest_idle_gpus(count))
            .ok_or(gantry_core::LedgerError::DoesNotFit { node, reason: "not enough idle GPUs" })?;
        ledger.allocate(part_id(job, node), &request, &Placement { node, gpus })?;
    }
    Ok(())
}

fn release(ledger: &mut Cluster, job: usize, alloc: &[usize]) {
    let mut nodes: Vec<usize> = alloc.to_vec();
    nodes.sort_unstable();
    nodes.dedup();
    for node in nodes {
        let _ = ledger.release(part_id(job, node));
    }
}

fn oracle_remaining(s: &JobState<'_>, replicas: u32, shape: &ClusterShape) -> f64 {
    let packed = packed(replicas, shape.gpus_per_node);
    s.app.ideal_seconds(&packed, s.batch, s.progress, s.epoch)
}

/// `(g, g, …, rest)`: `replicas` GPUs on as few nodes as possible.
pub fn packed(replicas: u32, per_node: u32) -> Vec<u32> {
    let mut out = vec![per_node; (replicas / per_node) as usize];
    if !replicas.is_multiple_of(per_node) {
        out.push(replicas % per_node);
    }
    out
}

fn assign_teams(jobs: &[JobRow], teams: usize) -> Vec<usize> {
    let mut names: Vec<&str> = Vec::new();
    jobs.iter()
        .enumerate()
        .map(|(i, j)| match &j.team {
            Some(t) => names.iter().position(|n| n == t).unwrap_or_else(|| {
                names.push(t);
                names.len() - 1
            }),
            None => i % teams.max(1),
        })
        .collect()
}

fn finish(
    jobs: &[JobRow],
    states: &[JobState<'_>],
    teams: &[usize],
    shape: &ClusterShape,
    config: SimConfig,
    busy_gpu_s: f64,
    mut result: RunResult,
) -> Result<RunResult, SimError> {
    for (i, (row, s)) in jobs.iter().zip(states).enumerate() {
        let end = s.done.unwrap_or(0);
        let ideal = s.app.ideal_seconds(&packed(row.replicas, shape.gpus_per_node), row.batch, 0.0, 0)
            + config.restart_s as f64;
        result.jobs.push(JobOutcome {
            name: row.name.clone(),
            app: row.app.clone(),
            team: teams[i],
            gpus: row.replicas,
            submit_s: row.submit,
            start_s: s.first_start.unwrap_or(end),
            end_s: end,
            jct_s: end as f64 - row.submit,
            restarts: s.changes.saturating_sub(1),
            ideal_s: ideal,
        });
    }
    result.makespan_s = result.jobs.iter().map(|j| j.end_s).max().unwrap_or(0);
    let capacity = f64::from(shape.total_gpus()) * result.makespan_s.max(1) as f64;
    result.utilisation = busy_gpu_s / capacity;
    Ok(result)
}
