//! Elastic jobs: how many GPUs each admitted job gets, between its minimum and its maximum.
//!
//! # The problem
//! An elastic job declares a range `min..=max` of GPUs and restarts from its checkpoint whenever
//! its allocation changes (a fixed cost, `restart_s`, with no progress). Rigid queueing
//! ([`super::plan`]) answers *who* runs; here the question is *how wide*. GPUs given to a job
//! are worth what they add to its goodput (useful progress per second: throughput times
//! statistical efficiency at the batch size the job picks for that width), and goodput grows
//! less than linearly, so a GPU is usually worth more to a narrow job than to a wide one. Nothing
//! is known about durations.
//!
//! # The rule
//! 1. **Admission at the minimum.** Jobs are ranked and admitted exactly as rigid jobs asking for
//!    `min` GPUs ([`super::admit`]): guarantees, priorities, attained-service bands, fair share,
//!    backfill. So elasticity never lets a wide job keep out a job the queue would start.
//! 2. **Keep what is held.** Every admitted running job starts from the width it holds (clamped
//!    to its range); a new job from its minimum. If that oversubscribes the cluster (new jobs
//!    arrived), jobs shrink one GPU at a time where the weighted goodput lost per GPU is least.
//! 3. **Grow into spare GPUs** where the weighted goodput gained per GPU is highest (a step may
//!    take several GPUs at once, since goodput is not concave at node boundaries). The weight of
//!    a job is `band_factor^-band` of its attained-service band: extra GPUs go to the jobs the
//!    queue ranks as likely short first, which is what lowers the mean JCT.
//! 4. **Hysteresis: a resize must pay for its restart.** The first change of a running job's
//!    width is charged the goodput it loses while restarting, amortised over the time it is
//!    expected to keep running — its age (least-attained-service reasoning: a job that has run
//!    for `a` seconds is likely to run about as long again) — times `resize_margin`. A job that
//!    just changed, or whose gain is marginal, keeps its width: restarts cannot eat the gain.
//! 5. **Placement.** Jobs whose width is unchanged keep their GPUs. The others (new or resized)
//!    are placed widest first with [`place_gang`] (one node when possible, else the fewest
//!    nodes); widths never exceed the cluster, so placement cannot fail.

use super::fairshare::Usage;
use super::plan::{NodeFree, QueuedJob, Team, admit, place_gang};
use super::weights::QueueWeights;

/// What the elastic planner knows about one job beyond [`QueuedJob`] (whose `gpus` is the
/// minimum).
#[derive(Debug, Clone, PartialEq)]
pub struct ElasticJob {
    /// Most GPUs the job can use (≥ the job's `gpus`, its minimum).
    pub max_gpus: u32,
    /// Goodput on `n` GPUs, `speedup[n - 1]`, in any unit proportional to useful progress per
    /// second (relative to one GPU is customary). Must cover `1..=max_gpus`; missing entries count
    /// as no gain.
    pub speedup: Vec<f64>,
    /// Seconds since the job first started (0 when it has not run).
    pub age_s: f64,
    /// Seconds since its allocation last changed (0 when it has not run).
    pub since_change_s: f64,
}

/// Settings of the elastic planner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ElasticSettings {
    /// Seconds a job loses on every allocation change.
    pub restart_s: f64,
    /// A resize must gain this many times the goodput its restart costs.
    pub resize_margin: f64,
}

/// Most GPUs one growth step considers at once.
const MAX_STEP: u32 = 8;

/// One round for elastic jobs: per job (in the order of `jobs`), the (node, GPUs) parts it holds
/// after the round — the same parts as its `held` when unchanged, empty when it waits or is
/// preempted. `elastic[k]` describes `jobs[k]`.
pub fn plan_elastic(
    w: &QueueWeights,
    teams: &[Team],
    jobs: &[QueuedJob],
    elastic: &[ElasticJob],
    usage: &Usage,
    capacity: &NodeFree,
    settings: ElasticSettings,
) -> Vec<Vec<(usize, u32)>> {
    let (order, admitted) = admit(w, teams, jobs, usage, capacity);
    let total: u32 = capacity.iter().sum();
    let members: Vec<usize> = order.iter().copied().filter(|k| admitted[*k]).collect();
    let widths = widths(w, jobs, elastic, &members, total, settings);
    place(jobs, &members, &widths, capacity)
}

/// A job's state inside the width search.
struct Slot<'a> {
    job: &'a QueuedJob,
    info: &'a ElasticJob,
    weight: f64,
    min: u32,
    max: u32,
    held: u32,
    width: u32,
}

impl Slot<'_> {
    fn goodput(&self, n: u32) -> f64 {
        if n == 0 {
            return 0.0;
        }
        let i = (n.min(self.max) - 1) as usize;
        self.info.speedup.get(i).copied().unwrap_or_else(|| self.info.speedup.last().copied().unwrap_or(0.0))
    }

    /// Weighted goodput a restart of this job would cost, if moving to `n` is its first change
    /// this round (0 for a job that is not running or already changes).
    fn restart_cost(&self, n: u32, s: ElasticSettings) -> f64 {
        if self.held == 0 || self.width != self.held {
            return 0.0;
        }
        let horizon = self.info.age_s.max(s.restart_s).max(1.0);
        let settle = (s.restart_s / self.info.since_change_s.max(1.0)).min(1.0);
        self.weight * self.goodput(n) * s.restart_s / horizon * s.resize_margin * (1.0 + settle)
    }

    /// Best (value per GPU, GPUs) of growing by 1..=`spare` GPUs.
    fn best_growth(&self, spare: u32, s: ElasticSettings) -> Option<(f64, u32)> {
        let now = self.goodput(self.width);
        let mut best: Option<(f64, u32)> = None;
        for k in 1..=spare.min(MAX_STEP).min(self.max.saturating_sub(self.width)) {
            let n = self.width + k;
            let gain = self.weight * (self.goodput(n) - now) - self.restart_cost(n, s);
            let per = gain / f64::from(k);
            if per > 1e-12 && best.is_none_or(|b| per > b.0) {
                best = Some((per, k));
            }
        }
        best
    }

    /// Value lost per GPU by shrinking one GPU.
    fn shrink_loss(&self, s: ElasticSettings) -> f64 {
        let n = self.width - 1;
        self.weight * (self.goodput(self.width) - self.goodput(n)) + self.restart_cost(n, s)
    }
}

fn widths(
    w: &QueueWeights,
    jobs: &[QueuedJob],
    elastic: &[ElasticJob],
    members: &[usize],
    total: u32,
    s: ElasticSettings,
) -> Vec<u32> {
    let mut slots: Vec<Slot<'_>> = members
        .iter()
        .map(|k| {
            let job = &jobs[*k];
            let info = &elastic[*k];
            let min = job.gpus;
            let max = info.max_gpus.max(min);
            let held: u32 = job.held.iter().map(|p| p.1).sum();
            let running = held > 0;
            let band = w.band(job.attained_gpu_s).saturating_sub(u32::from(w.sticky && running));
            let weight = w.band_factor.powi(-(band as i32));
            let width = if running { held.clamp(min, max) } else { min };
            Slot { job, info, weight, min, max, held, width }
        })
        .collect();
    // Admission granted every minimum; shrink what is held until the widths fit.
    let mut used: u32 = slots.iter().map(|x| x.width).sum();
    while used > total {
        let victim = slots
            .iter()
            .enumerate()
            .filter(|(_, x)| x.width > x.min)
            .min_by(|a, b| a.1.shrink_loss(s).total_cmp(&b.1.shrink_loss(s)).then(a.0.cmp(&b.0)))
            .map(|(i, _)| i);
        let Some(i) = victim else { break };
        slots[i].width -= 1;
        used -= 1;
    }
    // Grow into spare GPUs, best value per GPU first (rank order breaks ties).
    while used < total {
        let spare = total - used;
        let mut best: Option<(usize, f64, u32)> = None;
        for (i, slot) in slots.iter().enumerate() {
            if let Some((per, k)) = slot.best_growth(spare, s)
                && best.is_none_or(|b| per > b.1)
            {
                best = Some((i, per, k));
            }
        }
        let Some((i, _, k)) = best else { break };
        slots[i].width += k;
        used += k;
    }
    let mut out = vec![0; jobs.len()];
    for (slot, k) in slots.iter().zip(members) {
        debug_assert!(slot.job.gpus <= slot.width);
        out[*k] = slot.width;
    }
    out
}

fn place(
    jobs: &[QueuedJob],
    members: &[usize],
    widths: &[u32],
    capacity: &NodeFree,
) -> Vec<Vec<(usize, u32)>> {
    let mut free = capacity.to_vec();
    let mut out: Vec<Vec<(usize, u32)>> = vec![Vec::new(); jobs.len()];
    let mut moving = Vec::new();
    for k in members {
        let job = &jobs[*k];
        let held: u32 = job.held.iter().map(|p| p.1).sum();
        if held > 0 && held == widths[*k] {
            for (node, n) in &job.held {
                free[*node] = free[*node].saturating_sub(*n);
            }
            out[*k] = job.held.clone();
        } else {
            moving.push(*k);
        }
    }
    // Widest first (stable: rank order among equals), so wide jobs find whole nodes.
    moving.sort_by_key(|k| std::cmp::Reverse(widths[*k]));
    for k in moving {
        out[k] = place_gang(&mut free, widths[k]).expect("widths never exceed the cluster's GPUs");
    }
    out
}

#[cfg(test)]
#[path = "elastic_tests.rs"]
mod tests;
