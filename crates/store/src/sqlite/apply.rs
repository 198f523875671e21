//! `gantry apply`, as kubectl's: a job file's identity is its name within the team.
//!
//! The newest job (or array) the team applied under that name is the file's job. The same file
//! again (the same request id: a digest of its meaning) is `unchanged`; a changed file updates a
//! job or array none of whose members has started (`configured`: the same ids, an array's
//! removed indices cancelled and new ones added); a job that has started is refused unless the
//! caller asked to replace it (its unfinished members cancelled, the file submitted anew:
//! `replaced`); a job that has ended is followed by a new one (`created`). A gang, or a change
//! between an array and a single job, is not reshaped in place: while nothing of it started it
//! is replaced without asking. All in the one transaction of the change.

use std::collections::BTreeSet;

use crate::db::{Conn, OptionalExtension, params};

use super::jobs;
use super::rows;
use crate::model::*;
use crate::{Result, StoreError};

/// Applies `job` (which has a name and a request id).
pub(super) fn apply(c: &dyn Conn, job: &NewJob, replace: bool, at: i64) -> Result<Applied> {
    let key = job.spec.request_id.clone().unwrap_or_default();
    let existing: Option<(JobId, Option<String>)> = c
        .prepare_cached(
            "SELECT id, request_id FROM jobs WHERE team = ?1 AND name = ?2 AND request_id LIKE 'apply-%' \
             ORDER BY id DESC LIMIT 1",
        )?
        .query_row(params![job.team, job.name], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let created = |c: &dyn Conn, replaced: Option<JobId>| -> Result<Applied> {
        let (id, new) = jobs::submit(c, job)?;
        // An older job of the team was made from this very file (applied again after an edit
        // was undone): that one is the file's job.
        let action = match (new, replaced) {
            (false, _) => ApplyAction::Unchanged,
            (true, Some(_)) => ApplyAction::Replaced,
            (true, None) => ApplyAction::Created,
        };
        Ok(Applied { id, action, replaced })
    };
    let Some((id, old_key)) = existing else { return created(c, None) };
    if old_key.as_deref() == Some(key.as_str()) {
        return Ok(Applied { id, action: ApplyAction::Unchanged, replaced: None });
    }
    let head = jobs::require(c, id)?;
    let members = match &head.array {
        Some(a) => jobs::list(c, &JobFilter { array: Some(a.id), ..JobFilter::default() })?,
        None => vec![head.clone()],
    };
    if members.iter().all(|m| m.state.is_terminal()) {
        return created(c, None);
    }
    let untouched = members.iter().all(|m| m.state == JobState::Pending && m.attempt == 0);
    let same_shape =
        head.array.is_some() == job.spec.array.is_some() && head.gang.is_none() && job.replicas() <= 1;
    if untouched && same_shape {
        configure(c, &head, &members, job, at)?;
        return Ok(Applied { id, action: ApplyAction::Configured, replaced: None });
    }
    if !untouched && !replace {
        let started = members.iter().filter(|m| m.state != JobState::Pending || m.attempt > 0).count();
        let what = if head.array.is_some() {
            format!("array {id} `{}` has {started} started member(s)", head.name)
        } else {
            format!("job {id} `{}` is {}", head.name, head.state)
        };
        return Err(StoreError::Conflict(format!(
            "{what}; a started job does not change in place: `gantry apply --replace -f FILE` cancels what has \
             not ended and submits the file anew"
        )));
    }
    for m in members.iter().filter(|m| !m.state.is_terminal()) {
        jobs::cancel(c, m.id, at)?;
    }
    created(c, Some(id))
}

/// Rewrites the spec of an array's (or a job's) pending members in place; indices the file no
/// longer has are cancelled, new ones added to the array.
fn configure(c: &dyn Conn, head: &Job, members: &[Job], job: &NewJob, at: i64) -> Result<()> {
    let wanted: BTreeSet<u32> =
        job.spec.array.as_ref().map(|a| a.indices.iter().copied().collect()).unwrap_or_default();
    let max_running = job.spec.array.as_ref().and_then(|a| a.max_running);
    let mut have = BTreeSet::new();
    for m in members {
        let index = m.array.as_ref().map(|a| a.index);
        match index {
            Some(i) if !wanted.contains(&i) => {
                jobs::transition(
                    c,
                    m,
                    JobState::Cancelled,
                    Some("its index left the array (gantry apply)"),
                    at,
                )?;
            }
            _ => {
                let key = (m.id == head.id).then(|| job.spec.request_id.clone()).flatten();
                update_spec(c, m.id, job, key.as_deref(), max_running)?;
                have.extend(index);
            }
        }
    }
    for index in wanted.difference(&have) {
        jobs::insert(c, job, Some((Some(head.id), *index, max_running)), None)?;
    }
    let what = if head.array.is_some() { "array" } else { "job" };
    super::tokens::event(
        c,
        at,
        "job.configured",
        &format!("job/{}", head.id),
        &format!("{what} updated in place by gantry apply"),
        Some(&head.team),
    )
}

fn update_spec(
    c: &dyn Conn,
    id: JobId,
    job: &NewJob,
    key: Option<&str>,
    max_running: Option<u32>,
) -> Result<()> {
    let r = job.request();
    let n = c
        .prepare_cached(
            "UPDATE jobs SET request_id = COALESCE(?2, request_id), priority = ?3, command = ?4, gpus = ?5, \
             gpu_memory_mib = ?6, gpu_compute_pct = ?7, cpu_milli = ?8, memory_mib = ?9, max_retries = ?10, \
             env = ?11, time_limit_s = ?12, \"user\" = ?13, array_max_running = ?14, after = ?15, labels = ?16, \
             gpu_models = ?17, workdir = ?18, gpus_max = ?19, upload = ?20, chdir = ?21, node_selector = ?22 \
             WHERE id = ?1 AND state = 'pending'",
        )?
        .execute(params![
            id,
            key,
            job.spec.priority,
            rows::to_json(&job.spec.command)?,
            r.gpus,
            r.gpu_memory_mib,
            r.gpu_compute_pct,
            r.cpu_milli,
            r.memory_mib,
            job.max_retries(),
            rows::to_json(&job.spec.env)?,
            job.spec.time_limit_s,
            job.user,
            max_running,
            rows::to_json(&job.spec.after)?,
            rows::to_json(&job.spec.labels)?,
            rows::to_json(&job.spec.gpu_models)?,
            job.spec.workdir,
            r.gpus_max,
            job.spec.upload.as_ref().map(rows::to_json).transpose()?,
            job.spec.chdir,
            rows::to_json(&job.spec.node_selector)?
        ])?;
    if n == 0 {
        return Err(StoreError::Conflict(format!("job {id} is no longer pending")));
    }
    super::inputs::save(c, id, &job.spec)
}
