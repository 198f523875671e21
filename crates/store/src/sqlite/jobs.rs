//! Jobs, their transitions and allocations.

use crate::db::{Conn, Dialect, OptionalExtension, Value, params};

use super::gangs;
use super::rows::{self, ALLOCATION_COLUMNS, JOB_COLUMNS};
use crate::model::*;
use crate::{Result, StoreError};

pub(super) fn submit(c: &dyn Conn, job: &NewJob) -> Result<(JobId, bool)> {
    if let Some((name, generation)) = &job.service {
        service_current(c, &job.team, name, *generation)?;
    }
    pending_room(c, &job.team, PendingLimits::of(job), pending_added(job)?)?;
    if let Some(key) = &job.spec.request_id {
        let existing = c
            .prepare_cached("SELECT id FROM jobs WHERE team = ?1 AND request_id = ?2")?
            .query_row(params![&job.team, key], |r| r.get(0))
            .optional()?;
        if let Some(id) = existing {
            return Ok((id, false));
        }
    }
    let Some(array) = &job.spec.array else {
        return Ok((insert(c, job, None, job.spec.request_id.as_deref())?, true));
    };
    // One transaction: the array exists whole or not at all. The first member's id is the
    // array's; only it carries the request id.
    let mut indices = array.indices.iter();
    let first =
        *indices.next().ok_or_else(|| StoreError::Conflict("an array needs at least one index".into()))?;
    let head = insert(c, job, Some((None, first, array.max_running)), job.spec.request_id.as_deref())?;
    for index in indices {
        insert(c, job, Some((Some(head), *index, array.max_running)), None)?;
    }
    Ok((head, true))
}

/// Pending jobs and the bytes of command and environment they store: what a team holds, or
/// what a submission adds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pending {
    /// Jobs: an array's members each, a gang once (as the counts).
    pub jobs: u64,
    /// Bytes of command and environment, as the rows store them: once, an array's on its
    /// first member.
    pub bytes: u64,
}

impl Pending {
    pub(crate) fn add(self, other: Pending) -> Pending {
        Pending { jobs: self.jobs.saturating_add(other.jobs), bytes: self.bytes.saturating_add(other.bytes) }
    }
}

/// What a submission adds to its team's pending jobs.
pub(crate) fn pending_added(job: &NewJob) -> Result<Pending> {
    let bytes = rows::to_json(&job.spec.command)?.len() + rows::to_json(&job.spec.env)?.len();
    Ok(Pending { jobs: job.spec.array.as_ref().map_or(1, |a| a.indices.len() as u64), bytes: bytes as u64 })
}

/// The pending limits a submission is checked against (`None`: not checked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PendingLimits {
    /// Jobs.
    pub jobs: Option<u64>,
    /// Bytes of command and environment.
    pub bytes: Option<u64>,
}

impl PendingLimits {
    pub(crate) fn of(job: &NewJob) -> Self {
        Self { jobs: job.pending_limit, bytes: job.pending_bytes_limit }
    }

    /// The tighter of two submissions' limits (a run of them is held to the tightest).
    pub(crate) fn and(self, other: Self) -> Self {
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Self { jobs: min(self.jobs, other.jobs), bytes: min(self.bytes, other.bytes) }
    }
}

/// Refuses `adding` to `team`'s pending jobs past `limits`, counted in the caller's transaction
/// from the trigger-kept counts (`job_counts`: jobs and bytes): on SQLite the one writer makes
/// it exact; on PostgreSQL a transaction-scoped advisory lock per team orders the submissions
/// of every server replica, so twenty at once cannot each see room for themselves.
pub(crate) fn pending_room(c: &dyn Conn, team: &str, limits: PendingLimits, adding: Pending) -> Result<()> {
    if limits == PendingLimits::default() {
        return Ok(());
    }
    if c.dialect() == Dialect::Postgres {
        // The lock's own column is `void`, which no row reader takes: select a number beside it.
        let lock = "SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtext(CAST(?1 AS TEXT)))) AS held";
        c.prepare_cached(lock)?.query_row(params![team], |_| Ok(()))?;
    }
    let (jobs, bytes): (i64, i64) = c
        .prepare_cached(
            "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT), CAST(COALESCE(SUM(bytes), 0) AS BIGINT) \
             FROM job_counts WHERE team = ?1 AND state = 'pending'",
        )?
        .query_row(params![team], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let (pending, held) = (u64::try_from(jobs).unwrap_or(0), u64::try_from(bytes).unwrap_or(0));
    if let Some(limit) = limits.jobs
        && pending + adding.jobs > limit
    {
        return Err(StoreError::LimitReached(format!(
            "team {team} has {pending} pending jobs and may have {limit}; this submission adds {}: wait for some to start or cancel some",
            adding.jobs
        )));
    }
    if let Some(limit) = limits.bytes
        && held.saturating_add(adding.bytes) > limit
    {
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20));
        return Err(StoreError::LimitReached(format!(
            "team {team}'s pending jobs store {} of command and environment and may store {}; this \
             submission adds {}: wait for some to start or cancel some",
            mib(held),
            mib(limit),
            mib(adding.bytes)
        )));
    }
    Ok(())
}

/// Refuses a replica of a service that is gone, or of a generation it no longer runs, in the
/// transaction that would insert it: a controller that decided to start a replica before a
/// delete committed cannot leave it running after (on PostgreSQL the service's row is held
/// shared until the insert commits, and the delete takes it exclusively before it lists the
/// replicas it stops).
fn service_current(c: &dyn Conn, team: &str, name: &str, generation: u64) -> Result<()> {
    let lock = match c.dialect() {
        Dialect::Postgres => " FOR SHARE",
        Dialect::Sqlite => "",
    };
    let sql = format!("SELECT generation FROM services WHERE team = ?1 AND name = ?2{lock}");
    let current: Option<u64> =
        c.prepare_cached(&sql)?.query_row(params![team, name], |r| r.get(0)).optional()?;
    match current {
        None => Err(StoreError::NotFound(format!(
            "service {name} of team {team} (deleted): no replica is started"
        ))),
        Some(g) if g != generation => Err(StoreError::Conflict(format!(
            "service {name} of team {team} runs generation {g}, not {generation}: no replica of it is started"
        ))),
        Some(_) => Ok(()),
    }
}

/// Inserts one job (one array member when `array` is `(array id, index, limit)`; no array id:
/// this member's own id is the array's).
pub(super) fn insert(
    c: &dyn Conn,
    job: &NewJob,
    array: Option<(Option<JobId>, u32, Option<u32>)>,
    request_id: Option<&str>,
) -> Result<JobId> {
    let sql = format!(
        "INSERT INTO jobs ({INSERT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, \
         ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29) RETURNING id"
    );
    let id: JobId =
        c.prepare_cached(&sql)?.query_row(&insert_values(job, array, request_id)?, |r| r.get(0))?;
    if let Some((array_id, ..)) = array {
        c.prepare_cached("UPDATE jobs SET array_id = ?2 WHERE id = ?1")?
            .execute(params![id, array_id.unwrap_or(id)])?;
    }
    super::inputs::save(c, id, &job.spec)?;
    record_transition(c, id, None, JobState::Pending, None, job.submitted_at)?;
    if job.replicas() > 1 {
        gangs::insert_workers(c, id, job)?;
    }
    Ok(id)
}

/// The columns a new job is inserted with, in the order of [`insert_values`] (its inputs are
/// written after the row, by [`super::inputs::save`]).
pub(crate) const INSERT_COLUMNS: &str = "request_id, team, name, priority, command, gpus, gpu_memory_mib, \
     gpu_compute_pct, cpu_milli, memory_mib, state, max_retries, submitted_at, env, time_limit_s, \"user\", \
     array_index, array_max_running, after, labels, gpu_models, workdir, replicas, gpus_max, service, \
     service_generation, upload, chdir, node_selector";

/// The values of [`INSERT_COLUMNS`] for a new pending job (one array member when `array` is
/// `(array id, index, limit)`).
pub(crate) fn insert_values(
    job: &NewJob,
    array: Option<(Option<JobId>, u32, Option<u32>)>,
    request_id: Option<&str>,
) -> Result<Vec<Value>> {
    let r = job.request();
    // An array stores its command and environment once, on its first member: the others keep
    // '' and are read with the first's (`rows::JOB_COLUMNS`).
    let member = matches!(array, Some((Some(_), ..)));
    let once = |text: String| if member { String::new() } else { text };
    Ok(params![
        request_id,
        job.team,
        job.name,
        job.spec.priority,
        once(rows::to_json(&job.spec.command)?),
        r.gpus,
        r.gpu_memory_mib,
        r.gpu_compute_pct,
        r.cpu_milli,
        r.memory_mib,
        JobState::Pending.as_str(),
        job.max_retries(),
        job.submitted_at,
        once(rows::to_json(&job.spec.env)?),
        job.spec.time_limit_s,
        job.user,
        array.map(|a| a.1),
        array.and_then(|a| a.2),
        rows::to_json(&job.spec.after)?,
        rows::to_json(&job.spec.labels)?,
        rows::to_json(&job.spec.gpu_models)?,
        job.spec.workdir,
        job.replicas(),
        r.gpus_max,
        job.service.as_ref().map(|s| &s.0),
        job.service.as_ref().map(|s| s.1),
        job.spec.upload.as_ref().map(rows::to_json).transpose()?,
        job.spec.chdir,
        rows::to_json(&job.spec.node_selector)?
    ]
    .to_vec())
}

pub(super) fn get(c: &dyn Conn, id: JobId) -> Result<Option<Job>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
    c.prepare_cached(&sql)?.query_row(params![id], rows::job).optional()
}

pub(super) fn require(c: &dyn Conn, id: JobId) -> Result<Job> {
    get(c, id)?.ok_or_else(|| StoreError::NotFound(format!("job {id}")))
}

pub(super) fn list(c: &dyn Conn, filter: &JobFilter) -> Result<Vec<Job>> {
    let order = if filter.limit.is_some() { "DESC" } else { "ASC" };
    // Every label asked for, with its value: a JSON object containing another.
    let labelled = match c.dialect() {
        Dialect::Sqlite => {
            "NOT EXISTS (SELECT 1 FROM json_each(?7) s WHERE NOT EXISTS \
             (SELECT 1 FROM json_each(jobs.labels) l WHERE l.key = s.key AND l.value = s.value))"
        }
        Dialect::Postgres => "CAST(jobs.labels AS jsonb) @> CAST(CAST(?7 AS TEXT) AS jsonb)",
    };
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE (state = ?1 OR ?1 IS NULL) AND (team = ?2 OR ?2 IS NULL) \
         AND (team IN (SELECT value FROM json_each(?4)) OR ?4 IS NULL) AND (id < ?5 OR ?5 IS NULL) \
         AND (array_id = ?6 OR ?6 IS NULL) \
         AND {labelled} ORDER BY id {order} LIMIT ?3"
    );
    let limit = filter.limit.map_or(i64::MAX, i64::from);
    let teams = filter.teams.as_ref().map(rows::to_json).transpose()?;
    let mut stmt = c.prepare_cached(&sql)?;
    let state = filter.state.map(JobState::as_str);
    let labels = rows::to_json(&filter.labels)?;
    let rows = stmt.query_map(
        params![state, filter.team, limit, teams, filter.before, filter.array, labels],
        rows::job,
    )?;
    rows.collect::<Result<_>>()
}

pub(super) fn transitions(c: &dyn Conn, id: JobId) -> Result<Vec<Transition>> {
    let mut stmt = c.prepare_cached(
        "SELECT from_state, to_state, reason, at, attempt FROM job_transitions WHERE job_id = ?1 ORDER BY id",
    )?;
    let rows = stmt.query_map(params![id], |r| {
        let from: Option<String> = r.get(0)?;
        let to: String = r.get(1)?;
        Ok(Transition {
            from: from.map(|f| rows::parse_enum("job state", &f, JobState::parse)).transpose()?,
            to: rows::parse_enum("job state", &to, JobState::parse)?,
            reason: r.get(2)?,
            at: r.get(3)?,
            attempt: r.get(4)?,
        })
    })?;
    rows.collect::<Result<_>>()
}

pub(super) fn attempts(c: &dyn Conn, id: JobId) -> Result<Vec<Attempt>> {
    let mut stmt = c.prepare_cached(
        "SELECT attempt, node_id, gpu_uuids, placed_at, started_at, finished_at, outcome, exit_code, reason \
         FROM job_attempts WHERE job_id = ?1 ORDER BY attempt",
    )?;
    let rows = stmt.query_map(params![id], |r| {
        let uuids: String = r.get(2)?;
        let outcome: Option<String> = r.get(6)?;
        Ok(Attempt {
            attempt: r.get(0)?,
            node_id: r.get(1)?,
            gpu_uuids: serde_json::from_str(&uuids).unwrap_or_default(),
            placed_at: r.get(3)?,
            started_at: r.get(4)?,
            finished_at: r.get(5)?,
            outcome: outcome.map(|o| rows::parse_enum("job state", &o, JobState::parse)).transpose()?,
            exit_code: r.get(7)?,
            reason: r.get(8)?,
        })
    })?;
    rows.collect::<Result<_>>()
}

pub(super) fn changed(
    c: &dyn Conn,
    after: Option<i64>,
    limit: u32,
    teams: Option<&[String]>,
) -> Result<(i64, Vec<Job>)> {
    let Some(after) = after else {
        let last = c
            .prepare_cached("SELECT COALESCE(MAX(id), 0) FROM job_transitions")?
            .query_row(params![], |r| r.get(0))?;
        return Ok((last, Vec::new()));
    };
    let mut stmt =
        c.prepare_cached("SELECT id, job_id FROM job_transitions WHERE id > ?1 ORDER BY id LIMIT ?2")?;
    let changes =
        stmt.query_map(params![after, limit], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, JobId>(1)?)))?;
    let changes: Vec<(i64, JobId)> = changes.collect::<Result<_>>()?;
    let reached = changes.last().map_or(after, |(id, _)| *id);
    let mut ids: Vec<JobId> = changes.into_iter().map(|(_, job)| job).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Ok((reached, Vec::new()));
    }
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE id IN (SELECT CAST(value AS BIGINT) FROM json_each(?1)) \
         AND (team IN (SELECT value FROM json_each(?2)) OR ?2 IS NULL) ORDER BY id"
    );
    let teams = teams.map(|t| rows::to_json(&t)).transpose()?;
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![rows::to_json(&ids)?, teams], rows::job)?;
    Ok((reached, rows.collect::<Result<_>>()?))
}

pub(super) fn record_transition(
    c: &dyn Conn,
    id: JobId,
    from: Option<JobState>,
    to: JobState,
    reason: Option<&str>,
    at: i64,
) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO job_transitions (job_id, from_state, to_state, reason, at, attempt) \
         VALUES (?1, ?2, ?3, ?4, ?5, (SELECT NULLIF(attempt, 0) FROM jobs WHERE id = ?1))",
    )?
    .execute(params![id, from.map(JobState::as_str), to.as_str(), reason, at])?;
    job_event(c, id, to, reason, at)
}

/// What a job's event names: team, name, node, service, exit code.
type EventFacts = (String, String, Option<String>, Option<String>, Option<i64>);

/// The event `gantry events` shows for a job reaching `to` (not for pending: a submission is
/// in the audit log, and array members would flood the stream): `job.scheduled` (with its
/// node), `job.started`, `job.succeeded`, `job.failed`, `job.oom`, `job.timeout`,
/// `job.cancelled`; a service replica that fails is also `service.replica_failed`.
fn job_event(c: &dyn Conn, id: JobId, to: JobState, reason: Option<&str>, at: i64) -> Result<()> {
    let kind = match to {
        JobState::Pending => return Ok(()),
        JobState::Failed if reason.is_some_and(|r| r.starts_with("out of memory")) => "job.oom",
        other => match other.as_str() {
            "scheduled" => "job.scheduled",
            "running" => "job.started",
            "succeeded" => "job.succeeded",
            "failed" => "job.failed",
            "timeout" => "job.timeout",
            "cancelled" => "job.cancelled",
            _ => return Ok(()),
        },
    };
    let row: Option<EventFacts> = c
        .prepare_cached("SELECT team, name, node_id, service, exit_code FROM jobs WHERE id = ?1")?
        .query_row(params![id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .optional()?;
    let Some((team, name, node, service, exit_code)) = row else { return Ok(()) };
    let mut message = match (to, &node) {
        (JobState::Scheduled | JobState::Running, Some(node)) => format!("{name} on {node}"),
        _ => name.clone(),
    };
    if let (JobState::Failed, Some(code)) = (to, exit_code) {
        message.push_str(&format!(": exit code {code}"));
    }
    if let Some(r) = reason.filter(|_| !matches!(to, JobState::Scheduled | JobState::Running)) {
        message.push_str(": ");
        message.extend(r.chars().take(300));
    }
    let subject = format!("job/{id}");
    super::tokens::event(c, at, kind, &subject, &message, Some(&team))?;
    if let (Some(service), JobState::Failed | JobState::Timeout) = (service, to) {
        let message = format!("service {service}: replica {id} failed: {message}");
        super::tokens::event(c, at, "service.replica_failed", &subject, &message, Some(&team))?;
    }
    Ok(())
}

/// Moves a job to `to`, recording the transition; a job leaving `scheduled`/`running` gives
/// back its allocations in the same transaction.
pub(super) fn transition(c: &dyn Conn, job: &Job, to: JobState, reason: Option<&str>, at: i64) -> Result<()> {
    if job.state.is_active() && !to.is_active() {
        release(c, job.id, at)?;
        c.prepare_cached(
            "UPDATE job_attempts SET finished_at = ?3, outcome = ?4, reason = ?5, \
             exit_code = (SELECT exit_code FROM jobs WHERE id = ?1) WHERE job_id = ?1 AND attempt = ?2",
        )?
        .execute(params![job.id, job.attempt, at, to.as_str(), reason])?;
    }
    let finished = to.is_terminal().then_some(at);
    let (node, epoch) = if to == JobState::Pending { (None, None) } else { (job.node_id.clone(), job.epoch) };
    c.prepare_cached(
        "UPDATE jobs SET state = ?2, reason = ?3, finished_at = COALESCE(?4, finished_at), stop = NULL, \
         node_id = ?5, epoch = ?6 WHERE id = ?1",
    )?
    .execute(params![job.id, to.as_str(), reason, finished, node, epoch])?;
    record_transition(c, job.id, Some(job.state), to, reason, at)
}

fn release(c: &dyn Conn, id: JobId, at: i64) -> Result<()> {
    c.prepare_cached(
        "UPDATE allocations SET released_at = ?2, released_after = (SELECT MAX(id) FROM allocations) \
         WHERE job_id = ?1 AND released_at IS NULL",
    )?
    .execute(params![id, at])?;
    Ok(())
}

/// An active job lost its placement: back to `pending`, or `failed` once retries are spent
/// (`cancelled` if a cancel was pending). Only a lost *run* spends the budget: a placement whose
/// process never started (say, `gantry up` restarted before its agent picked it up) does not.
pub(super) fn requeue_or_fail(c: &dyn Conn, job: &Job, reason: &str, at: i64) -> Result<()> {
    if let Some(gang) = gangs::parent(job) {
        return gangs::worker_lost(c, job, gang, reason, at);
    }
    if job.stop.as_deref() == Some("cancel") {
        return transition(c, job, JobState::Cancelled, Some("cancelled"), at);
    }
    let spent: u32 = if job.state == JobState::Running {
        c.prepare_cached("UPDATE jobs SET lost_runs = lost_runs + 1 WHERE id = ?1 RETURNING lost_runs")?
            .query_row(params![job.id], |r| r.get(0))?
    } else {
        c.prepare_cached("SELECT lost_runs FROM jobs WHERE id = ?1")?
            .query_row(params![job.id], |r| r.get(0))?
    };
    if spent > job.max_retries {
        let reason = format!("{reason}; retry budget of {} spent", job.max_retries);
        return transition(c, job, JobState::Failed, Some(&reason), at);
    }
    transition(c, job, JobState::Pending, Some(reason), at)
}

pub(super) fn cancel(c: &dyn Conn, id: JobId, at: i64) -> Result<Job> {
    // Cancelling a worker cancels its gang: the gang runs as one job.
    let target = gangs::gang_of(c, id)?.unwrap_or(id);
    let job = require(c, target)?;
    if gangs::is_gang(&job) {
        gangs::cancel(c, &job, at)?;
        return require(c, id);
    }
    match job.state {
        JobState::Pending => transition(c, &job, JobState::Cancelled, Some("cancelled"), at)?,
        s if s.is_active() => {
            c.prepare_cached("UPDATE jobs SET stop = 'cancel' WHERE id = ?1")?.execute(params![id])?;
        }
        s => return Err(StoreError::Conflict(format!("job {id} already {s}"))),
    }
    require(c, id)
}

pub(super) fn preempt(c: &dyn Conn, id: JobId, reason: &str, at: i64) -> Result<()> {
    // Preempting a worker preempts its whole gang.
    let job = require(c, gangs::gang_of(c, id)?.unwrap_or(id))?;
    if job.state != JobState::Running || job.stop.is_some() {
        let stop = job.stop.as_deref().map(|s| format!(", stopping ({s})")).unwrap_or_default();
        return Err(StoreError::Conflict(format!("job {id} is {}{stop}, not preemptible now", job.state)));
    }
    if gangs::is_gang(&job) {
        return gangs::preempt(c, &job, reason, at);
    }
    c.prepare_cached("UPDATE jobs SET stop = 'preempt', reason = ?2 WHERE id = ?1")?
        .execute(params![id, reason])?;
    super::tokens::event(c, at, "job.preempted", &format!("job/{id}"), reason, Some(&job.team))
}

/// Stops a running elastic job to restart it at another width: the preemption path (SIGTERM,
/// the grace period, back to `pending` with `reason`, no retry spent) with a `job.resized`
/// event. The next placement decides the new width.
pub(super) fn resize(c: &dyn Conn, id: JobId, reason: &str, at: i64) -> Result<()> {
    let job = require(c, id)?;
    if !job.request.is_elastic() || job.gang.is_some() {
        return Err(StoreError::Conflict(format!("job {id} is not elastic")));
    }
    if job.state != JobState::Running || job.stop.is_some() {
        let stop = job.stop.as_deref().map(|s| format!(", stopping ({s})")).unwrap_or_default();
        return Err(StoreError::Conflict(format!("job {id} is {}{stop}, not resizable now", job.state)));
    }
    c.prepare_cached("UPDATE jobs SET stop = 'preempt', reason = ?2 WHERE id = ?1")?
        .execute(params![id, reason])?;
    super::tokens::event(c, at, "job.resized", &format!("job/{id}"), reason, Some(&job.team))
}

pub(super) fn place(c: &dyn Conn, p: &Placement) -> Result<()> {
    if require(c, p.job_id)?.gang.is_some() {
        return Err(StoreError::Conflict(format!("job {} belongs to a gang: place the gang", p.job_id)));
    }
    place_one(c, p)
}

/// Places one job (a plain job, or one worker of a gang being placed).
pub(super) fn place_one(c: &dyn Conn, p: &Placement) -> Result<()> {
    let job = require(c, p.job_id)?;
    if job.state != JobState::Pending {
        return Err(StoreError::Conflict(format!("job {} is {}, not pending", job.id, job.state)));
    }
    let node: Option<(String, u64)> = c
        .prepare_cached("SELECT state, epoch FROM nodes WHERE id = ?1")?
        .query_row(params![&p.node_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match node {
        Some((state, epoch)) if state == "ready" && epoch == p.epoch => {}
        _ => {
            return Err(StoreError::Conflict(format!(
                "node {} is not ready at epoch {}",
                p.node_id, p.epoch
            )));
        }
    }
    if let Some(max) = job.request.gpus_max
        && !(job.request.gpus as usize..=max as usize).contains(&p.grants.len())
    {
        return Err(StoreError::Conflict(format!(
            "job {} runs on {}..{max} GPUs, not {}",
            job.id,
            job.request.gpus,
            p.grants.len()
        )));
    }
    let attempt = job.attempt + 1;
    for g in &p.grants {
        check_fits(c, &p.node_id, g)?;
        c.prepare_cached(
            "INSERT INTO allocations (job_id, attempt, node_id, epoch, gpu_uuid, share_milli, memory_mib, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![job.id, attempt, p.node_id, p.epoch, g.uuid, g.share_milli, g.memory_mib, p.at])?;
    }
    mark_scheduled(c, job.id, attempt, p)?;
    // An elastic job placed above its minimum says why (idle GPUs at admission) and what then.
    let wide = job.request.is_elastic() && p.grants.len() > job.request.gpus as usize;
    let why = wide.then(|| {
        format!(
            "started on {} GPUs, above its minimum of {}: they were idle when it was placed; it shrinks back \
             (not below {}) when a job waits for them",
            p.grants.len(),
            job.request.gpus,
            job.request.gpus
        )
    });
    if let Some(why) = &why {
        super::tokens::event(c, p.at, "job.widened", &format!("job/{}", job.id), why, Some(&job.team))?;
    }
    record_transition(c, job.id, Some(JobState::Pending), JobState::Scheduled, why.as_deref(), p.at)
}

/// Sets replica `id`'s `PORT` in its environment (and so in `job_counts.bytes`, by the trigger).
pub(super) fn set_replica_port(c: &dyn Conn, id: JobId, port: u16) -> Result<()> {
    let job = require(c, id)?;
    if job.service.is_none() {
        return Err(StoreError::NotFound(format!("service replica {id}")));
    }
    let mut env = job.env;
    env.insert("PORT".into(), port.to_string());
    c.prepare_cached("UPDATE jobs SET env = ?2 WHERE id = ?1")?.execute(params![id, rows::to_json(&env)?])?;
    Ok(())
}

/// Marks job `id` scheduled on `p` as attempt `attempt` and opens that attempt's row (a
/// placement, or a borrow of lent GPUs: `super::loans`).
pub(super) fn mark_scheduled(c: &dyn Conn, id: JobId, attempt: u32, p: &Placement) -> Result<()> {
    let uuids: Vec<&str> = p.grants.iter().map(|g| g.uuid.as_str()).collect();
    c.prepare_cached(
        "UPDATE jobs SET state = 'scheduled', attempt = ?2, node_id = ?3, epoch = ?4, gpu_uuids = ?5, \
         reason = NULL, exit_code = NULL, started_at = NULL WHERE id = ?1",
    )?
    .execute(params![id, attempt, p.node_id, p.epoch, rows::to_json(&uuids)?])?;
    c.prepare_cached(
        "INSERT INTO job_attempts (job_id, attempt, node_id, gpu_uuids, placed_at) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (job_id, attempt) DO UPDATE SET node_id = ?3, gpu_uuids = ?4, placed_at = ?5, started_at = NULL, \
         finished_at = NULL, outcome = NULL, exit_code = NULL, reason = NULL",
    )?
    .execute(params![id, attempt, p.node_id, rows::to_json(&uuids)?, p.at])?;
    Ok(())
}

/// The last line of defence against double allocation: the grant must fit beside what is held.
fn check_fits(c: &dyn Conn, node_id: &str, g: &Grant) -> Result<()> {
    let gpu: Option<(String, String, u64)> = c
        .prepare_cached("SELECT node_id, health, memory_mib FROM gpus WHERE uuid = ?1")?
        .query_row(params![&g.uuid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((gpu_node, health, capacity)) = gpu else {
        return Err(StoreError::NotFound(format!("gpu {}", g.uuid)));
    };
    if gpu_node != node_id || health != "healthy" {
        return Err(StoreError::Conflict(format!("gpu {} is {health} on {gpu_node}", g.uuid)));
    }
    if let Some(b) = super::loans::borrowed(c, &g.uuid)? {
        return Err(StoreError::Conflict(format!("gpu {} is lent: job {b} borrows it", g.uuid)));
    }
    let (share, memory): (u32, u64) = c
        .prepare_cached(
            "SELECT CAST(COALESCE(SUM(share_milli), 0) AS BIGINT), CAST(COALESCE(SUM(memory_mib), 0) AS BIGINT) \
             FROM allocations \
             WHERE gpu_uuid = ?1 AND released_at IS NULL",
        )?
        .query_row(params![&g.uuid], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if share + g.share_milli > 1000 || memory + g.memory_mib > capacity {
        return Err(StoreError::Conflict(format!("gpu {} has no room left", g.uuid)));
    }
    Ok(())
}

/// An agent reports the process of `attempt` started.
pub(super) fn started(c: &dyn Conn, id: JobId, attempt: u32, at: i64) -> Result<()> {
    let job = require(c, id)?;
    if job.state == JobState::Scheduled && job.attempt == attempt {
        c.prepare_cached("UPDATE jobs SET state = 'running', started_at = ?2 WHERE id = ?1")?
            .execute(params![id, at])?;
        c.prepare_cached("UPDATE job_attempts SET started_at = ?3 WHERE job_id = ?1 AND attempt = ?2")?
            .execute(params![id, attempt, at])?;
        record_transition(c, id, Some(JobState::Scheduled), JobState::Running, None, at)?;
        if let Some(gang) = gangs::parent(&job) {
            gangs::worker_started(c, gang, at)?;
        }
    }
    Ok(())
}

/// An agent reports the process of `attempt` ended. Reports of older attempts are ignored.
pub(super) fn exited(c: &dyn Conn, id: JobId, attempt: u32, exit: &JobExit, at: i64) -> Result<()> {
    // A process that started and ended between two heartbeats still ran: record that first.
    if exit.exit_code.is_some() {
        started(c, id, attempt, at)?;
    }
    let job = require(c, id)?;
    if !job.state.is_active() || job.attempt != attempt {
        return Ok(());
    }
    c.prepare_cached("UPDATE jobs SET exit_code = ?2 WHERE id = ?1")?.execute(params![id, exit.exit_code])?;
    if let Some(gang) = gangs::parent(&job) {
        return gangs::worker_exited(c, &job, gang, exit, at);
    }
    match job.stop.as_deref() {
        Some("cancel") => transition(c, &job, JobState::Cancelled, Some("cancelled"), at),
        // Preemption is not the job's failure: back to the queue, retry budget untouched.
        Some("preempt") => transition(c, &job, JobState::Pending, job.reason.as_deref(), at),
        // Stopped as failed (a service replica the idle policy stopped): no retry.
        Some("fail") => transition(c, &job, JobState::Failed, job.reason.as_deref(), at),
        Some(_) => requeue_or_fail(c, &job, job.reason.as_deref().unwrap_or("requeued"), at),
        None if exit.timed_out => transition(
            c,
            &job,
            JobState::Timeout,
            Some(exit.reason.as_deref().unwrap_or("time limit reached")),
            at,
        ),
        // A replica serves until it is stopped: one that exits has failed, whatever its status.
        None if exit.exit_code == Some(0) && job.service.is_some() => transition(
            c,
            &job,
            JobState::Failed,
            Some("a service replica exited with status 0 (replicas serve until stopped)"),
            at,
        ),
        None if exit.exit_code == Some(0) => transition(c, &job, JobState::Succeeded, None, at),
        None => {
            let reason = exit.reason.clone().unwrap_or_else(|| match exit.exit_code {
                Some(code) => format!("exited with status {code}"),
                None => "ended without an exit status".to_owned(),
            });
            transition(c, &job, JobState::Failed, Some(&reason), at)
        }
    }
}

/// A job whose agent restarted while it ran, and still has it: it stays placed, under the
/// node's new epoch; its allocations stay held (their rows keep the epoch that placed them).
pub(super) fn keep_on_new_epoch(c: &dyn Conn, job: &Job, epoch: u64) -> Result<()> {
    c.prepare_cached("UPDATE jobs SET epoch = ?2 WHERE id = ?1")?.execute(params![job.id, epoch])?;
    Ok(())
}

/// Active jobs on a node (optionally only those of older epochs).
pub(super) fn active_on_node(c: &dyn Conn, node_id: &str, before_epoch: Option<u64>) -> Result<Vec<Job>> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE node_id = ?1 AND state IN ('scheduled', 'running') \
         AND (epoch < ?2 OR ?2 IS NULL) ORDER BY id"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![node_id, before_epoch], rows::job)?;
    rows.collect::<Result<_>>()
}

pub(super) fn allocations(c: &dyn Conn, held_only: bool) -> Result<Vec<Allocation>> {
    let sql = format!(
        "SELECT {ALLOCATION_COLUMNS} FROM allocations WHERE (?1 = 0 OR released_at IS NULL) ORDER BY id"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![held_only], rows::allocation)?;
    rows.collect::<Result<_>>()
}

/// Allocated GPU time per team (and user) in `[since, until)`: each allocation row counts the
/// part of its lifetime inside the window, times its share (milli-GPU).
pub(super) fn usage(
    c: &dyn Conn,
    since: i64,
    until: i64,
    by_user: bool,
    teams: Option<&[String]>,
) -> Result<Vec<Usage>> {
    let teams = teams.map(|t| rows::to_json(&t)).transpose()?;
    let user = if by_user { "j.\"user\"" } else { "NULL" };
    let sql = format!(
        "SELECT j.team, {user}, \
         CAST(SUM((CASE WHEN a.released_at IS NOT NULL AND a.released_at < ?2 THEN a.released_at ELSE ?2 END \
           - CASE WHEN a.created_at > ?1 THEN a.created_at ELSE ?1 END) * a.share_milli) AS BIGINT), \
         COUNT(DISTINCT a.job_id) \
         FROM allocations a JOIN jobs j ON j.id = a.job_id \
         WHERE a.created_at < ?2 AND COALESCE(a.released_at, ?2) > ?1 \
         AND (j.team IN (SELECT value FROM json_each(?3)) OR ?3 IS NULL) \
         GROUP BY 1, 2 ORDER BY 1, 2"
    );
    let hours = |milli_ms: i64| milli_ms as f64 / 1000.0 / 3_600_000.0;
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![since, until, teams], |r| {
        Ok(Usage {
            team: r.get(0)?,
            user: r.get(1)?,
            gpu_hours: hours(r.get(2)?),
            used_gpu_hours: 0.0,
            waste_gpu_hours: 0.0,
            stalled_gpu_hours: 0.0,
            jobs: r.get(3)?,
        })
    })?;
    let mut out: Vec<Usage> = rows.collect::<Result<_>>()?;
    for (team, user, used, stalled) in super::workflow::used(c, since, until, by_user, teams.as_deref())? {
        if let Some(u) = out.iter_mut().find(|u| u.team == team && u.user == user) {
            u.used_gpu_hours = hours(used);
            u.stalled_gpu_hours = hours(stalled);
        }
    }
    for u in &mut out {
        u.waste_gpu_hours = (u.gpu_hours - u.used_gpu_hours).max(0.0);
    }
    Ok(out)
}
