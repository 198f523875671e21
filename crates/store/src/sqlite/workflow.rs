//! The batch workflow's writes: cancelling a whole array, ending a job whose dependency can no
//! longer be met, and the ledger of GPU time actually used.
//!
//! **GPU time used.** Each heartbeat carries every GPU's NVML utilisation (percent of the last
//! sample period a kernel ran). The interval it accounts for runs from the GPU's previous sample
//! (`gpus.used_sampled_at`) to this heartbeat, at most [`MAX_GAP_MS`] long: a longer silence is
//! not known to be use. Every allocation held on the GPU is charged `utilisation × share ×
//! (part of the interval it was held)`, in milli-GPU-ms, into the hour the interval started in
//! (`gpu_use`; an interval crossing an hour is split). A whole GPU busy 50 % for an hour is half a
//! GPU-hour used; two slices on one GPU each get the GPU's utilisation times their share. Used
//! never exceeds allocated for an allocation: it is charged only while held, at most its share.
//!
//! **Data stalls.** When the sample also judged a job for data stalls (`sample.stalls[job].lost`,
//! the share of the GPU time lost waiting for input; `gantry_gpu::stall` holds the rule), the
//! same interval is charged to that job's allocation on the GPU as measured (`share × time`)
//! and as stalled (`lost × share × time`). A job's stalled share is stalled over measured; the
//! share is clamped to 0–1, so a forged sample cannot make a job lose more than it held.

use crate::db::{Conn, params};

use super::jobs;
use crate::model::*;
use crate::{Result, StoreError};

/// Longest interval one utilisation sample accounts for, ms.
pub const MAX_GAP_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;

/// Cancels every unfinished member of the array `id` belongs to; returns the member `id`.
pub(super) fn cancel_array(c: &dyn Conn, id: JobId, at: i64) -> Result<Job> {
    let job = jobs::require(c, id)?;
    let Some(array) = job.array else {
        return jobs::cancel(c, id, at);
    };
    let filter = JobFilter { array: Some(array.id), ..JobFilter::default() };
    let members: Vec<Job> = jobs::list(c, &filter)?;
    let mut any = false;
    for m in members.iter().filter(|m| !m.state.is_terminal() && m.stop.as_deref() != Some("cancel")) {
        jobs::cancel(c, m.id, at)?;
        any = true;
    }
    if !any {
        return Err(StoreError::Conflict(format!("array {} already ended", array.id)));
    }
    jobs::require(c, id)
}

/// Ends a pending job whose dependency can no longer be met: `cancelled`, with the reason.
pub(super) fn dependency_failed(c: &dyn Conn, id: JobId, reason: &str, at: i64) -> Result<()> {
    let job = jobs::require(c, id)?;
    if job.state != JobState::Pending {
        return Err(StoreError::Conflict(format!("job {id} is {}, not pending", job.state)));
    }
    jobs::transition(c, &job, JobState::Cancelled, Some(reason), at)?;
    super::tokens::event(c, at, "job.dependency_failed", &format!("job/{id}"), reason, Some(&job.team))
}

/// The GPU's utilisation in a heartbeat's sample (the GPU layer's report: `sample.gpu_util_percent`).
fn utilisation(sample: &serde_json::Value) -> Option<f64> {
    let pct = sample.get("sample")?.get("gpu_util_percent")?.as_f64()?;
    pct.is_finite().then(|| pct.clamp(0.0, 100.0))
}

/// The share of the sample's interval `job` lost to data stalls, when the agent judged it.
fn lost(sample: &serde_json::Value, job: i64) -> Option<f64> {
    let lost = sample.get("stalls")?.get(job.to_string())?.get("lost")?.as_f64()?;
    lost.is_finite().then(|| lost.clamp(0.0, 1.0))
}

/// Charges the GPU time used since the GPU's last sample (`last`) to the allocations held on it;
/// returns the new sample time when the sample had a utilisation (the caller stores it).
pub(super) fn record_use(
    c: &dyn Conn,
    gpu: &str,
    sample: Option<&serde_json::Value>,
    last: Option<i64>,
    at: i64,
) -> Result<Option<i64>> {
    let Some(pct) = sample.and_then(utilisation) else {
        return Ok(None);
    };
    let Some(last) = last else {
        return Ok(Some(at));
    };
    let from = last.max(at - MAX_GAP_MS);
    if from >= at {
        return Ok(Some(at.max(last)));
    }
    let held: Vec<(i64, i64, i64, i64)> = c
        .prepare_cached(
            "SELECT id, share_milli, created_at, job_id FROM allocations WHERE gpu_uuid = ?1 AND released_at IS NULL",
        )?
        .query_map(params![gpu], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<Result<_>>()?;
    let sample = sample.unwrap_or(&serde_json::Value::Null);
    for (allocation, share, created, job) in held {
        let lost = lost(sample, job);
        let start = from.max(created);
        let mut t = start;
        while t < at {
            let hour = t.div_euclid(HOUR_MS);
            let end = at.min((hour + 1) * HOUR_MS);
            let held = (end - t) as f64 * share as f64;
            let used = (held * pct / 100.0).round() as i64;
            let measured = if lost.is_some() { held.round() as i64 } else { 0 };
            let stalled = (held * lost.unwrap_or(0.0)).round() as i64;
            c.prepare_cached(
                "INSERT INTO gpu_use (allocation_id, hour, used_milli_ms, measured_milli_ms, stalled_milli_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(allocation_id, hour) DO UPDATE SET \
                 used_milli_ms = gpu_use.used_milli_ms + ?3, measured_milli_ms = gpu_use.measured_milli_ms + ?4, \
                 stalled_milli_ms = gpu_use.stalled_milli_ms + ?5",
            )?
            .execute(params![allocation, hour, used, measured, stalled])?;
            t = end;
        }
    }
    Ok(Some(at))
}

/// A team's (and user's) GPU time used and lost to data stalls, milli-GPU-ms.
type TeamUse = (String, Option<String>, i64, i64);

/// GPU time used and lost to data stalls per team (and user) in the hours starting in
/// `[since, until)`, milli-GPU-ms.
pub(super) fn used(
    c: &dyn Conn,
    since: i64,
    until: i64,
    by_user: bool,
    teams: Option<&str>,
) -> Result<Vec<TeamUse>> {
    let user = if by_user { "j.\"user\"" } else { "NULL" };
    let sql = format!(
        "SELECT j.team, {user}, CAST(SUM(u.used_milli_ms) AS BIGINT), CAST(SUM(u.stalled_milli_ms) AS BIGINT) \
         FROM gpu_use u \
         JOIN allocations a ON a.id = u.allocation_id JOIN jobs j ON j.id = a.job_id \
         WHERE u.hour * {HOUR_MS} >= ?1 AND u.hour * {HOUR_MS} < ?2 \
         AND (j.team IN (SELECT value FROM json_each(?3)) OR ?3 IS NULL) GROUP BY 1, 2"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![since.div_euclid(HOUR_MS) * HOUR_MS, until, teams], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })?;
    rows.collect::<Result<_>>()
}

/// One job's GPU time judged for data stalls and lost to them (every attempt and worker),
/// milli-GPU-ms.
pub(super) fn stall_of_job(c: &dyn Conn, job: i64) -> Result<(i64, i64)> {
    let mut stmt = c.prepare_cached(
        "SELECT CAST(COALESCE(SUM(u.measured_milli_ms), 0) AS BIGINT), CAST(COALESCE(SUM(u.stalled_milli_ms), 0) AS BIGINT) \
         FROM gpu_use u JOIN allocations a ON a.id = u.allocation_id JOIN jobs j ON j.id = a.job_id \
         WHERE j.id = ?1 OR j.gang_id = ?1",
    )?;
    stmt.query_row(params![job], |r| Ok((r.get(0)?, r.get(1)?)))
}

/// GPU time used per job submitted at or after `since`, milli-GPU-ms.
pub(super) fn used_by_job(c: &dyn Conn, since: i64) -> Result<Vec<(i64, i64)>> {
    let mut stmt = c.prepare_cached(
        "SELECT a.job_id, CAST(SUM(u.used_milli_ms) AS BIGINT) FROM gpu_use u \
         JOIN allocations a ON a.id = u.allocation_id JOIN jobs j ON j.id = a.job_id \
         WHERE j.submitted_at >= ?1 GROUP BY 1",
    )?;
    let rows = stmt.query_map(params![since], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect::<Result<_>>()
}

/// Per job holding GPUs now: the GPU time its held allocations were judged for data stalls and
/// lost to them, milli-GPU-ms (jobs never judged are absent).
pub(super) fn stalls_held(c: &dyn Conn) -> Result<Vec<(i64, i64, i64)>> {
    let mut stmt = c.prepare_cached(
        "SELECT a.job_id, CAST(SUM(u.measured_milli_ms) AS BIGINT), CAST(SUM(u.stalled_milli_ms) AS BIGINT) \
         FROM gpu_use u JOIN allocations a ON a.id = u.allocation_id WHERE a.released_at IS NULL \
         GROUP BY 1 HAVING SUM(u.measured_milli_ms) > 0",
    )?;
    let rows = stmt.query_map(params![], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    rows.collect::<Result<_>>()
}
