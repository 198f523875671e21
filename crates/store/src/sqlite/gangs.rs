//! Gangs: N workers placed at once, run as one job.
//!
//! A gang is a job row with `replicas` > 1 and one row per worker (`gang_id`, `rank`), all
//! created at submission. The gang is what users read and cancel and what the scheduler queues;
//! the workers are what agents run: each is placed on one node, so a node's reports can only
//! ever touch the workers placed on it (the heartbeat's per-job node and epoch check).
//!
//! The gang's state follows its workers': `scheduled` when placed (all workers in one
//! transaction), `running` when the first worker starts, `succeeded` when every worker exited 0.
//! Anything else a worker does ends the attempt of the whole gang: the gang records why in `stop`
//! (`requeue`, `timeout`, `preempt` or `cancel`) and asks the agents to stop every other worker
//! (their normal stop path: SIGTERM, the grace period, SIGKILL). When the last worker has ended,
//! [`settle`] decides the gang's fate as one job: back to the queue (a failed or lost worker
//! spends one retry; a preemption spends none), failed once the retries are spent, `timeout`, or
//! `cancelled`.

use std::collections::HashMap;

use crate::db::{Conn, OptionalExtension, params};

use super::jobs::{self, require, transition};
use super::rows::{self, JOB_COLUMNS};
use crate::model::*;
use crate::{Result, StoreError};

/// First port handed out for a gang's rendezvous (torchrun's default).
const FIRST_PORT: u16 = 29_500;
/// Ports handed out per master node.
const PORTS: u16 = 500;

/// The gang a worker belongs to, when it is a worker.
pub(super) fn parent(job: &Job) -> Option<JobId> {
    job.gang.as_ref().filter(|g| g.is_worker()).map(|g| g.id)
}

/// Whether the job is a gang (not a worker, not a plain job).
pub(super) fn is_gang(job: &Job) -> bool {
    job.gang.as_ref().is_some_and(|g| !g.is_worker())
}

/// Creates the workers of a gang just submitted, ranks 0..replicas, pending.
pub(super) fn insert_workers(c: &dyn Conn, gang: JobId, job: &NewJob) -> Result<()> {
    let r = job.request();
    for rank in 0..job.replicas() {
        let id: JobId = c.prepare_cached(
            "INSERT INTO jobs (team, name, priority, command, gpus, gpu_memory_mib, gpu_compute_pct, cpu_milli, \
             memory_mib, state, max_retries, submitted_at, env, time_limit_s, \"user\", replicas, gang_id, rank, labels, \
             gpu_models, workdir, upload, chdir, node_selector) \
             VALUES (?1, ?2, ?3, ?4, ?5, 0, 0, ?6, ?7, 'pending', 0, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
             ?18, ?19, ?20) RETURNING id",
        )?
        .query_row(params![
            job.team,
            format!("{}-{rank}", job.name),
            job.spec.priority,
            rows::to_json(&job.spec.command)?,
            r.gpus,
            r.cpu_milli,
            r.memory_mib,
            job.submitted_at,
            rows::to_json(&job.spec.env)?,
            job.spec.time_limit_s,
            job.user,
            job.replicas(),
            gang,
            rank,
            rows::to_json(&job.spec.labels)?,
            rows::to_json(&job.spec.gpu_models)?,
            job.spec.workdir,
            job.spec.upload.as_ref().map(rows::to_json).transpose()?,
            job.spec.chdir,
            rows::to_json(&job.spec.node_selector)?
        ], |r| r.get(0))?;
        super::inputs::save(c, id, &job.spec)?;
        jobs::record_transition(c, id, None, JobState::Pending, None, job.submitted_at)?;
    }
    Ok(())
}

/// A gang's workers, by rank.
pub(super) fn workers(c: &dyn Conn, gang: JobId) -> Result<Vec<Job>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE gang_id = ?1 ORDER BY rank");
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![gang], rows::job)?;
    rows.collect::<Result<_>>()
}

/// Places every worker of a pending gang, or none (one transaction).
pub(super) fn place(c: &dyn Conn, gp: &GangPlacement) -> Result<()> {
    let gang = require(c, gp.gang_id)?;
    if !is_gang(&gang) {
        return Err(StoreError::Conflict(format!("job {} is not a gang", gang.id)));
    }
    if gang.state != JobState::Pending {
        return Err(StoreError::Conflict(format!("job {} is {}, not pending", gang.id, gang.state)));
    }
    let members = workers(c, gang.id)?;
    let ids: Vec<JobId> = members.iter().map(|w| w.id).collect();
    let placed: Vec<JobId> = gp.workers.iter().map(|p| p.job_id).collect();
    if ids != placed {
        return Err(StoreError::Conflict(format!(
            "gang {} has workers {ids:?}, the placement names {placed:?}",
            gang.id
        )));
    }
    for p in &gp.workers {
        jobs::place_one(c, p)?;
    }
    let Some(first) = gp.workers.first() else {
        return Err(StoreError::Conflict(format!("gang {} placed with no workers", gang.id)));
    };
    let addr: String = c
        .prepare_cached("SELECT COALESCE(advertise_addr, hostname) FROM nodes WHERE id = ?1")?
        .query_row(params![&first.node_id], |r| r.get(0))?;
    let port = free_port(c, gang.id, &addr)?;
    let mut per_node: HashMap<&str, u32> = HashMap::new();
    for p in &gp.workers {
        let local = per_node.entry(p.node_id.as_str()).or_insert(0);
        c.prepare_cached(
            "UPDATE jobs SET local_rank = ?2, master_addr = ?3, master_port = ?4 WHERE id = ?1",
        )?
        .execute(params![p.job_id, *local, addr, port])?;
        *local += 1;
    }
    c.prepare_cached(
        "UPDATE jobs SET state = 'scheduled', attempt = attempt + 1, master_addr = ?2, master_port = ?3, \
         reason = NULL, exit_code = NULL, started_at = NULL, stop = NULL WHERE id = ?1",
    )?
    .execute(params![gang.id, addr, port])?;
    jobs::record_transition(c, gang.id, Some(JobState::Pending), JobState::Scheduled, None, gp.at)
}

/// A rendezvous port no other active gang uses on the same master address.
fn free_port(c: &dyn Conn, gang: JobId, addr: &str) -> Result<u16> {
    let used: Vec<u16> = c
        .prepare_cached(
            "SELECT master_port FROM jobs WHERE gang_id IS NULL AND replicas > 1 AND master_addr = ?1 \
             AND state IN ('scheduled', 'running') AND master_port IS NOT NULL",
        )?
        .query_map(params![addr], |r| r.get(0))?
        .collect::<Result<_>>()?;
    let start = (gang.rem_euclid(i64::from(PORTS))) as u16;
    (0..PORTS)
        .map(|i| FIRST_PORT + (start + i) % PORTS)
        .find(|p| !used.contains(p))
        .ok_or_else(|| StoreError::Conflict(format!("no rendezvous port left on {addr}")))
}

/// A worker's process started: the gang runs once its first worker does.
pub(super) fn worker_started(c: &dyn Conn, gang: JobId, at: i64) -> Result<()> {
    let changed = c
        .prepare_cached(
            "UPDATE jobs SET state = 'running', started_at = ?2 WHERE id = ?1 AND state = 'scheduled'",
        )?
        .execute(params![gang, at])?;
    if changed > 0 {
        jobs::record_transition(c, gang, Some(JobState::Scheduled), JobState::Running, None, at)?;
    }
    Ok(())
}

/// A worker's process ended (the worker is active and the report is for its attempt).
pub(super) fn worker_exited(c: &dyn Conn, worker: &Job, gang: JobId, exit: &JobExit, at: i64) -> Result<()> {
    let rank = worker.gang.as_ref().and_then(|g| g.rank).unwrap_or(0);
    let plain = match exit.exit_code {
        Some(code) => format!("exited with status {code}"),
        None => "ended without an exit status".to_owned(),
    };
    let why = exit.reason.clone().unwrap_or(plain);
    match worker.stop.as_deref() {
        Some("cancel") => transition(c, worker, JobState::Cancelled, Some("cancelled"), at)?,
        Some(_) => {
            let reason = worker.reason.clone().unwrap_or_else(|| "stopped with its gang".into());
            transition(c, worker, JobState::Pending, Some(&reason), at)?;
            // A stop the gang did not ask for (a GPU turned unhealthy under this worker).
            stop(c, gang, "requeue", &format!("worker {rank} (job {}): {reason}", worker.id), None, at)?;
        }
        None if exit.timed_out => {
            let reason = exit.reason.clone().unwrap_or_else(|| "time limit reached".into());
            transition(c, worker, JobState::Timeout, Some(&reason), at)?;
            stop(c, gang, "timeout", &format!("worker {rank} (job {}): {reason}", worker.id), None, at)?;
        }
        None if exit.exit_code == Some(0) => transition(c, worker, JobState::Succeeded, None, at)?,
        None => {
            transition(c, worker, JobState::Failed, Some(&why), at)?;
            let reason = format!("worker {rank} (job {}) {why}", worker.id);
            stop(c, gang, "requeue", &reason, exit.exit_code, at)?;
        }
    }
    settle(c, gang, at)
}

/// A worker's placement was lost (its node was lost or registered again).
pub(super) fn worker_lost(c: &dyn Conn, worker: &Job, gang: JobId, reason: &str, at: i64) -> Result<()> {
    let rank = worker.gang.as_ref().and_then(|g| g.rank).unwrap_or(0);
    if worker.stop.as_deref() == Some("cancel") {
        transition(c, worker, JobState::Cancelled, Some("cancelled"), at)?;
    } else {
        transition(c, worker, JobState::Pending, Some(reason), at)?;
    }
    stop(c, gang, "requeue", &format!("worker {rank} (job {}): {reason}", worker.id), None, at)?;
    settle(c, gang, at)
}

/// Ends the gang's current attempt: records why (the first reason wins; a cancel overrides any)
/// and asks every active worker to stop.
pub(super) fn stop(
    c: &dyn Conn,
    gang: JobId,
    kind: &str,
    reason: &str,
    exit: Option<i32>,
    at: i64,
) -> Result<()> {
    let job = require(c, gang)?;
    if !job.state.is_active() || (job.stop.is_some() && kind != "cancel") {
        return Ok(());
    }
    c.prepare_cached(
        "UPDATE jobs SET stop = ?2, reason = ?3, exit_code = COALESCE(?4, exit_code) WHERE id = ?1",
    )?
    .execute(params![gang, kind, reason, exit])?;
    let (worker_stop, worker_reason) = match kind {
        "cancel" => ("cancel", "cancelled".to_owned()),
        "preempt" => ("preempt", reason.to_owned()),
        _ => ("requeue", format!("stopped with its gang: {reason}")),
    };
    c.prepare_cached(
        "UPDATE jobs SET stop = ?2, reason = ?3 WHERE gang_id = ?1 AND state IN ('scheduled', 'running') \
         AND (stop IS NULL OR ?2 = 'cancel')",
    )?
    .execute(params![gang, worker_stop, worker_reason])?;
    if kind == "requeue" || kind == "timeout" {
        super::tokens::event(c, at, "gang.stopped", &format!("job/{gang}"), reason, Some(&job.team))?;
    }
    Ok(())
}

/// Cancels a gang: now when it waits, else through its workers.
pub(super) fn cancel(c: &dyn Conn, gang: &Job, at: i64) -> Result<()> {
    match gang.state {
        JobState::Pending => {
            transition(c, gang, JobState::Cancelled, Some("cancelled"), at)?;
            end_waiting_workers(c, gang.id, JobState::Cancelled, "cancelled", at)
        }
        s if s.is_active() => {
            stop(c, gang.id, "cancel", "cancelled", None, at)?;
            settle(c, gang.id, at)
        }
        s => Err(StoreError::Conflict(format!("job {} already {s}", gang.id))),
    }
}

/// Preempts a running gang as a unit.
pub(super) fn preempt(c: &dyn Conn, gang: &Job, reason: &str, at: i64) -> Result<()> {
    stop(c, gang.id, "preempt", reason, None, at)?;
    super::tokens::event(c, at, "job.preempted", &format!("job/{}", gang.id), reason, Some(&gang.team))
}

/// Once no worker is active, the gang's attempt ends as one job.
pub(super) fn settle(c: &dyn Conn, gang: JobId, at: i64) -> Result<()> {
    let job = require(c, gang)?;
    if !job.state.is_active() || workers(c, gang)?.iter().any(|w| w.state.is_active()) {
        return Ok(());
    }
    let reason = job.reason.clone().unwrap_or_else(|| "a worker ended".into());
    match job.stop.as_deref() {
        None => transition(c, &job, JobState::Succeeded, None, at),
        Some("cancel") => {
            transition(c, &job, JobState::Cancelled, Some("cancelled"), at)?;
            end_waiting_workers(c, gang, JobState::Cancelled, "cancelled", at)
        }
        Some("preempt") => {
            transition(c, &job, JobState::Pending, Some(&reason), at)?;
            requeue_workers(c, gang, at)
        }
        Some("timeout") => {
            transition(c, &job, JobState::Timeout, Some(&reason), at)?;
            end_waiting_workers(c, gang, JobState::Cancelled, "its gang timed out", at)
        }
        Some(_) => {
            jobs::requeue_or_fail(c, &job, &reason, at)?;
            if require(c, gang)?.state == JobState::Pending {
                requeue_workers(c, gang, at)
            } else {
                end_waiting_workers(c, gang, JobState::Cancelled, "its gang failed", at)
            }
        }
    }
}

/// Every worker back to `pending` for the gang's next attempt.
fn requeue_workers(c: &dyn Conn, gang: JobId, at: i64) -> Result<()> {
    for w in workers(c, gang)? {
        if w.state != JobState::Pending {
            transition(c, &w, JobState::Pending, Some("requeued with its gang"), at)?;
        }
    }
    Ok(())
}

/// Workers still waiting end with the gang.
fn end_waiting_workers(c: &dyn Conn, gang: JobId, to: JobState, reason: &str, at: i64) -> Result<()> {
    for w in workers(c, gang)? {
        if w.state == JobState::Pending {
            transition(c, &w, to, Some(reason), at)?;
        }
    }
    Ok(())
}

/// The gang id of a job id, if it is a worker (for redirecting a cancel or a preemption).
pub(super) fn gang_of(c: &dyn Conn, id: JobId) -> Result<Option<JobId>> {
    Ok(c.prepare_cached("SELECT gang_id FROM jobs WHERE id = ?1")?
        .query_row(params![id], |r| r.get::<_, Option<JobId>>(0))
        .optional()?
        .flatten())
}
