//! Idle allocated GPUs: which job to warn, requeue or cancel, from its GPUs' utilisation.
//!
//! An allocation that computes nothing is the cheapest capacity there is to win back: an
//! analysis of the Philly trace finds a quarter to a half of reserved GPU time idle. Practice
//! converges on one rule, a utilisation floor held for a while: Run:ai counts 30 s windows at
//! 0 % against a per-workload idle limit, dstack stops a run below a floor for 5 minutes or more,
//! Princeton's Slurm policy cancels a job after 120 minutes at 0 % with warnings at 60 and 105.
//! Gantry's policy, per team and job kind ([`IdlePolicy`]), says the same in three numbers and an
//! action: below `below_percent` on every GPU of the job for `warn_after_s`, the owner is warned;
//! for `act_after_s`, the job is requeued (its allocation goes back to the queue, its retries
//! unspent) or cancelled. Defaults for batch jobs ([`IdlePolicy::BATCH`]): warn at 60 minutes,
//! requeue at 120, below 1 %.
//!
//! The input is the job's samples: one value per sampling time, the busiest of its GPUs then (a
//! job is idle only when all its GPUs are). [`decide`] finds the trailing stretch of samples
//! below the floor and measures it from its first sample to its last. Time without samples is
//! not idle time: a gap longer than `max_gap_ms` between two samples (an agent that stopped
//! reporting, a control plane that restarted) starts the stretch again, and a job whose last
//! sample is older than that is left alone, so a job is never reclaimed on evidence nobody saw.
//! The verdict carries that evidence ([`Evidence`]) for the event and the audit row.
//!
//! `lend` is the third action, and the only one that costs the owner nothing: the job keeps its
//! allocation and its GPUs are marked lent in the ledger (`Cluster::lend`), where the scheduling
//! pass places preemptible jobs (priority below 0) and nothing else (`sched`'s `lend` step). The
//! loan ends by a second decision, [`give_back`]: as soon as one reading of the owner's own
//! processes on its GPUs (not the GPU's, which the borrower keeps busy) is at or above the
//! floor, the borrower is preempted. A wrong lend (the owner was about to resume) costs a
//! borrower's restart and the owner a few seconds beside it, not the owner's run; so a lend can
//! come much earlier than a requeue.

use serde::{Deserialize, Serialize};

/// What to do with a job idle for `act_after_s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdleAction {
    /// Stop it and put it back in the queue, its retries unspent.
    Requeue,
    /// Stop it for good (state `cancelled`).
    Cancel,
    /// Keep it, and let preemptible jobs borrow its GPUs until it uses them again.
    Lend,
}

impl IdleAction {
    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IdleAction::Requeue => "requeue",
            IdleAction::Cancel => "cancel",
            IdleAction::Lend => "lend",
        }
    }

    /// Parses `requeue`, `cancel` or `lend`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "requeue" => Some(IdleAction::Requeue),
            "cancel" => Some(IdleAction::Cancel),
            "lend" => Some(IdleAction::Lend),
            _ => None,
        }
    }
}

/// A team's rule for one job kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IdlePolicy {
    /// Idle this long (s): the owner is warned once.
    pub warn_after_s: u64,
    /// Idle this long (s): the action is taken.
    pub act_after_s: u64,
    /// A sample below this utilisation (percent) is idle.
    pub below_percent: f64,
    /// What is done.
    pub action: IdleAction,
}

impl IdlePolicy {
    /// Batch jobs: warn at 60 minutes, requeue at 120, below 1 %.
    pub const BATCH: IdlePolicy =
        IdlePolicy { warn_after_s: 3600, act_after_s: 7200, below_percent: 1.0, action: IdleAction::Requeue };
    /// Service replicas that are not ready: warn at 15 minutes, stop at 30, below 1 %.
    pub const SERVICE: IdlePolicy =
        IdlePolicy { warn_after_s: 900, act_after_s: 1800, below_percent: 1.0, action: IdleAction::Cancel };
}

/// A job's utilisation at one time: the busiest of its GPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UtilSample {
    /// When, ms.
    pub at_ms: i64,
    /// Percent, 0–100.
    pub percent: f64,
}

/// The samples behind a verdict: the trailing stretch below the floor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    /// Samples in the stretch.
    pub samples: usize,
    /// The highest of them, percent.
    pub max_percent: f64,
    /// First sample of the stretch, ms.
    pub since_ms: i64,
    /// Last sample of the stretch, ms.
    pub until_ms: i64,
}

impl Evidence {
    /// How long the stretch lasts, s.
    pub fn idle_s(&self) -> i64 {
        (self.until_ms - self.since_ms) / 1000
    }
}

/// What [`decide`] says about one job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Busy, idle too briefly, or not enough evidence.
    Leave,
    /// Idle past `warn_after_s`, not yet warned.
    Warn(Evidence),
    /// Idle past `act_after_s`: take the action.
    Act(IdleAction, Evidence),
}

/// The verdict for a job with `samples` (oldest first) at `now_ms`, under `policy`; `warned`:
/// whether its owner was warned already in this stretch. Pure.
pub fn decide(
    policy: &IdlePolicy,
    samples: &[UtilSample],
    warned: bool,
    now_ms: i64,
    max_gap_ms: i64,
) -> Verdict {
    let Some(last) = samples.last() else { return Verdict::Leave };
    if now_ms - last.at_ms > max_gap_ms || last.percent >= policy.below_percent {
        return Verdict::Leave;
    }
    let mut first = samples.len() - 1;
    while first > 0 {
        let (prev, here) = (&samples[first - 1], &samples[first]);
        if prev.percent >= policy.below_percent || here.at_ms - prev.at_ms > max_gap_ms {
            break;
        }
        first -= 1;
    }
    let stretch = &samples[first..];
    let evidence = Evidence {
        samples: stretch.len(),
        max_percent: stretch.iter().map(|s| s.percent).fold(0.0, f64::max),
        since_ms: stretch[0].at_ms,
        until_ms: last.at_ms,
    };
    let idle_ms = evidence.until_ms - evidence.since_ms;
    let ms = |s: u64| i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX);
    if idle_ms >= ms(policy.act_after_s) {
        Verdict::Act(policy.action, evidence)
    } else if idle_ms >= ms(policy.warn_after_s) && !warned {
        Verdict::Warn(evidence)
    } else {
        Verdict::Leave
    }
}

/// Whether a lent job's GPUs go back to it: `owner` are the readings of the owner's own
/// processes since the loan began (oldest first). The latest at or above `below_percent` gives
/// them back, with the busy readings that ended the loan as evidence; none while it stays idle.
/// Pure.
pub fn give_back(policy: &IdlePolicy, owner: &[UtilSample]) -> Option<Evidence> {
    let last = owner.last()?;
    if last.percent < policy.below_percent {
        return None;
    }
    let first = owner.iter().rposition(|s| s.percent < policy.below_percent).map_or(0, |i| i + 1);
    let busy = &owner[first..];
    Some(Evidence {
        samples: busy.len(),
        max_percent: busy.iter().map(|s| s.percent).fold(0.0, f64::max),
        since_ms: busy[0].at_ms,
        until_ms: last.at_ms,
    })
}

/// The samples still needed to decide later: those of the trailing stretch below the floor, at
/// most `keep` of them (a caller's memory stays bounded however long a job runs).
pub fn trim(policy: &IdlePolicy, samples: &mut Vec<UtilSample>, keep: usize) {
    let busy = samples.iter().rposition(|s| s.percent >= policy.below_percent);
    if let Some(i) = busy {
        samples.drain(..=i);
    }
    if samples.len() > keep {
        // Keep the first (where the stretch began) and the most recent ones.
        let cut = samples.len() - keep;
        samples.drain(1..=cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: IdlePolicy =
        IdlePolicy { warn_after_s: 10, act_after_s: 20, below_percent: 1.0, action: IdleAction::Requeue };

    fn every_2s(percents: &[f64]) -> Vec<UtilSample> {
        percents.iter().enumerate().map(|(i, p)| UtilSample { at_ms: i as i64 * 2000, percent: *p }).collect()
    }

    #[test]
    fn an_idle_job_is_warned_then_requeued_with_the_samples_that_justify_it() {
        let samples = every_2s(&[0.0; 11]); // 0..20 s
        let at = |n: usize| samples[n - 1].at_ms;
        assert_eq!(decide(&TEST, &samples[..5], false, at(5), 10_000), Verdict::Leave, "8 s idle");
        assert!(
            matches!(decide(&TEST, &samples[..6], false, at(6), 10_000), Verdict::Warn(e) if e.idle_s() == 10)
        );
        assert_eq!(decide(&TEST, &samples[..7], true, at(7), 10_000), Verdict::Leave, "warned once");
        let Verdict::Act(action, e) = decide(&TEST, &samples, true, at(11), 10_000) else { panic!("acts") };
        assert_eq!((action, e.samples, e.idle_s(), e.max_percent), (IdleAction::Requeue, 11, 20, 0.0));
    }

    #[test]
    fn a_steady_or_bursty_job_is_left_alone() {
        let steady = every_2s(&[90.0; 30]);
        assert_eq!(decide(&TEST, &steady, false, 58_000, 10_000), Verdict::Leave);
        // Busy every 10 s: no stretch below the floor reaches 20 s.
        let bursty: Vec<f64> = (0..30).map(|i| if i % 5 == 0 { 95.0 } else { 0.0 }).collect();
        assert_eq!(decide(&TEST, &every_2s(&bursty), true, 58_000, 10_000), Verdict::Leave);
    }

    #[test]
    fn time_without_samples_is_not_idle_time() {
        let mut samples = every_2s(&[0.0; 4]);
        samples.extend(every_2s(&[0.0; 4]).into_iter().map(|s| UtilSample { at_ms: s.at_ms + 60_000, ..s }));
        assert_eq!(
            decide(&TEST, &samples, true, 66_000, 10_000),
            Verdict::Leave,
            "a 54 s gap restarts the stretch"
        );
        let idle = every_2s(&[0.0; 20]);
        assert_eq!(decide(&TEST, &idle, true, 38_000 + 30_000, 10_000), Verdict::Leave, "stale evidence");
    }

    #[test]
    fn a_lent_job_gets_its_gpus_back_at_its_first_busy_reading_and_not_before() {
        let lend = IdlePolicy { action: IdleAction::Lend, ..TEST };
        let idle = every_2s(&[0.0; 11]);
        assert!(matches!(decide(&lend, &idle, true, 20_000, 10_000), Verdict::Act(IdleAction::Lend, _)));
        assert_eq!(give_back(&lend, &idle), None, "still idle: the loan goes on");
        assert_eq!(give_back(&lend, &[]), None, "no reading yet");
        let resumed = every_2s(&[0.0, 0.0, 0.5, 40.0]);
        let e = give_back(&lend, &resumed).expect("the owner computes again");
        assert_eq!((e.samples, e.max_percent, e.since_ms), (1, 40.0, 6000));
    }

    #[test]
    fn trimming_keeps_the_start_of_the_stretch_and_drops_what_came_before() {
        let mut samples = every_2s(&[50.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        trim(&TEST, &mut samples, 3);
        assert_eq!(samples.iter().map(|s| s.at_ms).collect::<Vec<_>>(), [2000, 8000, 10_000]);
        assert!(matches!(decide(&TEST, &samples, false, 10_000, 10_000), Verdict::Leave));
    }
}
