//! The scheduler's change log (migration 0010): what changed after a position, so that the
//! scheduler reads only that instead of every pending job on every pass.

use crate::db::{Conn, params};

use super::rows::{self, ALLOCATION_COLUMNS, JOB_COLUMNS};
use crate::Result;
use crate::model::{JobId, SchedulerChanges};

pub(super) fn position(c: &dyn Conn) -> Result<i64> {
    c.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM scheduler_changes")?
        .query_row(params![], |r| r.get(0))
}

/// `None` when the log no longer reaches back to `after` (pruned) or holds more than `limit`
/// changes after it: the caller reloads everything instead.
pub(super) fn changes(c: &dyn Conn, after: i64, limit: u32) -> Result<Option<SchedulerChanges>> {
    let mut stmt =
        c.prepare_cached("SELECT seq, job_id FROM scheduler_changes WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
    let read = stmt.query_map(params![after, i64::from(limit) + 1], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, Option<JobId>>(1)?))
    })?;
    let read: Vec<(i64, Option<JobId>)> = read.collect::<Result<_>>()?;
    let Some(&(first, _)) = read.first() else {
        // Nothing after `after`, unless `after` lies beyond the log (another database).
        return Ok(
            (position(c)? == after).then(|| SchedulerChanges { position: after, ..Default::default() })
        );
    };
    if first != after + 1 || read.len() > limit as usize {
        return Ok(None);
    }
    let position = read.last().map_or(after, |(seq, _)| *seq);
    let cluster = read.iter().any(|(_, job)| job.is_none());
    let mut ids: Vec<JobId> = read.into_iter().filter_map(|(_, job)| job).collect();
    ids.sort_unstable();
    ids.dedup();
    let ids_json = rows::to_json(&ids)?;
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE id IN (SELECT CAST(value AS BIGINT) FROM json_each(?1)) ORDER BY id"
    );
    let jobs = c.prepare_cached(&sql)?.query_map(params![&ids_json], rows::job)?.collect::<Result<_>>()?;
    let sql = format!(
        "SELECT {ALLOCATION_COLUMNS} FROM allocations WHERE released_at IS NULL \
         AND job_id IN (SELECT CAST(value AS BIGINT) FROM json_each(?1)) ORDER BY id"
    );
    let held =
        c.prepare_cached(&sql)?.query_map(params![&ids_json], rows::allocation)?.collect::<Result<_>>()?;
    Ok(Some(SchedulerChanges { position, cluster, changed: ids, jobs, held }))
}
