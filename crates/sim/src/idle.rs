//! Idle reclaim measured on a model (`gantry sim idle`): GPU-hours the idle policy recovers, and
//! how often it reclaims a job that was about to resume.
//!
//! The model, drawn per seed (it is a model, not a trace): jobs of 1, 2, 4 or 8 GPUs (1 most
//! often) running 1 to 48 hours, busy at 70 % when busy. A share of them, itself drawn per seed
//! between 20 % and 50 % (the Philly analysis finds a quarter to a half of reserved GPU time
//! idle), leave their GPUs idle in one of three ways: *abandoned* (idle from some point until
//! the end: a forgotten notebook, a hung job; half of them), a *long pause* (1 to 6 hours, then
//! busy again: waiting on something, debugging; a quarter), or *short pauses* (two to six of 5
//! to 40 minutes: evaluation, checkpoints, input stalls; a quarter). Each job is sampled every
//! minute and the samples go through the server's decision, [`gantry_core::idle::decide`], with
//! the policy given. An action at time t inside an idle stretch ending at e recovers
//! GPUs × (e − t) (the job no longer holds them) and ends the job's simulation; it is *wrong*
//! when the job would have been busy again within 10 minutes (e − t ≤ 10 min). Recovered is a
//! share of all idle allocated GPU-hours, wrong a share of actions.
//!
//! Under `lend` the action stops nobody: the job keeps its GPUs, a borrower runs on them until
//! the job's first busy sample ([`gantry_core::idle::give_back`]), and the job's simulation goes
//! on (a later stretch may be lent again). A loan at t in a stretch ending at e recovers
//! GPUs × (e − t), as a requeue would, assuming preemptible work waits to borrow it (a cluster
//! without such work recovers nothing by lending). It reclaims nothing from the owner, so it is
//! never a wrong reclaim; its cost is the borrower's: a loan given back within 10 minutes
//! (`early_returns`) is a borrower preempted soon after it started.

use gantry_core::idle::{IdleAction, IdlePolicy, UtilSample, Verdict, decide};
use gantry_core::{RandomSource, SplitMix64};

/// Seconds between two samples.
const SAMPLE_S: i64 = 60;
/// An action is wrong when the job resumes within this (s).
const WRONG_WITHIN_S: i64 = 600;

/// One seed's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct IdleRun {
    /// Idle allocated GPU-hours in the workload.
    pub idle_gpu_h: f64,
    /// Of them, recovered by actions.
    pub recovered_gpu_h: f64,
    /// Actions taken (requeue or cancel).
    pub actions: usize,
    /// Requeues and cancels of jobs that resumed within 10 minutes.
    pub wrong: usize,
    /// Loans (under `lend`; they are among `actions`, never `wrong`).
    pub lends: usize,
    /// Loans given back within 10 minutes (the borrower preempted soon after it started).
    pub early_returns: usize,
    /// Jobs simulated.
    pub jobs: usize,
}

impl IdleRun {
    /// Recovered share of idle GPU-hours, %.
    pub fn recovered_pct(&self) -> f64 {
        if self.idle_gpu_h > 0.0 { 100.0 * self.recovered_gpu_h / self.idle_gpu_h } else { 0.0 }
    }

    /// Wrong share of actions, %.
    pub fn wrong_pct(&self) -> f64 {
        if self.actions > 0 { 100.0 * self.wrong as f64 / self.actions as f64 } else { 0.0 }
    }

    /// Share of loans given back within 10 minutes, %.
    pub fn early_return_pct(&self) -> f64 {
        if self.lends > 0 { 100.0 * self.early_returns as f64 / self.lends as f64 } else { 0.0 }
    }
}

fn uniform(rng: &mut dyn RandomSource) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn between(rng: &mut dyn RandomSource, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * uniform(rng)
}

/// One job: its GPUs, length (s) and idle stretches `[start, end)` (s from its start).
fn draw_job(rng: &mut dyn RandomSource, idle_share: f64) -> (u32, i64, Vec<(i64, i64)>) {
    let gpus = [1, 1, 1, 1, 2, 2, 4, 8][rng.index(8)];
    let length = (3600.0 * (1.0 + 47.0 * uniform(rng).powi(3))) as i64;
    let mut stretches = Vec::new();
    if uniform(rng) < idle_share {
        let kind = uniform(rng);
        if kind < 0.5 {
            let from = (length as f64 * between(rng, 0.1, 0.9)) as i64;
            stretches.push((from, length));
        } else if kind < 0.75 {
            let len = between(rng, 3600.0, 6.0 * 3600.0) as i64;
            let from = (uniform(rng) * (length - len).max(0) as f64) as i64;
            stretches.push((from, (from + len).min(length)));
        } else {
            for _ in 0..2 + rng.index(5) {
                let len = between(rng, 300.0, 2400.0) as i64;
                let from = (uniform(rng) * (length - len).max(0) as f64) as i64;
                stretches.push((from, (from + len).min(length)));
            }
            stretches.sort_unstable();
        }
    }
    (gpus, length, stretches)
}

/// Runs `jobs` jobs of the model for `seed` under `policy`.
pub fn run(policy: &IdlePolicy, seed: u64, jobs: usize) -> IdleRun {
    let mut rng = SplitMix64::new(seed);
    let idle_share = between(&mut rng, 0.2, 0.5);
    let mut out = IdleRun { jobs, ..IdleRun::default() };
    let max_gap = 3 * SAMPLE_S * 1000;
    for _ in 0..jobs {
        let (gpus, length, stretches) = draw_job(&mut rng, idle_share);
        let g = f64::from(gpus);
        // Overlapping short pauses count once.
        let mut covered = 0i64;
        let mut last_end = 0i64;
        for (a, b) in &stretches {
            let a = (*a).max(last_end);
            covered += (b - a).max(0);
            last_end = last_end.max(*b);
        }
        out.idle_gpu_h += g * covered as f64 / 3600.0;
        let (mut samples, mut warned) = (Vec::new(), false);
        let mut t = 0;
        while t < length {
            let idle_until = stretches.iter().filter(|(a, b)| *a <= t && t < *b).map(|s| s.1).max();
            let percent = if idle_until.is_some() { 0.0 } else { 70.0 };
            samples.push(UtilSample { at_ms: t * 1000, percent });
            match decide(policy, &samples, warned, t * 1000, max_gap) {
                Verdict::Leave => {}
                Verdict::Warn(_) => warned = true,
                Verdict::Act(action, _) => {
                    let end = idle_until.unwrap_or(t);
                    out.actions += 1;
                    out.recovered_gpu_h += g * (end - t) as f64 / 3600.0;
                    let soon = end - t <= WRONG_WITHIN_S && end < length;
                    if action != IdleAction::Lend {
                        out.wrong += usize::from(soon);
                        break;
                    }
                    // Lent until the job's first busy sample, which gives it back; the job runs on.
                    out.lends += 1;
                    out.early_returns += usize::from(soon);
                    samples.clear();
                    warned = false;
                    t = (end + SAMPLE_S - 1) / SAMPLE_S * SAMPLE_S;
                    continue;
                }
            }
            if percent > 0.0 {
                samples.clear();
                warned = false;
            }
            t += SAMPLE_S;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use gantry_core::idle::IdleAction;

    use super::*;

    fn policy(act_after_s: u64) -> IdlePolicy {
        IdlePolicy {
            warn_after_s: act_after_s / 2,
            act_after_s,
            below_percent: 1.0,
            action: IdleAction::Requeue,
        }
    }

    #[test]
    fn a_shorter_act_after_recovers_more_and_reclaims_more_jobs_that_resume() {
        let slow = run(&policy(7200), 1, 2000);
        let fast = run(&policy(600), 1, 2000);
        assert!(slow.idle_gpu_h > 0.0 && slow.idle_gpu_h == fast.idle_gpu_h, "same workload");
        assert!(fast.recovered_pct() > slow.recovered_pct(), "{fast:?} vs {slow:?}");
        assert!(fast.wrong >= slow.wrong, "{fast:?} vs {slow:?}");
        assert_eq!(run(&policy(7200), 1, 2000), slow, "the same seed gives the same run");
    }

    #[test]
    fn lending_recovers_at_least_what_a_requeue_at_the_same_limit_does_and_stops_no_owner() {
        for seed in [1, 2, 3] {
            let requeue = run(&policy(600), seed, 2000);
            let lend = run(&IdlePolicy { action: IdleAction::Lend, ..policy(600) }, seed, 2000);
            assert!(requeue.wrong > 0, "requeueing at 10 minutes stops jobs about to resume: {requeue:?}");
            assert_eq!((lend.wrong, lend.lends), (0, lend.actions), "{lend:?}");
            assert!(lend.recovered_gpu_h >= requeue.recovered_gpu_h, "{lend:?} vs {requeue:?}");
            assert!(lend.early_returns > 0 && lend.early_returns < lend.lends, "{lend:?}");
        }
    }
}
