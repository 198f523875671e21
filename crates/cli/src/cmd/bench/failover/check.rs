//! The history checker: after the trials, the whole history is read back from the database and
//! judged on its own, not on what any replica believed (Jepsen's lesson: trust invariants
//! checked on histories, not isolation levels or leases).
//!
//! - **Double allocations**: the allocation history replayed in order; a GPU ever holding more
//!   than it has ([`gantry_store::history::conflicts`]).
//! - **Lost acknowledged submissions**: every submission a client saw acknowledged (a 2xx with a
//!   job id) must be that job in the database, under its request's name, once.
//! - **Duplicate starts**: a job's attempt may move to `running` once.
//! - **Stale-epoch writes**: each placement carries the leader epoch it was checked against and
//!   the database's clock when it was written; each election its epoch and the database's clock
//!   when it took the lease row. A placement written after a later epoch's election, or without
//!   an epoch at all (every replica here is fenced), was written by a leader that no longer led.
//! - **Impossible states**, once everything stopped: a job that ended or waits yet holds a GPU, a
//!   job scheduled or running without one, more than one unfinished attempt, a terminal job with
//!   one, attempts not numbered 1..n.
//!
//! Failover, per fault of the leader: from the fault (`kill -9` or `SIGSTOP`, the bench's clock,
//! which is the database's machine's) to the first placement under a later epoch.

use std::collections::{HashMap, HashSet};

use gantry_store::{
    Allocation, Attempt, Gpu, Job, JobFilter, JobState, LeadershipHistory, Store, Transition, history,
};

/// A submission a client saw acknowledged.
#[derive(Debug, Clone)]
pub struct Acked {
    /// Its request id (also the job's name).
    pub request: String,
    /// The job id the server answered.
    pub job_id: i64,
}

/// A fault of the leader: when, and the epoch it led under.
#[derive(Debug, Clone, Copy)]
pub struct LeaderFault {
    /// When it was injected (ms since the epoch).
    pub at_ms: i64,
    /// The epoch the leader held.
    pub epoch: u64,
}

/// Everything the checker reads.
#[derive(Debug, Default)]
pub struct History {
    jobs: Vec<Job>,
    attempts: HashMap<i64, Vec<Attempt>>,
    transitions: HashMap<i64, Vec<Transition>>,
    allocations: Vec<Allocation>,
    gpus: Vec<Gpu>,
    leadership: LeadershipHistory,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Trials that ran.
    pub trials: u32,
    /// GPUs given beyond their capacity, once per moment.
    pub double_allocations: usize,
    /// Acknowledged submissions missing (or under another name, or twice).
    pub lost_acknowledged: usize,
    /// Attempts that started more than once.
    pub duplicate_starts: usize,
    /// Placements written under an epoch a later election had replaced.
    pub stale_epoch_writes: usize,
    /// Jobs in a state their allocations and attempts contradict.
    pub impossible_states: usize,
    /// Seconds from each leader fault to the next placement by a later epoch.
    pub failover_s: Vec<f64>,
    /// One sentence per finding (at most the first 20 kept).
    pub details: Vec<String>,
}

impl Findings {
    /// Whether nothing was found.
    pub fn clean(&self) -> bool {
        self.double_allocations
            + self.lost_acknowledged
            + self.duplicate_starts
            + self.stale_epoch_writes
            + self.impossible_states
            == 0
    }

    fn note(&mut self, what: String) {
        if self.details.len() < 20 {
            self.details.push(what);
        }
    }
}

/// Reads the whole history.
pub fn read(store: &dyn Store) -> anyhow::Result<History> {
    let jobs = store.jobs(&JobFilter::default())?;
    let mut attempts = HashMap::new();
    let mut transitions = HashMap::new();
    for job in &jobs {
        attempts.insert(job.id, store.attempts(job.id)?);
        transitions.insert(job.id, store.transitions(job.id)?);
    }
    Ok(History {
        jobs,
        attempts,
        transitions,
        allocations: store.allocations(false)?,
        gpus: store.gpus()?,
        leadership: store.leadership_history()?,
    })
}

/// Judges the history.
pub fn check(h: &History, acked: &[Acked], faults: &[LeaderFault]) -> Findings {
    let mut f = Findings::default();
    for c in history::conflicts(&h.allocations, &h.gpus) {
        f.double_allocations += 1;
        f.note(c);
    }
    lost(h, acked, &mut f);
    for (job, transitions) in &h.transitions {
        for attempt in duplicate_starts(transitions) {
            f.duplicate_starts += 1;
            f.note(format!("job {job} attempt {attempt} started more than once"));
        }
    }
    for w in stale_writes(&h.leadership) {
        f.stale_epoch_writes += 1;
        f.note(w);
    }
    impossible(h, &mut f);
    f.failover_s = failover(&h.leadership, faults);
    f
}

fn lost(h: &History, acked: &[Acked], f: &mut Findings) {
    let by_id: HashMap<i64, &Job> = h.jobs.iter().map(|j| (j.id, j)).collect();
    let mut names: HashMap<&str, usize> = HashMap::new();
    for j in &h.jobs {
        *names.entry(j.name.as_str()).or_default() += 1;
    }
    for a in acked {
        let found = by_id.get(&a.job_id).is_some_and(|j| j.name == a.request);
        let once = names.get(a.request.as_str()) == Some(&1);
        if !(found && once) {
            f.lost_acknowledged += 1;
            f.note(format!(
                "submission {} acknowledged as job {} is not that job, once",
                a.request, a.job_id
            ));
        }
    }
}

/// The attempts that moved to `running` more than once.
pub fn duplicate_starts(transitions: &[Transition]) -> Vec<u32> {
    let mut starts: HashMap<u32, u32> = HashMap::new();
    for t in transitions.iter().filter(|t| t.to == JobState::Running) {
        *starts.entry(t.attempt.unwrap_or(0)).or_default() += 1;
    }
    let mut twice: Vec<u32> = starts.into_iter().filter(|(_, n)| *n > 1).map(|(a, _)| a).collect();
    twice.sort_unstable();
    twice
}

/// One sentence per placement written under a replaced epoch, or under none.
pub fn stale_writes(l: &LeadershipHistory) -> Vec<String> {
    let mut found = Vec::new();
    for p in &l.placements {
        let (Some(epoch), Some(at)) = (p.leader_epoch, p.recorded_at) else {
            found.push(format!("job {} attempt {} was placed by no leader", p.job_id, p.attempt));
            continue;
        };
        if let Some(t) = l.terms.iter().find(|t| t.epoch > epoch && t.elected_at < at) {
            found.push(format!(
                "job {} attempt {} was placed under epoch {epoch} at {at}, after epoch {} was elected at {}",
                p.job_id, p.attempt, t.epoch, t.elected_at
            ));
        }
    }
    found
}

/// Seconds from each leader fault to the first placement under a later epoch (faults after
/// which none came are left out).
pub fn failover(l: &LeadershipHistory, faults: &[LeaderFault]) -> Vec<f64> {
    faults
        .iter()
        .filter_map(|fault| {
            l.placements
                .iter()
                .filter(|p| p.leader_epoch.is_some_and(|e| e > fault.epoch))
                .filter_map(|p| p.recorded_at.filter(|at| *at >= fault.at_ms))
                .min()
                .map(|at| (at - fault.at_ms) as f64 / 1000.0)
        })
        .collect()
}

fn impossible(h: &History, f: &mut Findings) {
    let held: HashSet<i64> =
        h.allocations.iter().filter(|a| a.released_after.is_none()).map(|a| a.job_id).collect();
    for job in &h.jobs {
        let attempts = h.attempts.get(&job.id).map_or(&[][..], Vec::as_slice);
        let open = attempts.iter().filter(|a| a.finished_at.is_none()).count();
        let numbered = attempts.iter().enumerate().all(|(i, a)| a.attempt as usize == i + 1)
            && attempts.len() == job.attempt as usize;
        let why = if job.state.is_active() != held.contains(&job.id) {
            Some("its state and its held GPUs disagree")
        } else if open > 1 {
            Some("it has more than one unfinished attempt")
        } else if job.state.is_terminal() && open > 0 {
            Some("it ended with an unfinished attempt")
        } else if !numbered {
            Some("its attempts are not numbered 1..n")
        } else {
            None
        };
        if let Some(why) = why {
            f.impossible_states += 1;
            f.note(format!("job {} is {}, but {why}", job.id, job.state));
        }
    }
}

#[cfg(test)]
mod tests {
    use gantry_store::{PlacedAttempt, Term};

    use super::*;

    fn placed(job_id: i64, epoch: Option<u64>, at: i64) -> PlacedAttempt {
        PlacedAttempt { job_id, attempt: 1, leader_epoch: epoch, recorded_at: Some(at) }
    }

    fn terms() -> Vec<Term> {
        vec![
            Term { epoch: 1, holder: "a".into(), elected_at: 0 },
            Term { epoch: 2, holder: "b".into(), elected_at: 10_000 },
        ]
    }

    #[test]
    fn a_placement_under_an_epoch_replaced_before_it_was_written_is_stale() {
        let l = LeadershipHistory {
            terms: terms(),
            placements: vec![
                placed(1, Some(1), 9_000),
                placed(2, Some(1), 10_500),
                placed(3, Some(2), 10_600),
            ],
        };
        let stale = stale_writes(&l);
        assert_eq!(stale.len(), 1, "{stale:?}");
        assert!(stale[0].starts_with("job 2 attempt 1 was placed under epoch 1"), "{stale:?}");
    }

    #[test]
    fn a_placement_by_no_leader_is_stale_too() {
        let l = LeadershipHistory { terms: terms(), placements: vec![placed(1, None, 5)] };
        assert_eq!(stale_writes(&l).len(), 1);
    }

    #[test]
    fn failover_runs_from_the_fault_to_the_first_placement_of_a_later_epoch() {
        let l = LeadershipHistory {
            terms: terms(),
            placements: vec![
                placed(1, Some(1), 8_000),
                placed(2, Some(2), 12_500),
                placed(3, Some(2), 11_000),
            ],
        };
        let fault = LeaderFault { at_ms: 9_000, epoch: 1 };
        assert_eq!(failover(&l, &[fault]), [2.0]);
        assert!(failover(&l, &[LeaderFault { at_ms: 9_000, epoch: 2 }]).is_empty(), "no epoch 3");
    }

    #[test]
    fn an_attempt_that_moved_to_running_twice_is_a_duplicate_start() {
        let t = |to, attempt| Transition { from: None, to, reason: None, at: 0, attempt: Some(attempt) };
        let once = [t(JobState::Scheduled, 1), t(JobState::Running, 1), t(JobState::Running, 2)];
        assert!(duplicate_starts(&once).is_empty());
        let twice = [t(JobState::Running, 1), t(JobState::Running, 1)];
        assert_eq!(duplicate_starts(&twice), [1]);
    }
}
