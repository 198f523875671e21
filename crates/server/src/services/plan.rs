//! What the controller does for one service this tick, as a pure function of what it sees.
//!
//! The input is the service's generation and desired count, each replica's phase (from its job
//! and its probe), the back-off state and the room the team's guarantee leaves; the output is a
//! list of [`Action`]s and, when the service has fewer replicas than it wants, the reason. Rules:
//!
//! - **Liveness**: a replica that was ready and then failed its probe `failure_threshold` times
//!   in a row is stopped; the count rule then starts another.
//! - **Count**: fewer live replicas than desired starts the difference (after the back-off of a
//!   service whose replicas keep failing, and within the team's guarantee); more stops the
//!   surplus, pending first, then unready, then ready ones (drained: out of the gateway's table
//!   first, stopped once their in-flight requests are answered), newest first.
//! - **Rolling update** (replicas of an older generation live), as a Deployment rolls:
//!   - new replicas above `desired` (the count fell mid-rollout) go first, not-ready ones first;
//!   - old replicas that are not ready go at once: they serve nothing and are never started
//!     again;
//!   - old ready replicas go as far as availability allows: at least `desired − max_unavailable`
//!     replicas stay ready (counting new ready ones), never fewer than that because of a
//!     retirement;
//!   - new replicas start while the live total is below `desired + max_surge` and the new
//!     generation is short of `desired`, within the back-off of its failures.
//!
//!   So with the defaults (`max_surge` 1, `max_unavailable` 0) a new replica is ready before an
//!   old one leaves, and a service edited from 2 replicas to 1 retires its surplus old replica at
//!   once instead of waiting for a new one it may not start (the rollout that stuck for good).
//! - **Back-off**: the failures counted are the current generation's, reset by one of its
//!   replicas becoming ready or by a new generation (fixing the file starts afresh).
//! - **Progress deadline**: a generation not all ready `progress_deadline_s` after it was first
//!   seen while its replicas fail (or while it rolls out) is *stuck*: the plan says so with the
//!   last failure's words, the old generation keeps serving, and the back-off goes on.

use gantry_store::JobId;

/// Where a replica is, as the controller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for a node (or placed and not yet running).
    Pending,
    /// Running, not yet passing its probe.
    Starting,
    /// Running and passing its probe: it gets traffic.
    Ready,
    /// Was ready, fails its probe now (fewer than the threshold: no traffic, not restarted yet).
    Unready,
    /// Was ready and failed its probe the threshold times in a row: to be restarted.
    Dead,
    /// Out of the gateway's table, waiting for its in-flight requests before it stops.
    Draining,
    /// Asked to stop.
    Stopping,
}

impl Phase {
    /// Whether it counts toward the desired count.
    fn live(self) -> bool {
        matches!(self, Phase::Pending | Phase::Starting | Phase::Ready | Phase::Unready)
    }
}

/// One replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaState {
    /// Its job.
    pub job: JobId,
    /// The generation it runs.
    pub generation: u64,
    /// Where it is.
    pub phase: Phase,
}

/// Everything the plan reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The file's generation now.
    pub generation: u64,
    /// Replicas wanted.
    pub desired: u32,
    /// Replicas, by job id.
    pub replicas: Vec<ReplicaState>,
    /// Replicas that failed in a row (none ready since), and when the last one ended (ms).
    pub failures: u32,
    /// When the last failed replica ended (ms).
    pub last_failure_at: i64,
    /// Now (ms).
    pub now: i64,
    /// More replicas the team's quota allows (`None`: no limit), and the sentence that says
    /// why when it is the limit ([`super::quota`]).
    pub room: Option<(u32, String)>,
    /// The rolling update's bounds and deadline.
    pub rollout: Rollout,
}

/// How a generation replaces the one before it, and since when it has been trying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// Live replicas above `desired` a rollout may start (`max_surge`, default 1).
    pub max_surge: u32,
    /// Replicas below `desired` that may be unready while it rolls (`max_unavailable`,
    /// default 0). Both 0 reads as the defaults.
    pub max_unavailable: u32,
    /// When the current generation was first seen (ms).
    pub since: i64,
    /// How long it may take to be all ready before it is stuck (`progress_deadline_s`), ms.
    pub deadline_ms: i64,
    /// The current generation's last failure, in words (its last log line when there is one).
    pub last_failure: Option<String>,
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout {
            max_surge: 1,
            max_unavailable: 0,
            since: 0,
            deadline_ms: i64::from(gantry_api::service::DEFAULT_PROGRESS_DEADLINE_S) * 1000,
            last_failure: None,
        }
    }
}

/// One thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start a replica of the current generation.
    Start,
    /// Take a replica out of the gateway's table; stop it once its requests are answered.
    Drain(JobId, String),
    /// Stop a replica now.
    Stop(JobId, String),
}

/// The plan: actions, and why the service has fewer replicas than it wants (if it does).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// What to do, in order.
    pub actions: Vec<Action>,
    /// Why fewer replicas than desired are starting or running.
    pub short: Option<String>,
    /// The rollout missed its progress deadline: why, in words
    /// (`rollout stuck: generation 3 failed readiness 5 times: …`).
    pub stuck: Option<String>,
}

/// Longest wait before a failing service's next replica.
pub const MAX_BACKOFF_MS: i64 = 60_000;

/// The wait after `failures` replicas failed in a row: 1 s, 2 s, 4 s, … up to a minute.
pub fn backoff_ms(failures: u32) -> i64 {
    if failures == 0 {
        return 0;
    }
    (1000_i64 << (failures - 1).min(16)).min(MAX_BACKOFF_MS)
}

/// The plan for one service.
pub fn plan(input: &Input) -> Plan {
    let mut out = Plan::default();
    for r in input.replicas.iter().filter(|r| r.phase == Phase::Dead) {
        let why = "stopped answering its readiness probe after it was ready: restarted";
        out.actions.push(Action::Stop(r.job, why.into()));
    }
    let live: Vec<&ReplicaState> = input.replicas.iter().filter(|r| r.phase.live()).collect();
    let (current, old): (Vec<&ReplicaState>, Vec<&ReplicaState>) =
        live.iter().partition(|r| r.generation >= input.generation);
    let desired = input.desired as usize;
    if old.is_empty() {
        count(input, &live, desired, &mut out);
    } else {
        roll(input, &current, &old, desired, &mut out);
    }
    out.stuck = stuck(input, &current, !old.is_empty());
    out
}

/// Why the current generation is stuck, once it is past its deadline short of `desired` ready
/// replicas while its replicas fail (or while an older generation still serves).
fn stuck(input: &Input, current: &[&ReplicaState], rolling: bool) -> Option<String> {
    let ready = current.iter().filter(|r| r.phase == Phase::Ready).count();
    let late = input.now - input.rollout.since > input.rollout.deadline_ms;
    if ready >= input.desired as usize || !late || (input.failures == 0 && !rolling) {
        return None;
    }
    let g = input.generation;
    let what = if input.failures > 0 {
        format!("rollout stuck: generation {g} failed readiness {} times", input.failures)
    } else {
        let s = input.rollout.deadline_ms / 1000;
        format!("rollout stuck: generation {g} has {ready} of {} replicas ready after {s} s", input.desired)
    };
    Some(match &input.rollout.last_failure {
        Some(last) => gantry_api::inputs::reason(&format!("{what}: {last}")),
        None => what,
    })
}

/// Steady state: start or stop the difference.
fn count(input: &Input, live: &[&ReplicaState], desired: usize, out: &mut Plan) {
    if live.len() > desired {
        for r in surplus(live, live.len() - desired) {
            out.actions.push(retire(r, "scaled down"));
        }
        return;
    }
    let missing = desired - live.len();
    if missing > 0 {
        let started = start(input, missing, out);
        if started < missing && out.short.is_none() {
            out.short = Some(format!("{} of {desired} replicas cannot start yet", missing - started));
        }
    }
}

/// A rolling update within `max_surge` and `max_unavailable` (see the module documentation).
fn roll(input: &Input, current: &[&ReplicaState], old: &[&ReplicaState], desired: usize, out: &mut Plan) {
    let replaced = format!("replaced by generation {}", input.generation);
    let (mut surge, unavailable) = (input.rollout.max_surge as usize, input.rollout.max_unavailable as usize);
    if surge == 0 && unavailable == 0 {
        surge = 1;
    }
    // New replicas above the count go first (the count fell while the rollout ran).
    let mut current: Vec<&ReplicaState> = current.to_vec();
    if current.len() > desired {
        let gone = surplus(&current, current.len() - desired);
        for r in &gone {
            out.actions.push(retire(r, "scaled down"));
        }
        current.retain(|r| !gone.iter().any(|g| g.job == r.job));
    }
    // Old replicas that serve nothing go at once.
    let (old_ready, old_idle): (Vec<&ReplicaState>, Vec<&ReplicaState>) =
        old.iter().partition(|r| r.phase == Phase::Ready);
    for r in &old_idle {
        out.actions.push(retire(r, &replaced));
    }
    // Old ready replicas, as far as availability allows.
    let new_ready = current.iter().filter(|r| r.phase == Phase::Ready).count();
    let new_unready = current.len() - new_ready;
    let total = current.len() + old_ready.len();
    let min_available = desired.saturating_sub(unavailable);
    let may_go = total.saturating_sub(min_available + new_unready).min(old_ready.len());
    let may_go = if desired == 0 { old_ready.len() } else { may_go };
    for r in surplus(&old_ready, may_go) {
        out.actions.push(retire(r, &replaced));
    }
    // New ones, within the surge.
    let total = total - may_go;
    let n = (desired + surge).saturating_sub(total).min(desired.saturating_sub(current.len()));
    if n > 0 {
        let started = start(input, n, out);
        if started < n && out.short.is_none() {
            out.short = Some(format!(
                "{} replica(s) of generation {} cannot start yet",
                n - started,
                input.generation
            ));
        }
    }
}

/// Starts up to `n` replicas within back-off and the team's room; returns how many.
fn start(input: &Input, n: usize, out: &mut Plan) -> usize {
    let wait = input.last_failure_at + backoff_ms(input.failures) - input.now;
    if input.failures > 0 && wait > 0 {
        out.short = Some(format!(
            "{} replica(s) failed in a row; the next starts in {:.1} s",
            input.failures,
            wait as f64 / 1000.0
        ));
        return 0;
    }
    let n = match &input.room {
        Some((room, why)) if (*room as usize) < n => {
            out.short = Some(why.clone());
            *room as usize
        }
        _ => n,
    };
    out.actions.extend(std::iter::repeat_n(Action::Start, n));
    n
}

/// The `n` replicas to remove first: pending, then starting or unready, then ready; newest first.
fn surplus<'a>(replicas: &[&'a ReplicaState], n: usize) -> Vec<&'a ReplicaState> {
    let rank = |p: Phase| match p {
        Phase::Pending => 0,
        Phase::Starting | Phase::Unready => 1,
        _ => 2,
    };
    let mut sorted: Vec<&ReplicaState> = replicas.to_vec();
    sorted.sort_by_key(|r| (rank(r.phase), std::cmp::Reverse(r.job)));
    sorted.into_iter().take(n).collect()
}

/// A ready replica drains; any other stops at once.
fn retire(r: &ReplicaState, why: &str) -> Action {
    if r.phase == Phase::Ready { Action::Drain(r.job, why.into()) } else { Action::Stop(r.job, why.into()) }
}

#[cfg(test)]
#[path = "plan_props.rs"]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    fn r(job: JobId, generation: u64, phase: Phase) -> ReplicaState {
        ReplicaState { job, generation, phase }
    }

    fn input(desired: u32, replicas: Vec<ReplicaState>) -> Input {
        Input {
            generation: 1,
            desired,
            replicas,
            failures: 0,
            last_failure_at: 0,
            now: 10_000,
            room: None,
            rollout: Rollout::default(),
        }
    }

    #[test]
    fn a_service_short_of_its_count_starts_the_difference_and_one_over_it_drains_the_newest_ready() {
        let p = plan(&input(3, vec![r(1, 1, Phase::Ready)]));
        assert_eq!(p.actions, vec![Action::Start, Action::Start]);
        let p = plan(&input(1, vec![r(1, 1, Phase::Ready), r(2, 1, Phase::Ready), r(3, 1, Phase::Pending)]));
        assert_eq!(
            p.actions,
            vec![Action::Stop(3, "scaled down".into()), Action::Drain(2, "scaled down".into())]
        );
    }

    #[test]
    fn a_replica_that_stopped_answering_after_it_was_ready_is_stopped_and_replaced() {
        let p = plan(&input(2, vec![r(1, 1, Phase::Ready), r(2, 1, Phase::Dead)]));
        assert!(matches!(&p.actions[0], Action::Stop(2, why) if why.contains("readiness probe")));
        assert_eq!(p.actions[1], Action::Start);
    }

    #[test]
    fn replicas_that_keep_failing_back_off_exponentially_up_to_a_minute() {
        assert_eq!((backoff_ms(1), backoff_ms(2), backoff_ms(3)), (1000, 2000, 4000));
        assert_eq!(backoff_ms(30), MAX_BACKOFF_MS);
        let waiting = Input { failures: 3, last_failure_at: 9_000, ..input(1, vec![]) };
        let p = plan(&waiting);
        assert!(p.actions.is_empty());
        assert!(p.short.as_deref().is_some_and(|s| s.contains("next starts in 3.0 s")), "{p:?}");
        let due = Input { now: 13_000, ..waiting };
        assert_eq!(plan(&due).actions, vec![Action::Start]);
    }

    #[test]
    fn the_teams_guarantee_limits_a_scale_up_and_the_plan_says_why() {
        let limited =
            Input { room: Some((1, "team ml's guarantee".into())), ..input(4, vec![r(1, 1, Phase::Ready)]) };
        let p = plan(&limited);
        assert_eq!(p.actions, vec![Action::Start]);
        assert_eq!(p.short.as_deref(), Some("team ml's guarantee"));
    }

    #[test]
    fn a_rolling_update_surges_one_and_drains_an_old_replica_only_once_a_new_one_is_ready() {
        let gen2 = |replicas| Input { generation: 2, ..input(2, replicas) };
        // Two old ready: start one new (three in all).
        let p = plan(&gen2(vec![r(1, 1, Phase::Ready), r(2, 1, Phase::Ready)]));
        assert_eq!(p.actions, vec![Action::Start]);
        // The new one is starting: wait (no old one leaves, no second new one).
        let p = plan(&gen2(vec![r(1, 1, Phase::Ready), r(2, 1, Phase::Ready), r(3, 2, Phase::Starting)]));
        assert!(p.actions.is_empty(), "{p:?}");
        // The new one is ready: drain the newest old one, and start the next new one.
        let p = plan(&gen2(vec![r(1, 1, Phase::Ready), r(2, 1, Phase::Ready), r(3, 2, Phase::Ready)]));
        assert_eq!(p.actions, vec![Action::Drain(2, "replaced by generation 2".into()), Action::Start]);
        // One old left, one new ready, the other old draining: start the second new one.
        let p = plan(&gen2(vec![r(1, 1, Phase::Ready), r(2, 1, Phase::Draining), r(3, 2, Phase::Ready)]));
        assert_eq!(p.actions, vec![Action::Start]);
        // Both new ready: the last old one drains.
        let p = plan(&gen2(vec![r(1, 1, Phase::Ready), r(3, 2, Phase::Ready), r(4, 2, Phase::Ready)]));
        assert_eq!(p.actions, vec![Action::Drain(1, "replaced by generation 2".into())]);
    }

    #[test]
    fn every_step_of_a_rolling_update_keeps_at_least_the_ready_replicas_it_had() {
        // Simulate: each Start adds a Starting replica that turns Ready on the next step; a
        // Drain removes the replica on the next step.
        let mut replicas = vec![r(1, 1, Phase::Ready), r(2, 1, Phase::Ready), r(3, 1, Phase::Ready)];
        let mut next = 10;
        for _ in 0..40 {
            let p = plan(&Input { generation: 2, ..input(3, replicas.clone()) });
            replicas.retain(|x| x.phase != Phase::Draining);
            for x in &mut replicas {
                if x.phase == Phase::Starting {
                    x.phase = Phase::Ready;
                }
            }
            for a in p.actions {
                match a {
                    Action::Start => {
                        replicas.push(r(next, 2, Phase::Starting));
                        next += 1;
                    }
                    Action::Drain(j, _) | Action::Stop(j, _) => {
                        replicas.iter_mut().filter(|x| x.job == j).for_each(|x| x.phase = Phase::Draining);
                    }
                }
            }
            let ready = replicas.iter().filter(|x| x.phase == Phase::Ready).count();
            assert!(ready >= 3, "fewer than 3 ready: {replicas:?}");
            let live = replicas.iter().filter(|x| x.phase != Phase::Draining).count();
            assert!(live <= 4, "more than one surge: {replicas:?}");
        }
        assert!(replicas.iter().all(|x| x.generation == 2 && x.phase == Phase::Ready), "{replicas:?}");
    }
}
