//! Nodes, their GPUs, heartbeats and loss.

use std::collections::HashSet;

use crate::db::{Conn, OptionalExtension, params};

use super::rows::{self, GPU_COLUMNS, JOB_COLUMNS, NODE_COLUMNS};
use super::{jobs, tokens};
use crate::model::*;
use crate::{Result, StoreError};

pub(super) fn register(c: &dyn Conn, reg: &NodeRegistration) -> Result<u64> {
    let old: Option<u64> = c
        .prepare_cached("SELECT epoch FROM nodes WHERE id = ?1")?
        .query_row(params![&reg.request.node_id], |r| r.get(0))
        .optional()?;
    for g in &reg.request.gpus {
        let holder: Option<String> = c
            .prepare_cached(
                "SELECT g.node_id FROM gpus g JOIN nodes n ON n.id = g.node_id \
                 WHERE g.uuid = ?1 AND g.node_id != ?2 AND n.state IN ('ready', 'not-responding')",
            )?
            .query_row(params![&g.uuid, &reg.request.node_id], |r| r.get(0))
            .optional()?;
        if let Some(holder) = holder {
            return Err(StoreError::Conflict(format!(
                "gpu {} belongs to node {holder}, which is up",
                g.uuid
            )));
        }
    }
    let epoch = old.map_or(1, |e| e + 1);
    let defaults = reg.request.job_defaults.as_ref().map(rows::to_json).transpose()?;
    c.prepare_cached(
        "INSERT INTO nodes (id, hostname, state, epoch, cpu_milli, memory_mib, last_heartbeat, registered_at, \
         advertise_addr, network, job_defaults, labels) VALUES (?1, ?2, 'ready', ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10) \
         ON CONFLICT(id) DO UPDATE SET hostname = ?2, state = 'ready', epoch = ?3, cpu_milli = ?4, \
         memory_mib = ?5, last_heartbeat = ?6, registered_at = ?6, advertise_addr = ?7, network = ?8, \
         job_defaults = ?9, labels = ?10",
    )?
    .execute(params![
        reg.request.node_id,
        reg.request.hostname,
        epoch,
        reg.request.cpu_milli,
        reg.request.memory_mib,
        reg.at,
        reg.request.advertise_addr,
        reg.request.network.as_str(),
        defaults,
        rows::to_json(&reg.request.labels)?
    ])?;
    for g in &reg.request.gpus {
        c.prepare_cached(
            "INSERT INTO gpus (uuid, node_id, idx, model, memory_mib, health, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, 'healthy', ?6) ON CONFLICT(uuid) DO UPDATE SET node_id = ?2, idx = ?3, \
             model = ?4, memory_mib = ?5, updated_at = ?6",
        )?
        .execute(params![g.uuid, reg.request.node_id, g.index, g.model, g.memory_mib, reg.at])?;
    }
    // What the agent still has from before (it restarted while its jobs ran) moves to the new
    // epoch with its allocations; whatever else ran under an older epoch is gone. Only jobs
    // placed on this node are looked at, so an agent cannot claim another node's jobs.
    let held: HashSet<(JobId, u32)> = reg.request.attempts.iter().map(|a| (a.job_id, a.attempt)).collect();
    for job in jobs::active_on_node(c, &reg.request.node_id, Some(epoch))? {
        if held.contains(&(job.id, job.attempt)) {
            jobs::keep_on_new_epoch(c, &job, epoch)?;
            let message = format!(
                "node {} registered again and still runs attempt {}",
                reg.request.node_id, job.attempt
            );
            tokens::event(c, reg.at, "job.kept", &format!("job/{}", job.id), &message, Some(&job.team))?;
        } else {
            jobs::requeue_or_fail(c, &job, "node registered again; its previous run was lost", reg.at)?;
        }
    }
    let message = format!("registered at epoch {epoch} with {} GPUs", reg.request.gpus.len());
    tokens::event(c, reg.at, "node.registered", &reg.request.node_id, &message, None)?;
    Ok(epoch)
}

pub(super) fn heartbeat(c: &dyn Conn, hb: &Heartbeat, at: i64) -> Result<Vec<Job>> {
    let state = up_under(c, &hb.node_id, hb.epoch)?;
    if state == "not-responding" {
        c.prepare_cached("UPDATE nodes SET state = 'ready' WHERE id = ?1")?.execute(params![&hb.node_id])?;
        tokens::event(c, at, "node.ready", &hb.node_id, "heartbeats resumed; its jobs went on", None)?;
    }
    c.prepare_cached("UPDATE nodes SET last_heartbeat = ?2 WHERE id = ?1")?
        .execute(params![hb.node_id, at])?;
    for g in &hb.gpus {
        update_gpu(c, &hb.node_id, g, at)?;
    }
    for report in &hb.jobs {
        // A node reports only what was placed on it under its current epoch.
        let ours = jobs::get(c, report.job_id)?
            .is_some_and(|j| j.node_id.as_deref() == Some(hb.node_id.as_str()) && j.epoch == Some(hb.epoch));
        if !ours {
            continue;
        }
        match &report.exit {
            None => jobs::started(c, report.job_id, report.attempt, at)?,
            Some(exit) => jobs::exited(c, report.job_id, report.attempt, exit, at)?,
        }
    }
    finish_unreported_stops(c, hb, at)?;
    assignments(c, &hb.node_id, hb.epoch)
}

/// The node's state when it is up (ready or not responding) under `epoch`; else `NotFound` or
/// `StaleEpoch`, which fence its agent off.
fn up_under(c: &dyn Conn, node_id: &str, epoch: u64) -> Result<String> {
    let node: Option<(String, u64)> = c
        .prepare_cached("SELECT state, epoch FROM nodes WHERE id = ?1")?
        .query_row(params![node_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((state, current)) = node else {
        return Err(StoreError::NotFound(format!("node {node_id}")));
    };
    if !(state == "ready" || state == "not-responding") || current != epoch {
        return Err(StoreError::StaleEpoch { node: node_id.to_owned(), got: epoch, current });
    }
    Ok(state)
}

/// The jobs a node up under `epoch` must run, read without a report.
pub(super) fn current_assignments(c: &dyn Conn, node_id: &str, epoch: u64) -> Result<Vec<Job>> {
    up_under(c, node_id, epoch)?;
    assignments(c, node_id, epoch)
}

/// A job told to stop that the agent no longer reports never started there (the assignment and
/// the stop crossed): it ends without a process to wait for.
fn finish_unreported_stops(c: &dyn Conn, hb: &Heartbeat, at: i64) -> Result<()> {
    let reported: HashSet<JobId> = hb.jobs.iter().map(|r| r.job_id).collect();
    for job in jobs::active_on_node(c, &hb.node_id, None)? {
        if job.stop.is_some() && !reported.contains(&job.id) {
            let exit = JobExit {
                exit_code: None,
                reason: Some("stopped before it started".into()),
                timed_out: false,
            };
            jobs::exited(c, job.id, job.attempt, &exit, at)?;
        }
    }
    Ok(())
}

fn update_gpu(c: &dyn Conn, node_id: &str, g: &GpuReport, at: i64) -> Result<()> {
    let old: Option<(String, Option<i64>)> = c
        .prepare_cached("SELECT health, used_sampled_at FROM gpus WHERE uuid = ?1 AND node_id = ?2")?
        .query_row(params![&g.uuid, node_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((old, sampled_at)) = old else { return Ok(()) };
    let used_at = super::workflow::record_use(c, &g.uuid, g.sample.as_ref(), sampled_at, at)?;
    let sample = g.sample.as_ref().map(rows::to_json).transpose()?;
    c.prepare_cached(
        "UPDATE gpus SET health = ?2, sample = ?3, updated_at = ?4, \
         used_sampled_at = COALESCE(?5, used_sampled_at) WHERE uuid = ?1",
    )?
    .execute(params![g.uuid, g.health.as_str(), sample, at, used_at])?;
    if old != g.health.as_str() {
        tokens::event(c, at, "gpu.health", &g.uuid, &format!("{old} -> {}", g.health), None)?;
    }
    if g.health == GpuHealth::Unhealthy {
        let reason = format!("gpu {} turned unhealthy", g.uuid);
        c.prepare_cached(
            "UPDATE jobs SET stop = 'requeue', reason = ?2 WHERE stop IS NULL AND state IN ('scheduled', 'running') \
             AND id IN (SELECT job_id FROM allocations WHERE gpu_uuid = ?1 AND released_at IS NULL)",
        )?
        .execute(params![g.uuid, reason])?;
    }
    Ok(())
}

/// Jobs the node must run: active, placed under this epoch, not asked to stop.
fn assignments(c: &dyn Conn, node_id: &str, epoch: u64) -> Result<Vec<Job>> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE node_id = ?1 AND epoch = ?2 AND stop IS NULL \
         AND state IN ('scheduled', 'running') ORDER BY id"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![node_id, epoch], rows::job)?;
    rows.collect::<Result<_>>()
}

/// Ready nodes silent since before `deadline` stop getting work; nothing of theirs is requeued.
pub(super) fn mark_not_responding(c: &dyn Conn, deadline: i64, at: i64) -> Result<Vec<String>> {
    let silent: Vec<String> = c
        .prepare_cached("SELECT id FROM nodes WHERE state = 'ready' AND last_heartbeat < ?1")?
        .query_map(params![deadline], |r| r.get(0))?
        .collect::<Result<_>>()?;
    for node in &silent {
        c.prepare_cached("UPDATE nodes SET state = 'not-responding' WHERE id = ?1")?
            .execute(params![node])?;
        let message = "missed heartbeats; no new work until it reports, its jobs keep their place";
        tokens::event(c, at, "node.not-responding", node, message, None)?;
    }
    Ok(silent)
}

pub(super) fn expire(c: &dyn Conn, deadline: i64, at: i64) -> Result<Vec<String>> {
    let lost: Vec<String> = c
        .prepare_cached(
            "SELECT id FROM nodes WHERE state IN ('ready', 'not-responding') AND last_heartbeat < ?1",
        )?
        .query_map(params![deadline], |r| r.get(0))?
        .collect::<Result<_>>()?;
    for node in &lost {
        c.prepare_cached("UPDATE nodes SET state = 'lost' WHERE id = ?1")?.execute(params![node])?;
        for job in jobs::active_on_node(c, node, None)? {
            jobs::requeue_or_fail(c, &job, &format!("node {node} was lost"), at)?;
        }
        tokens::event(c, at, "node.lost", node, "missed heartbeats; its jobs were requeued", None)?;
    }
    Ok(lost)
}

/// Sets whether `node` takes new work; a drain stops its running jobs at `drain_at`.
pub(super) fn set_scheduling(
    c: &dyn Conn,
    node: &str,
    scheduling: NodeScheduling,
    drain_at: Option<i64>,
    at: i64,
) -> Result<()> {
    let drain_at = if scheduling == NodeScheduling::Draining { drain_at.or(Some(at)) } else { None };
    let n = c
        .prepare_cached("UPDATE nodes SET scheduling = ?2, drain_at = ?3 WHERE id = ?1")?
        .execute(params![node, scheduling.as_str(), drain_at])?;
    if n == 0 {
        return Err(StoreError::NotFound(format!("node {node}")));
    }
    let message = match scheduling {
        NodeScheduling::Schedulable => "uncordoned: takes new work".to_owned(),
        NodeScheduling::Cordoned => "cordoned: takes no new work; its jobs run on".to_owned(),
        NodeScheduling::Draining => {
            let wait = (drain_at.unwrap_or(at) - at).max(0) / 1000;
            format!("draining: takes no new work; its running jobs are requeued in {wait} s")
        }
    };
    tokens::event(c, at, &format!("node.{}", scheduling.as_str()), node, &message, None)
}

/// Stops the running jobs of draining nodes whose grace period ended by `at` (each requeued as
/// a preemption, its retries not spent); returns the jobs stopped.
pub(super) fn drain_due(c: &dyn Conn, at: i64) -> Result<Vec<JobId>> {
    let due: Vec<String> = c
        .prepare_cached("SELECT id FROM nodes WHERE scheduling = 'draining' AND drain_at <= ?1")?
        .query_map(params![at], |r| r.get(0))?
        .collect::<Result<_>>()?;
    let mut stopped = Vec::new();
    for node in &due {
        for job in jobs::active_on_node(c, node, None)? {
            if job.state != JobState::Running || job.stop.is_some() {
                continue;
            }
            // A worker's gang is preempted as a whole, once.
            match jobs::preempt(c, job.id, &format!("node {node} is drained"), at) {
                Ok(()) => stopped.push(job.id),
                Err(StoreError::Conflict(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(stopped)
}

pub(super) fn list(c: &dyn Conn) -> Result<Vec<Node>> {
    let sql = format!("SELECT {NODE_COLUMNS} FROM nodes ORDER BY id");
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![], rows::node)?;
    rows.collect::<Result<_>>()
}

pub(super) fn gpus(c: &dyn Conn) -> Result<Vec<Gpu>> {
    let sql = format!("SELECT {GPU_COLUMNS} FROM gpus ORDER BY node_id, idx");
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![], rows::gpu)?;
    rows.collect::<Result<_>>()
}
