//! The scheduling loop: bring the scheduler's copy of the store up to date with what changed
//! ([`State`]), [`plan`] (pure) on its snapshot, record each decision through the dispatcher,
//! repeat. A decision is durable before anything acts on it: the dispatcher signals the
//! agents it concerns once it has committed, and their held heartbeats answer it
//! ([`crate::assigned`]).

mod dispatch;
mod state;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gantry_core::sched::{self, Memory};
use gantry_core::{PolicyKind, SplitMix64};
use gantry_store::{JobFilter, JobId, JobState, Store};
use tokio::sync::watch;
use tokio::time::Instant;

pub use dispatch::{Waits, gang, placement};
pub use gantry_core::sched::{
    Decision, Gated, Held, Plan, Preemption, QueueInput, Resize, Snapshot, Standing, gate,
};
pub use state::{State, Synced, held};

/// The seed of every pass's random stream (placement ties the policy breaks at random).
pub const SEED: u64 = 0x9a17;

/// One pass of the core's [`sched::plan`] over `s`, its decisions grouped (tests, benchmarks).
pub fn plan(s: &Snapshot, kind: PolicyKind, seed: u64) -> Plan {
    Plan::from(sched::plan(s, kind, &mut SplitMix64::new(seed)))
}

/// The core's priority-FIFO baseline pass ([`sched::plan_priority_fifo`]).
pub fn plan_priority_fifo(s: &Snapshot, kind: PolicyKind, seed: u64) -> Plan {
    sched::plan_priority_fifo(s, kind, &mut SplitMix64::new(seed))
}

use crate::app::{App, now_ms};
use crate::command::{Command, CommandError};
use crate::metrics::{StateLabel, TeamLabel};

/// Least time between a pass a wake-up started and the next one.
const MIN_GAP: Duration = Duration::from_millis(20);
/// Least time between two checks for silent nodes (a write) and two gauge refreshes (a scan).
const HOUSEKEEPING: Duration = Duration::from_millis(250);
/// Most time between two full passes even when nothing was counted as a change (a GPU healthy
/// again, aging, fair share): planned from the scheduler's copy of the store, not reloaded.
const FULL_PASS: Duration = Duration::from_secs(5);
/// Most time between two full reloads of the store (a safety net beside the change log; a
/// placement the store refused asks for one at once).
const RELOAD: Duration = Duration::from_secs(300);

/// When the periodic side jobs of a pass last ran, and what the queue remembers between passes.
#[derive(Debug, Default)]
pub struct Housekeeping {
    /// The first pass: nodes are not expired before a heartbeat timeout has passed since, so
    /// that after a restart of the control plane its agents have the time to report again.
    started: Option<Instant>,
    expired: Option<Instant>,
    gauges: Option<Instant>,
    /// `App::changes` as of the last pass that read the queue.
    seen: Option<u64>,
    full: Option<Instant>,
    /// The last full reload of the store.
    reloaded: Option<Instant>,
    /// The scheduler's copy of the store, kept between passes.
    state: Option<State>,
    /// Fair share, resize widths and preemptions, as decisions carried out left them.
    memory: Memory,
}

fn due(last: &mut Option<Instant>) -> bool {
    if last.is_some_and(|t| t.elapsed() < HOUSEKEEPING) {
        return false;
    }
    *last = Some(Instant::now());
    true
}

/// Runs until `stop` turns true.
pub async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut housekeeping = Housekeeping::default();
    loop {
        let woken = tokio::select! {
            _ = stop.changed() => false,
            () = app.wake.notified() => true,
            () = tokio::time::sleep(app.config.schedule_interval) => false,
        };
        if *stop.borrow() || stop.has_changed().is_err() {
            break;
        }
        if let Err(e) = pass(&app, &mut housekeeping).await {
            tracing::warn!(error = %e, "scheduling pass failed");
        }
        crate::memory::release();
        // Submissions wake the loop; after a pass they woke, a short pause lets a burst of them
        // share the next one. A timed pass does not delay the submission that comes next.
        if woken {
            tokio::time::sleep(MIN_GAP).await;
        }
    }
}

/// One pass: expire silent nodes (once the control plane has run for a heartbeat timeout: its
/// agents may not have had the time to report since it started), place what fits.
pub async fn pass(app: &Arc<App>, housekeeping: &mut Housekeeping) -> Result<usize, CommandError> {
    if !app.leadership.leads() {
        // A follower's copy of the queue would go stale: the next leadership starts afresh.
        *housekeeping = Housekeeping::default();
        return Ok(0);
    }
    let started = *housekeeping.started.get_or_insert_with(Instant::now);
    if started.elapsed() >= app.config.heartbeat_timeout && due(&mut housekeeping.expired) {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let now = now_ms();
        let silent = now.saturating_sub(ms(app.config.heartbeat_timeout));
        let lost = now.saturating_sub(ms(app.config.node_lost_after.max(app.config.heartbeat_timeout)));
        app.dispatch(Command::ExpireNodes { silent, lost }).await?;
    }
    let with_counts = due(&mut housekeeping.gauges);
    let changes = app.changes.load(std::sync::atomic::Ordering::Relaxed);
    let reload = housekeeping.reloaded.is_none_or(|t| t.elapsed() >= RELOAD);
    let (state, store) = (housekeeping.state.take(), Arc::clone(&app.store));
    let (state, synced, counts) =
        tokio::task::spawn_blocking(move || sync(&*store, state, reload, with_counts))
            .await
            .map_err(|e| CommandError::Aborted(e.to_string()))??;
    if synced == Synced::Reloaded {
        housekeeping.reloaded = Some(Instant::now());
    }
    if let Some(counts) = counts {
        record_gauges(app, &counts);
    }
    housekeeping.state = Some(state);
    let full = housekeeping.full.is_none_or(|t| t.elapsed() >= FULL_PASS);
    if housekeeping.seen == Some(changes) && !full && synced == Synced::Unchanged {
        // Nothing was submitted and nothing ended since the last pass placed all it could: the
        // same snapshot would give the same plan. (The change log is read too: another replica
        // on the same database records submissions and heartbeats this one never counted.)
        return Ok(0);
    }
    housekeeping.seen = Some(changes);
    if full {
        housekeeping.full = Some(Instant::now());
    }
    let Some(mut state) = housekeeping.state.take() else { return Ok(0) };
    let at = now_ms();
    let waited_on = waited_on(&state.plan_input(at, QueueInput::default()).pending);
    let store = Arc::clone(&app.store);
    let (deps, loans) = tokio::task::spawn_blocking(move || {
        Ok::<_, gantry_store::StoreError>((dependency_states(&*store, waited_on)?, store.loans()?))
    })
    .await
    .map_err(|e| CommandError::Aborted(e.to_string()))??;
    state.set_dependencies(deps);
    state.set_loans(loans);
    let staging = app.staging.snapshot(&|id| state.is_pending(id));
    state.set_staging(staging);
    state.set_locality(app.staging.locality());
    let gap = i64::try_from(app.config.resize_interval.as_millis()).unwrap_or(i64::MAX);
    let queue = prepare(&mut state, &mut housekeeping.memory, at, gap);
    if let Ok(mut shown) = app.queue.write() {
        shown.clone_from(&queue);
    }
    // The plan is the CPU-heavy part of a pass: off the async workers.
    let (policy, started) = (app.config.policy, Instant::now());
    let (state, decisions) = tokio::task::spawn_blocking(move || {
        let decisions = decide(&mut state, at, queue, policy);
        (state, decisions)
    })
    .await
    .map_err(|e| CommandError::Aborted(e.to_string()))?;
    app.metrics.scheduling_pass.observe(started.elapsed().as_secs_f64());
    let submitted = submitted_at(&state, &decisions);
    housekeeping.state = Some(state);
    dispatch::carry_out(app, housekeeping, decisions, &submitted).await
}

/// The queue's input of a pass at `at` (ms): the memory forgets ended jobs and charges fair
/// share for what the active jobs held since the last pass.
pub fn prepare(state: &mut State, memory: &mut Memory, at: i64, resize_gap_ms: i64) -> QueueInput {
    memory.retain(|id| state.knows(id));
    memory.charge(&state.plan_input(at, QueueInput::default()).active, at);
    memory.queue_input(resize_gap_ms)
}

/// The pass's decisions: the core's [`sched::plan_on`] on the scheduler's copy of the store and
/// the ledger it keeps of it (nothing is rebuilt from rows).
pub fn decide(state: &mut State, at: i64, queue: QueueInput, policy: PolicyKind) -> Vec<Decision> {
    let mut rng = SplitMix64::new(SEED);
    match state.plan_on(at, queue) {
        (s, Some(kept)) => sched::plan_on(s, kept, policy, &mut rng),
        (s, None) => sched::plan(s, policy, &mut rng),
    }
}

/// When each job the decisions place was submitted (the placement-latency metric).
fn submitted_at(state: &State, decisions: &[Decision]) -> HashMap<JobId, i64> {
    decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Place(p) => Some(p.job_id),
            Decision::PlaceGang(g) => Some(g.gang_id),
            _ => None,
        })
        .filter_map(|id| Some((id, state.submitted_at(id)?)))
        .collect()
}

type Counts = Vec<(String, JobState, u64)>;
/// The states of the jobs pending jobs depend on.
pub type DepStates = HashMap<JobId, Vec<JobState>>;

/// Brings the scheduler's copy of the store up to date: a full reload when there is none yet or
/// `reload` asks for one, else only what changed.
fn sync(
    store: &dyn Store,
    state: Option<State>,
    reload: bool,
    with_counts: bool,
) -> Result<(State, Synced, Option<Counts>), gantry_store::StoreError> {
    let counts = if with_counts { Some(store.job_counts()?) } else { None };
    let (state, synced) = match state {
        Some(mut state) if !reload => {
            let synced = state.sync(store)?;
            (state, synced)
        }
        _ => (State::load(store)?, Synced::Reloaded),
    };
    Ok((state, synced, counts))
}

/// The jobs pending jobs wait for, once each.
pub fn waited_on(pending: &[gantry_store::Job]) -> Vec<JobId> {
    let mut ids: Vec<JobId> = pending.iter().flat_map(|j| j.after.iter().map(|d| d.job)).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The states of every job a pending job waits for (each member's, for an array's id).
pub fn dependency_states(store: &dyn Store, ids: Vec<JobId>) -> Result<DepStates, gantry_store::StoreError> {
    let mut out = DepStates::new();
    for id in ids {
        let Some(job) = store.job(id)? else { continue };
        let states = if job.array.is_some_and(|a| a.id == id) {
            store
                .jobs(&JobFilter { array: Some(id), ..JobFilter::default() })?
                .iter()
                .map(|m| m.state)
                .collect()
        } else {
            vec![job.state]
        };
        out.insert(id, states);
    }
    Ok(out)
}

fn record_gauges(app: &App, counts: &Counts) {
    let m = &app.metrics;
    m.queue_length.clear();
    m.jobs.clear();
    for state in JobState::ALL {
        m.jobs.get_or_create(&StateLabel { state: state.as_str().into() }).set(0);
    }
    for (team, state, n) in counts {
        let n = i64::try_from(*n).unwrap_or(i64::MAX);
        m.jobs.get_or_create(&StateLabel { state: state.as_str().into() }).inc_by(n);
        if *state == JobState::Pending {
            m.queue_length.get_or_create(&TeamLabel { team: team.clone() }).set(n);
        }
    }
}
