//! What keeps a pending job out of a pass before the queue ranks it: its dependencies
//! (`--after ok:12`) and its array's limit (`--array 0-99%8`). Pure: the loop loads the
//! dependencies' states into the snapshot; [`super::plan`] calls [`gate`], decides that the jobs
//! whose dependency can never be met fail and hands the rest to the queue.
//!
//! A dependency on an array's id stands for every member. `ok` is met when every one succeeded
//! and can never be once one ended otherwise; `notok` is met when every one ended and none
//! succeeded, and can never be once one succeeded; `any` is met when every one ended. A
//! dependency that does not exist can never be met. An array's limit counts its scheduled and
//! running members; the lowest pending members go first, so `%8` never has nine at once even
//! within one pass.

use std::collections::{HashMap, HashSet};

use gantry_api::model::{Job, JobId, JobState};
use gantry_api::workflow::{Dependency, DependencyKind};

/// What the gate decided for the pending jobs it holds back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Gated {
    /// Jobs that wait, with the reason `jobs` shows.
    pub held: Vec<(JobId, String)>,
    /// Jobs whose dependency can never be met, with the reason they end with.
    pub failed: Vec<(JobId, String)>,
    /// Both, for lookups (a 10 000-member array holds back nearly all of them each pass).
    stopped: HashSet<JobId>,
}

impl Gated {
    /// Whether the job is held back or failed.
    pub fn stops(&self, id: JobId) -> bool {
        self.stopped.contains(&id)
    }

    fn hold(&mut self, id: JobId, why: String) {
        self.stopped.insert(id);
        self.held.push((id, why));
    }
}

/// Where one dependency stands.
enum Standing {
    Met,
    Waiting(String),
    Never(String),
}

/// Decides, for each pending job in order, whether it may be ranked this pass. `deps` holds the
/// state of every job a pending job depends on (every member's, for an array); a missing entry
/// is a job that does not exist.
pub fn gate(pending: &[Job], active: &[Job], deps: &HashMap<JobId, Vec<JobState>>) -> Gated {
    let mut out = Gated::default();
    let mut running: HashMap<JobId, u32> = HashMap::new();
    for a in active.iter().filter_map(|j| j.array) {
        *running.entry(a.id).or_default() += 1;
    }
    for job in pending {
        match dependencies(&job.after, deps) {
            Standing::Never(why) => {
                out.stopped.insert(job.id);
                out.failed.push((job.id, why));
                continue;
            }
            Standing::Waiting(why) => {
                out.hold(job.id, why);
                continue;
            }
            Standing::Met => {}
        }
        let Some(array) = job.array else { continue };
        let Some(limit) = array.max_running else { continue };
        let now = running.entry(array.id).or_default();
        if *now >= limit {
            let why = format!("waiting: array {} runs {now} members, its limit (%{limit})", array.id);
            out.hold(job.id, why);
        } else {
            *now += 1;
        }
    }
    out
}

fn dependencies(after: &[Dependency], deps: &HashMap<JobId, Vec<JobState>>) -> Standing {
    let mut waiting = None;
    for d in after {
        match standing(d, deps.get(&d.job).map(Vec::as_slice)) {
            Standing::Met => {}
            never @ Standing::Never(_) => return never,
            Standing::Waiting(why) => {
                waiting.get_or_insert(why);
            }
        }
    }
    waiting.map_or(Standing::Met, Standing::Waiting)
}

fn standing(d: &Dependency, states: Option<&[JobState]>) -> Standing {
    let Some(states) = states.filter(|s| !s.is_empty()) else {
        return Standing::Never(format!("dependency {} does not exist", d.job));
    };
    let ended = |s: &JobState| s.is_terminal();
    let unfinished = states.iter().find(|s| !ended(s));
    match d.kind {
        DependencyKind::Ok => {
            if let Some(bad) = states.iter().find(|s| ended(s) && **s != JobState::Succeeded) {
                return Standing::Never(format!("dependency {} {}", d.job, ended_as(*bad)));
            }
        }
        DependencyKind::NotOk => {
            if states.contains(&JobState::Succeeded) {
                return Standing::Never(format!(
                    "dependency {} succeeded (the job waited for it to fail)",
                    d.job
                ));
            }
        }
        DependencyKind::Any => {}
    }
    match unfinished {
        None => Standing::Met,
        Some(s) => {
            Standing::Waiting(format!("waiting for dependency {} ({}: it is {s})", d.job, d.kind.as_str()))
        }
    }
}

fn ended_as(state: JobState) -> &'static str {
    match state {
        JobState::Cancelled => "was cancelled",
        JobState::Timeout => "timed out",
        _ => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::workflow::ArrayMember;

    fn job(id: JobId, state: JobState) -> Job {
        Job {
            id,
            team: "t".into(),
            name: "j".into(),
            command: vec!["true".into()],
            state,
            max_retries: 3,
            ..Job::default()
        }
    }

    fn after(id: JobId, kind: DependencyKind, on: JobId) -> Job {
        Job { after: vec![Dependency { kind, job: on }], ..job(id, JobState::Pending) }
    }

    #[test]
    fn an_ok_dependency_waits_then_passes_or_fails_with_the_reason() {
        let pending = [after(2, DependencyKind::Ok, 1)];
        let mut deps = HashMap::from([(1, vec![JobState::Running])]);
        let g = gate(&pending, &[], &deps);
        assert_eq!(g.held, [(2, "waiting for dependency 1 (ok: it is running)".to_owned())]);
        deps.insert(1, vec![JobState::Succeeded]);
        let g = gate(&pending, &[], &deps);
        assert!(g.held.is_empty() && g.failed.is_empty() && !g.stops(2));
        deps.insert(1, vec![JobState::Failed]);
        assert_eq!(gate(&pending, &[], &deps).failed, [(2, "dependency 1 failed".to_owned())]);
    }

    #[test]
    fn notok_and_any_follow_how_the_dependency_ended() {
        let deps = HashMap::from([(1, vec![JobState::Succeeded]), (3, vec![JobState::Failed])]);
        let pending = [
            after(2, DependencyKind::NotOk, 1),
            after(4, DependencyKind::Any, 3),
            after(5, DependencyKind::NotOk, 3),
        ];
        let g = gate(&pending, &[], &deps);
        assert_eq!(g.failed.len(), 1);
        assert_eq!(g.failed[0].0, 2);
        assert!(g.held.is_empty());
    }

    #[test]
    fn a_missing_dependency_can_never_be_met() {
        let g = gate(&[after(2, DependencyKind::Any, 99)], &[], &HashMap::new());
        assert_eq!(g.failed, [(2, "dependency 99 does not exist".to_owned())]);
    }

    #[test]
    fn an_array_never_runs_more_members_than_its_limit() {
        let member = |id, state, index| Job {
            array: Some(ArrayMember { id: 10, index, max_running: Some(2) }),
            ..job(id, state)
        };
        let active = [member(10, JobState::Running, 0)];
        let pending: Vec<Job> = (1..5).map(|i| member(10 + i64::from(i), JobState::Pending, i)).collect();
        let g = gate(&pending, &active, &HashMap::new());
        let held: Vec<JobId> = g.held.iter().map(|(id, _)| *id).collect();
        assert_eq!(held, [12, 13, 14], "one running, so one more may start");
        assert!(g.held[0].1.contains("limit (%2)"), "{}", g.held[0].1);
    }

    /// The gate's cost on one 10 000-member array with `%8` (prints; asserts nothing on time).
    #[test]
    #[ignore = "benchmark: cargo test -p gantry-core --lib -- --ignored gate_cost --nocapture"]
    // A benchmark measures wall time; the code it measures reads none.
    #[allow(clippy::disallowed_methods)]
    fn gate_cost_on_a_ten_thousand_member_array() {
        let member = |i: u32, state| Job {
            array: Some(ArrayMember { id: 1, index: i, max_running: Some(8) }),
            ..job(i64::from(i) + 1, state)
        };
        let active: Vec<Job> = (0..8).map(|i| member(i, JobState::Running)).collect();
        let mut pending: Vec<Job> = (8..10_000).map(|i| member(i, JobState::Pending)).collect();
        let began = std::time::Instant::now();
        let g = gate(&pending, &active, &HashMap::new());
        pending.retain(|j| !g.stops(j.id));
        let took = began.elapsed();
        assert!(pending.is_empty());
        println!("gate + retain over 9 992 pending members: {:.3} ms", took.as_secs_f64() * 1e3);
    }

    proptest::proptest! {
        /// Whatever runs and waits, the gate admits exactly as many members of each array as its
        /// limit leaves room for (or all that wait), never more.
        #[test]
        fn the_gate_fills_an_arrays_limit_and_never_passes_it(
            arrays in proptest::collection::vec((1u32..6, 0usize..8, 0usize..10), 1..5),
        ) {
            let (mut active, mut pending, mut next) = (Vec::new(), Vec::new(), 100);
            for (k, (limit, running, waiting)) in arrays.iter().enumerate() {
                let id = 1000 * (k as i64 + 1);
                for i in 0..(running + waiting) {
                    next += 1;
                    let state = if i < *running { JobState::Running } else { JobState::Pending };
                    let j = Job {
                        array: Some(ArrayMember { id, index: i as u32, max_running: Some(*limit) }),
                        ..job(next, state)
                    };
                    if i < *running { active.push(j) } else { pending.push(j) }
                }
            }
            let g = gate(&pending, &active, &HashMap::new());
            proptest::prop_assert!(g.failed.is_empty());
            for (k, (limit, running, waiting)) in arrays.iter().enumerate() {
                let id = 1000 * (k as i64 + 1);
                let admitted = pending
                    .iter()
                    .filter(|j| j.array.is_some_and(|a| a.id == id) && !g.stops(j.id))
                    .count();
                let room = (*limit as usize).saturating_sub(*running);
                proptest::prop_assert_eq!(admitted, room.min(*waiting));
            }
        }
    }
}
