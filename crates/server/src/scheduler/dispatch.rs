//! Carrying out a pass's decisions: each [`Decision`] becomes a [`Command`] for the one
//! dispatcher, in the order the core returned them; why a job waits goes to the table
//! `gantry jobs` reads. A command the store refuses (the snapshot was stale) is not an error of
//! the pass: a refused placement asks for a full reload, anything else is looked at again next
//! pass.

use std::collections::HashMap;
use std::sync::Arc;

use gantry_core::sched::{Decision, GangPlace, Place};
use gantry_store::{GangPlacement, Grant, JobId, Placement};

use super::Housekeeping;
use crate::app::{App, now_ms};
use crate::command::{Command, CommandError};

/// A decision that is not a command: why a job waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waits {
    /// The job.
    pub job: JobId,
    /// Why, in words.
    pub reason: String,
}

impl TryFrom<Decision> for Command {
    type Error = Waits;

    fn try_from(d: Decision) -> Result<Self, Waits> {
        Ok(match d {
            Decision::FailDependency { job, reason } => Command::DependencyFailed { job, reason },
            Decision::Place(p) => Command::Place(placement(p)),
            Decision::PlaceGang(g) => Command::PlaceGang(gang(g)),
            Decision::Borrow(p) => Command::Borrow(placement(p)),
            Decision::Preempt(p) => Command::Preempt { job: p.job_id, reason: p.reason },
            Decision::Resize(r) => Command::Resize { job: r.job_id, reason: r.reason },
            Decision::Wait { job, reason } => return Err(Waits { job, reason }),
            Decision::Stage(st) => {
                return Err(Waits {
                    job: st.job_id,
                    reason: format!("staging its inputs on {}", st.node_id),
                });
            }
        })
    }
}

/// The store's placement for the core's.
pub fn placement(p: Place) -> Placement {
    let grants = p
        .grants
        .into_iter()
        .map(|g| Grant { uuid: g.uuid, share_milli: g.share_milli, memory_mib: g.memory_mib })
        .collect();
    Placement { job_id: p.job_id, node_id: p.node_id, epoch: p.epoch, grants, at: p.at }
}

/// The store's gang placement for the core's.
pub fn gang(g: GangPlace) -> GangPlacement {
    GangPlacement { gang_id: g.gang_id, workers: g.workers.into_iter().map(placement).collect(), at: g.at }
}

/// Dispatches every decision of a pass (see the module doc); returns how many jobs and gangs
/// were placed.
pub(super) async fn carry_out(
    app: &Arc<App>,
    housekeeping: &mut Housekeeping,
    decisions: Vec<Decision>,
    submitted: &HashMap<JobId, i64>,
) -> Result<usize, CommandError> {
    let mut waiting = HashMap::new();
    let mut placed = 0;
    for decision in decisions {
        if let Decision::Stage(st) = &decision {
            stage(app, st).await?;
            continue;
        }
        let note = decision.clone();
        let command = match Command::try_from(decision) {
            Ok(command) => command,
            Err(Waits { job, reason }) => {
                waiting.insert(job, reason);
                continue;
            }
        };
        if let Decision::Preempt(p) = &note {
            tracing::info!(job = p.job_id, by = ?p.by, reason = %p.reason, "preempting");
        }
        if let Decision::Resize(r) = &note {
            tracing::info!(job = r.job_id, from = r.from, to = r.to, reason = %r.reason, "resizing");
        }
        match app.dispatch(command).await {
            Ok(_) => {
                housekeeping.memory.carried_out(&note);
                placed += usize::from(observe(app, &note, submitted));
            }
            Err(e) if e.is_stale() => refused(app, housekeeping, &note, &e),
            Err(e) => return Err(e),
        }
    }
    if let Ok(mut shown) = app.waiting.write() {
        *shown = waiting;
    }
    Ok(placed)
}

/// A `Stage` decision: the job's inputs are staged on the node before it is placed there
/// (`crate::staging`: the node's agent hears of it when it next asks what to stage).
async fn stage(app: &Arc<App>, st: &gantry_core::sched::Stage) -> Result<(), CommandError> {
    let id = st.job_id;
    let store = Arc::clone(&app.store);
    let job = tokio::task::spawn_blocking(move || store.job(id))
        .await
        .map_err(|e| CommandError::Aborted(e.to_string()))??;
    if let Some(job) = job {
        tracing::info!(job = id, node = %st.node_id, "staging its inputs");
        app.staging.order(st, &job);
    }
    Ok(())
}

/// Metrics of a decision carried out; whether it placed a job or a gang.
fn observe(app: &App, d: &Decision, submitted: &HashMap<JobId, i64>) -> bool {
    let id = match d {
        Decision::Place(p) | Decision::Borrow(p) => p.job_id,
        Decision::PlaceGang(g) => g.gang_id,
        Decision::Preempt(_) => {
            app.metrics.preemptions.inc();
            return false;
        }
        _ => return false,
    };
    if let Some(at) = submitted.get(&id) {
        app.metrics.placement_latency.observe((now_ms() - at).max(0) as f64 / 1000.0);
    }
    true
}

/// A decision the store refused: the snapshot was stale.
fn refused(app: &App, housekeeping: &mut Housekeeping, d: &Decision, why: &CommandError) {
    if matches!(d, Decision::Place(_) | Decision::PlaceGang(_) | Decision::Borrow(_)) {
        // Look again next pass, at everything.
        app.changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        housekeeping.reloaded = None;
    }
    tracing::debug!(decision = ?d, %why, "decision refused by the store");
}
