//! The scheduling loop: bring the scheduler's copy of the store up to date with what changed
//! ([`State`]), [`plan`] (pure) on its snapshot, record each decision through the dispatcher,
//! repeat. A decision is durable before anything acts on it: the dispatcher signals the
//! agents it concerns once it has committed, and their held heartbeats answer it
//! ([`crate::assigned`]).

mod baseline;
mod elastic;
mod gang;
mod gates;
mod plan;
mod state;
mod victims;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_store::{JobFilter, JobId, JobState, Store};
use tokio::sync::watch;

pub use baseline::plan_priority_fifo;
pub use elastic::Resize;
pub use gates::{Gated, gate};
pub use plan::{Plan, Preemption, QueueInput, Snapshot, plan};
pub use state::{State, Synced};

use crate::app::{App, now_ms};
use crate::command::Command;
use crate::error::ApiError;
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
    share: FairShare,
    /// The width each resize named, until the job is placed again (`QueueInput::widths`).
    widths: HashMap<JobId, u32>,
    /// The job each preempted job was stopped for (`QueueInput::preempted_for`).
    preempted_for: HashMap<JobId, JobId>,
}

/// Decayed GPU usage per team, charged every pass for the GPUs active jobs hold.
#[derive(Debug, Default)]
struct FairShare {
    input: QueueInput,
    at_ms: Option<i64>,
}

impl FairShare {
    fn charge(&mut self, active: &[gantry_store::Job], now_ms: i64) {
        let dt = self.at_ms.map_or(0.0, |t| (now_ms - t).max(0) as f64 / 1000.0);
        self.at_ms = Some(now_ms);
        let half_life = self.input.weights.half_life_s;
        self.input.usage.decay_to(now_ms as f64 / 1000.0, half_life);
        // A gang is charged for all its workers once; its workers are not charged again.
        for job in active.iter().filter(|j| !j.gang.as_ref().is_some_and(gantry_store::Gang::is_worker)) {
            let team = match self.input.teams.iter().position(|t| *t == job.team) {
                Some(i) => i,
                None => {
                    self.input.teams.push(job.team.clone());
                    self.input.teams.len() - 1
                }
            };
            let replicas = job.gang.as_ref().map_or(1, |g| g.replicas.max(1));
            let gpus = elastic::held(job, job.request.gpus.max(u32::from(job.request.gpu_memory_mib > 0)));
            let gpus = f64::from(gpus * replicas);
            self.input.usage.charge(team, dt * gpus);
        }
    }
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
pub async fn pass(app: &Arc<App>, housekeeping: &mut Housekeeping) -> Result<usize, ApiError> {
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
            .map_err(|e| ApiError::Internal(e.to_string()))??;
    if synced == Synced::Reloaded {
        housekeeping.reloaded = Some(Instant::now());
    }
    if let Some(counts) = counts {
        record_gauges(app, &counts);
    }
    housekeeping.state = Some(state);
    let full = housekeeping.full.is_none_or(|t| t.elapsed() >= FULL_PASS);
    if housekeeping.seen == Some(changes) && !full {
        // Nothing was submitted and nothing ended since the last pass placed all it could: the
        // same snapshot would give the same plan.
        return Ok(0);
    }
    housekeeping.seen = Some(changes);
    if full {
        housekeeping.full = Some(Instant::now());
    }
    let Some(state) = housekeeping.state.as_mut() else { return Ok(0) };
    let at = now_ms();
    let waited_on = waited_on(&state.plan_input(at, QueueInput::default()).pending);
    let store = Arc::clone(&app.store);
    let deps = tokio::task::spawn_blocking(move || dependency_states(&*store, waited_on))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    housekeeping.widths.retain(|id, _| state.knows(*id));
    housekeeping.preempted_for.retain(|id, by| state.knows(*id) && state.knows(*by));
    let memory = (&housekeeping.widths, &housekeeping.preempted_for);
    let (decisions, gated, submitted) = decide(app, state, &mut housekeeping.share, memory, &deps, at);
    if let Ok(mut waiting) = app.waiting.write() {
        *waiting = decisions.waiting.into_iter().chain(gated.held).collect();
    }
    for (job, reason) in gated.failed {
        match app.dispatch(Command::DependencyFailed { job, reason }).await {
            Ok(_) => {}
            Err(ApiError::Conflict(why)) => tracing::debug!(%why, "dependency failure refused by the store"),
            Err(e) => return Err(e),
        }
    }
    let mut placed = 0;
    for placement in decisions.placements {
        let submitted = submitted.get(&placement.job_id).copied();
        let id = placement.job_id;
        match app.dispatch(Command::Place(placement)).await {
            Ok(_) => {
                placed += 1;
                housekeeping.widths.remove(&id);
                if let Some(at) = submitted {
                    app.metrics.placement_latency.observe((now_ms() - at).max(0) as f64 / 1000.0);
                }
            }
            Err(ApiError::Conflict(why)) => {
                // The snapshot was stale: look again next pass, at everything.
                app.changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                housekeeping.reloaded = None;
                tracing::debug!(%why, "placement refused by the store");
            }
            Err(e) => return Err(e),
        }
    }
    for gang in decisions.gangs {
        let (id, submitted) = (gang.gang_id, submitted.get(&gang.gang_id).copied());
        match app.dispatch(Command::PlaceGang(gang)).await {
            Ok(_) => {
                placed += 1;
                if let Some(at) = submitted {
                    app.metrics.placement_latency.observe((now_ms() - at).max(0) as f64 / 1000.0);
                }
            }
            Err(ApiError::Conflict(why)) => {
                app.changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                housekeeping.reloaded = None;
                tracing::debug!(gang = id, %why, "gang placement refused by the store");
            }
            Err(e) => return Err(e),
        }
    }
    for p in decisions.preemptions {
        tracing::info!(job = p.job_id, by = ?p.by, reason = %p.reason, "preempting");
        match app.dispatch(Command::Preempt { job: p.job_id, reason: p.reason }).await {
            Ok(_) => {
                app.metrics.preemptions.inc();
                if let Some(by) = p.by {
                    housekeeping.preempted_for.insert(p.job_id, by);
                }
            }
            Err(ApiError::Conflict(why)) => tracing::debug!(%why, "preemption refused by the store"),
            Err(e) => return Err(e),
        }
    }
    for r in decisions.resizes {
        tracing::info!(job = r.job_id, from = r.from, to = r.to, reason = %r.reason, "resizing");
        match app.dispatch(Command::Resize { job: r.job_id, reason: r.reason }).await {
            Ok(_) => {
                housekeeping.widths.insert(r.job_id, r.to);
            }
            Err(ApiError::Conflict(why)) => tracing::debug!(%why, "resize refused by the store"),
            Err(e) => return Err(e),
        }
    }
    Ok(placed)
}

/// Plans on the scheduler's copy of the store (copied only when some pending job is held back
/// by a dependency): the decisions, the jobs dependencies hold or fail, and when each job the
/// plan places was submitted.
fn decide(
    app: &App,
    state: &mut State,
    share: &mut FairShare,
    (widths, preempted_for): (&HashMap<JobId, u32>, &HashMap<JobId, JobId>),
    deps: &DepStates,
    at: i64,
) -> (Plan, Gated, HashMap<JobId, i64>) {
    share.charge(&state.plan_input(at, QueueInput::default()).active, at);
    let mut queue = share.input.clone();
    queue.widths.clone_from(widths);
    queue.preempted_for.clone_from(preempted_for);
    queue.resize_gap_ms = i64::try_from(app.config.resize_interval.as_millis()).unwrap_or(i64::MAX);
    let snapshot = state.plan_input(at, queue);
    if let Ok(mut queue) = app.queue.write() {
        queue.clone_from(&snapshot.queue);
    }
    let started = Instant::now();
    let gated = gate(&snapshot.pending, &snapshot.active, deps);
    let input = if snapshot.pending.iter().any(|j| gated.stops(j.id)) {
        let mut copy = snapshot.clone();
        copy.pending.retain(|j| !gated.stops(j.id));
        Cow::Owned(copy)
    } else {
        Cow::Borrowed(snapshot)
    };
    let decisions = plan(&input, app.config.policy, 0x9a17);
    app.metrics.scheduling_pass.observe(started.elapsed().as_secs_f64());
    let placed =
        decisions.placements.iter().map(|p| p.job_id).chain(decisions.gangs.iter().map(|g| g.gang_id));
    let submitted = placed
        .filter_map(|id| {
            let k = input.pending.binary_search_by_key(&id, |j| j.id).ok()?;
            Some((id, input.pending[k].submitted_at))
        })
        .collect();
    (decisions, gated, submitted)
}

type Counts = Vec<(String, JobState, u64)>;
type DepStates = HashMap<JobId, Vec<JobState>>;

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
fn waited_on(pending: &[gantry_store::Job]) -> Vec<JobId> {
    let mut ids: Vec<JobId> = pending.iter().flat_map(|j| j.after.iter().map(|d| d.job)).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The states of every job a pending job waits for (each member's, for an array's id).
fn dependency_states(store: &dyn Store, ids: Vec<JobId>) -> Result<DepStates, gantry_store::StoreError> {
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
