//! Submissions in bulk: a run of plain submissions in one group written by four statements,
//! however many there are (alone, each costs eight round trips to the server).
//!
//! The rows are the ones [`crate::sqlite::jobs::insert`] and the audit append write, the same
//! columns from the same values ([`jobs::insert_values`]), passed as one JSON array and
//! expanded by `json_populate_recordset` over the table's own row type:
//!
//! 1. the request ids already taken (one `SELECT` for the run's keys): those submissions are
//!    answered with their job, as alone, and a key twice in the run makes one job;
//! 2. ids for the new jobs from the table's identity sequence, so the audit rows can name them;
//! 3. the chain's head, locked as a single append locks it;
//! 4. one statement: the jobs, their `pending` transitions and the audit rows, chained in
//!    order after the head. The database's own checks run row by row as for single writes:
//!    the triggers keep the change log and the counts, and each audit row must follow the
//!    head that the row before it moved (migration 28).
//!
//! Anything refused (a request id another replica took meanwhile, a value out of range) fails
//! the whole run, which the writer then rolls back and writes one by one.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value as Json};

use crate::db::{Conn, Value, params};
use crate::model::{AuditEntry, Changed, JobId, NewJob};
use crate::sqlite::{audit, jobs};
use crate::writer::Submission;
use crate::{Result, StoreError};

/// Whether a job is written in bulk: one plain job (an array's members and a gang's workers
/// are written as they always are).
pub(super) fn fits(job: &NewJob) -> bool {
    // A service's replica is checked against its service in the insert's transaction
    // (`jobs::submit`): it takes the one-at-a-time path.
    job.spec.array.is_none() && job.replicas() <= 1 && job.service.is_none()
}

/// [`crate::writer::Bulk::many`] for PostgreSQL.
pub(super) fn many(c: &dyn Conn, items: &[Submission]) -> Result<Vec<Changed>> {
    // Each team's pending limits, for what the run adds together: a run that would pass one is
    // refused whole, and the writer then writes each submission alone, each checked exactly.
    let mut adding: std::collections::BTreeMap<&str, (jobs::Pending, jobs::PendingLimits)> =
        std::collections::BTreeMap::new();
    for s in items {
        let e = adding
            .entry(s.job.team.as_str())
            .or_insert((jobs::Pending::default(), jobs::PendingLimits::of(&s.job)));
        *e = (e.0.add(jobs::pending_added(&s.job)?), e.1.and(jobs::PendingLimits::of(&s.job)));
    }
    for (team, (n, limits)) in adding {
        jobs::pending_room(c, team, limits, n)?;
    }
    // Each caller's token, read again in this transaction (a refusal refuses the run, and the
    // writer then writes each submission alone, each refused or written on its own).
    for s in items {
        if let Some(credential) = &s.entry.credential {
            crate::sqlite::tokens::still_holds(c, credential, s.entry.at)?;
        }
    }
    let mut known = taken(c, items)?;
    let fresh = {
        let mut seen = HashSet::new();
        items.iter().filter(|s| key(s).is_none_or(|k| !known.contains_key(&k) && seen.insert(k))).count()
    };
    let mut ids = next_ids(c, fresh)?.into_iter();
    let mut answers = Vec::with_capacity(items.len());
    let mut made = Vec::with_capacity(items.len());
    let mut jobs_json = Vec::with_capacity(fresh);
    for s in items {
        let key = key(s);
        // A request id seen before, or earlier in this run: that job, as alone.
        if let Some(id) = key.as_ref().and_then(|k| known.get(k)) {
            answers.push(Changed::Submitted { id: *id, created: false });
            made.push(*id);
            continue;
        }
        let id = ids.next().ok_or_else(|| StoreError::Corrupt("too few job ids".into()))?;
        jobs_json.push(job_record(id, &s.job)?);
        if let Some(k) = key {
            known.insert(k, id);
        }
        answers.push(Changed::Submitted { id, created: true });
        made.push(id);
    }
    let entries: Vec<AuditEntry> = items
        .iter()
        .zip(&made)
        .map(|(s, id)| AuditEntry { target: format!("job/{id}"), ..s.entry.clone() })
        .collect();
    let head = audit::locked_head(c)?;
    let rows = audit::chain(head, entries.iter().map(|e| (e, "ok")));
    let audit_json = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.id, "at": r.at, "actor": r.actor, "role": r.role, "team": r.team,
                "action": r.action, "target": r.target, "outcome": r.outcome, "peer": r.peer,
                "prev_hash": r.prev_hash, "hash": r.hash,
            })
        })
        .collect::<Vec<_>>();
    let sql = format!(
        "WITH j AS (INSERT INTO jobs (id, {cols}, inputs, input_secret, outputs, output_secret, image, volumes) \
         SELECT id, {cols}, inputs, input_secret, outputs, output_secret, image, volumes FROM json_populate_recordset(NULL::jobs, CAST(?1 AS json)) \
         ORDER BY id RETURNING id, submitted_at), \
         t AS (INSERT INTO job_transitions (job_id, from_state, to_state, reason, at, attempt) \
         SELECT id, NULL, 'pending', NULL, submitted_at, NULL FROM j ORDER BY id), \
         a AS (INSERT INTO audit (id, at, actor, role, team, action, target, outcome, peer, prev_hash, hash) \
         SELECT id, at, actor, role, team, action, target, outcome, peer, prev_hash, hash \
         FROM json_populate_recordset(NULL::audit, CAST(?2 AS json)) ORDER BY id RETURNING id) \
         SELECT (SELECT COUNT(*) FROM j), (SELECT COUNT(*) FROM a)",
        cols = jobs::INSERT_COLUMNS
    );
    let jobs_text = Json::Array(jobs_json).to_string();
    let audit_text = Json::Array(audit_json).to_string();
    let (n_jobs, n_audit): (i64, i64) =
        c.prepare_cached(&sql)?.query_row(params![jobs_text, audit_text], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if usize::try_from(n_jobs).ok() != Some(fresh) || usize::try_from(n_audit).ok() != Some(items.len()) {
        return Err(StoreError::Corrupt(format!(
            "bulk submission wrote {n_jobs} jobs and {n_audit} audit rows for {fresh} and {}",
            items.len()
        )));
    }
    Ok(answers)
}

/// A submission's idempotency key: its team and request id.
fn key(s: &Submission) -> Option<(String, String)> {
    Some((s.job.team.clone(), s.job.spec.request_id.clone()?))
}

/// The jobs the run's request ids already name, by (team, key).
fn taken(c: &dyn Conn, items: &[Submission]) -> Result<HashMap<(String, String), JobId>> {
    let keys: Vec<Json> = items
        .iter()
        .filter_map(|s| {
            let key = s.job.spec.request_id.as_deref()?;
            Some(serde_json::json!({ "team": s.job.team, "request_id": key }))
        })
        .collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = c.rows(
        "SELECT j.team, j.request_id, j.id FROM jobs j \
         JOIN json_to_recordset(CAST(?1 AS json)) AS k(team TEXT, request_id TEXT) \
         ON j.team = k.team AND j.request_id = k.request_id",
        params![Json::Array(keys).to_string()],
    )?;
    rows.iter().map(|r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?))).collect()
}

/// `n` fresh ids of the jobs' identity sequence, ascending (so a run's jobs keep their order).
fn next_ids(c: &dyn Conn, n: usize) -> Result<Vec<JobId>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut ids: Vec<JobId> = c
        .prepare_cached(
            "SELECT nextval(pg_get_serial_sequence('jobs', 'id')) FROM generate_series(1, CAST(?1 AS BIGINT))",
        )?
        .query_map(params![n], |r| r.get(0))?
        .collect::<Result<_>>()?;
    ids.sort_unstable();
    Ok(ids)
}

/// A job's row as a JSON object of its columns.
fn job_record(id: JobId, job: &NewJob) -> Result<Json> {
    let values = jobs::insert_values(job, None, job.spec.request_id.as_deref())?;
    let mut row = Map::new();
    row.insert("id".into(), id.into());
    let columns = jobs::INSERT_COLUMNS.split(',').map(|c| c.trim().trim_matches('"'));
    for (column, value) in columns.zip(values) {
        row.insert(column.to_owned(), json(value)?);
    }
    let inputs =
        (!job.spec.inputs.is_empty()).then(|| crate::sqlite::rows::to_json(&job.spec.inputs)).transpose()?;
    row.insert("inputs".into(), inputs.map_or(Json::Null, Json::String));
    row.insert("input_secret".into(), job.spec.input_secret.clone().map_or(Json::Null, Json::String));
    let outputs = (!job.spec.outputs.is_empty())
        .then(|| crate::sqlite::rows::to_json(&job.spec.outputs))
        .transpose()?;
    row.insert("outputs".into(), outputs.map_or(Json::Null, Json::String));
    row.insert("output_secret".into(), job.spec.output_secret.clone().map_or(Json::Null, Json::String));
    let image = crate::sqlite::inputs::image_json(&job.spec)?;
    row.insert("image".into(), image.map_or(Json::Null, Json::String));
    let volumes = crate::sqlite::inputs::volumes_json(&job.spec)?;
    row.insert("volumes".into(), volumes.map_or(Json::Null, Json::String));
    Ok(Json::Object(row))
}

fn json(v: Value) -> Result<Json> {
    Ok(match v {
        Value::Null => Json::Null,
        Value::Int(i) => i.into(),
        Value::Real(r) => serde_json::Number::from_f64(r).map_or(Json::Null, Json::Number),
        Value::Text(s) => Json::String(s),
        Value::Invalid(why) => return Err(StoreError::Conflict(why)),
    })
}
