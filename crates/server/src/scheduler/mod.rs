//! The scheduling loop: load a snapshot, [`plan`] (pure), record each decision through the
//! dispatcher, repeat. Agents learn their work from the store on their next heartbeat, so a
//! decision is always durable before anything acts on it.

mod plan;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_store::{JobFilter, JobState, Store};
use tokio::sync::watch;

pub use plan::{Plan, Snapshot, plan};

use crate::app::{App, now_ms};
use crate::command::Command;
use crate::error::ApiError;
use crate::metrics::{StateLabel, TeamLabel};

/// Least time between two passes.
const MIN_GAP: Duration = Duration::from_millis(20);
/// Least time between two checks for silent nodes (a write) and two gauge refreshes (a scan).
const HOUSEKEEPING: Duration = Duration::from_millis(250);

/// When the periodic side jobs of a pass last ran.
#[derive(Debug, Default)]
pub struct Housekeeping {
    expired: Option<Instant>,
    gauges: Option<Instant>,
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
        tokio::select! {
            _ = stop.changed() => {}
            () = app.wake.notified() => {}
            () = tokio::time::sleep(app.config.schedule_interval) => {}
        }
        if *stop.borrow() || stop.has_changed().is_err() {
            break;
        }
        if let Err(e) = pass(&app, &mut housekeeping).await {
            tracing::warn!(error = %e, "scheduling pass failed");
        }
        crate::memory::release();
        // Submissions wake the loop; a short pause lets a burst of them share one pass.
        tokio::time::sleep(MIN_GAP).await;
    }
}

/// One pass: expire silent nodes, place what fits.
pub async fn pass(app: &Arc<App>, housekeeping: &mut Housekeeping) -> Result<usize, ApiError> {
    if due(&mut housekeeping.expired) {
        let timeout = i64::try_from(app.config.heartbeat_timeout.as_millis()).unwrap_or(i64::MAX);
        app.dispatch(Command::ExpireNodes { deadline: now_ms() - timeout }).await?;
    }
    let with_counts = due(&mut housekeeping.gauges);
    let store = Arc::clone(&app.store);
    let (snapshot, counts) = tokio::task::spawn_blocking(move || load(&*store, with_counts))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    if let Some(counts) = counts {
        record_gauges(app, &counts);
    }
    let started = Instant::now();
    let decisions = plan(&snapshot, app.config.policy, 0x9a17);
    app.metrics.scheduling_pass.observe(started.elapsed().as_secs_f64());
    if let Ok(mut waiting) = app.waiting.write() {
        *waiting = decisions.waiting.into_iter().collect();
    }
    let mut placed = 0;
    for placement in decisions.placements {
        let submitted = snapshot.pending.iter().find(|j| j.id == placement.job_id).map(|j| j.submitted_at);
        match app.dispatch(Command::Place(placement)).await {
            Ok(_) => {
                placed += 1;
                if let Some(at) = submitted {
                    app.metrics.placement_latency.observe((now_ms() - at).max(0) as f64 / 1000.0);
                }
            }
            Err(ApiError::Conflict(why)) => tracing::debug!(%why, "placement refused by the store"),
            Err(e) => return Err(e),
        }
    }
    Ok(placed)
}

type Counts = Vec<(String, JobState, u64)>;

fn load(
    store: &dyn Store,
    with_counts: bool,
) -> Result<(Snapshot, Option<Counts>), gantry_store::StoreError> {
    let counts = if with_counts { Some(store.job_counts()?) } else { None };
    let by_state = |state| store.jobs(&JobFilter { state: Some(state), ..JobFilter::default() });
    let nodes = store.nodes()?;
    if !nodes.iter().any(|n| n.state == gantry_store::NodeState::Ready) {
        // Nothing can be placed: skip reading the queue.
        let snapshot = Snapshot { nodes, at: now_ms(), ..Snapshot::default() };
        return Ok((snapshot, counts));
    }
    let mut active = by_state(JobState::Scheduled)?;
    active.extend(by_state(JobState::Running)?);
    let snapshot = Snapshot {
        nodes,
        gpus: store.gpus()?,
        held: store.allocations(true)?,
        pending: by_state(JobState::Pending)?,
        active,
        teams: store.teams()?,
        at: now_ms(),
    };
    Ok((snapshot, counts))
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
