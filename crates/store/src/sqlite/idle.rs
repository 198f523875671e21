//! Idle policies and what the control plane does to a job that left its GPUs idle.

use gantry_api::idle::IdlePolicyView;

use super::{gangs, jobs, tokens};
use crate::db::{Conn, params};
use crate::model::JobState;
use crate::{Result, StoreError};

/// Creates or replaces a team's idle policy for a kind.
pub(super) fn set(c: &dyn Conn, p: &IdlePolicyView, at: i64) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO idle_policies (team, kind, warn_after_s, act_after_s, below_percent, action, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(team, kind) DO UPDATE SET warn_after_s = ?3, \
         act_after_s = ?4, below_percent = ?5, action = ?6, updated_at = ?7",
    )?
    .execute(params![p.team, p.kind, p.warn_after_s, p.act_after_s, p.below_percent, p.action, at])?;
    Ok(())
}

/// Every idle policy set, by team and kind.
pub(super) fn list(c: &dyn Conn) -> Result<Vec<IdlePolicyView>> {
    let mut stmt = c.prepare_cached(
        "SELECT team, kind, warn_after_s, act_after_s, below_percent, action FROM idle_policies ORDER BY team, kind",
    )?;
    let rows = stmt.query_map(params![], |r| {
        Ok(IdlePolicyView {
            team: r.get(0)?,
            kind: r.get(1)?,
            warn_after_s: r.get(2)?,
            act_after_s: r.get(3)?,
            below_percent: r.get(4)?,
            action: r.get(5)?,
        })
    })?;
    rows.collect::<Result<_>>()
}

/// Warns a running job's owner (an event), or stops it to requeue it (as a preemption: its
/// retries unspent) or to cancel it, or lends its GPUs, or gives lent GPUs back (preempting
/// their borrowers: the owner need not run any more); the reason names the evidence.
pub(super) fn act(c: &dyn Conn, id: JobId, action: &str, evidence: &str, at: i64) -> Result<()> {
    if action == "give-back" {
        return super::loans::give_back(c, id, evidence, at);
    }
    let job = jobs::require(c, gangs::gang_of(c, id)?.unwrap_or(id))?;
    if job.state != JobState::Running || job.stop.is_some() {
        return Err(StoreError::Conflict(format!("job {id} is {}, not running", job.state)));
    }
    let target = format!("job/{}", job.id);
    match action {
        "warn" => {
            let message = format!("idle: {evidence}; it will be stopped if it stays idle");
            tokens::event(c, at, "job.idle", &target, &message, Some(&job.team))
        }
        "requeue" => {
            let reason = format!("requeued: its GPUs were idle ({evidence})");
            jobs::preempt(c, job.id, &reason, at)?;
            tokens::event(c, at, "job.idle-requeued", &target, &reason, Some(&job.team))
        }
        "cancel" => {
            let reason = format!("cancelled: its GPUs were idle ({evidence})");
            jobs::cancel(c, job.id, at)?;
            c.prepare_cached("UPDATE jobs SET reason = ?2 WHERE id = ?1")?
                .execute(params![job.id, reason])?;
            tokens::event(c, at, "job.idle-cancelled", &target, &reason, Some(&job.team))
        }
        "fail" => {
            // A service replica that holds its GPUs without becoming ready: it ends failed, so
            // that its service counts the failure and backs off.
            let reason = format!("stopped: it held its GPUs idle without being ready ({evidence})");
            c.prepare_cached("UPDATE jobs SET stop = 'fail', reason = ?2 WHERE id = ?1")?
                .execute(params![job.id, reason])?;
            tokens::event(c, at, "job.idle-stopped", &target, &reason, Some(&job.team))
        }
        "lend" => super::loans::lend(c, &job, evidence, at),
        other => Err(StoreError::Conflict(format!(
            "idle action {other} is not one of warn, requeue, cancel, fail, lend, give-back"
        ))),
    }
}

use crate::model::JobId;
