//! The leader's lease (migration 18) and the fence on the leader's writes.
//!
//! A campaign runs in the writer's transaction: it reads the lease row (locked on PostgreSQL,
//! so campaigns and fenced writes take turns), renews it for its holder, takes it over once it
//! lapsed (the epoch + 1: a new election), or leaves it to its living holder. A fenced write
//! first reads the row for its holder and epoch (locked for share on PostgreSQL: an election
//! waits until the write committed, so the new leader sees it) and is refused if the row no
//! longer says so. Time is the caller's clock: replicas' clocks must agree to well within the
//! lease; a skewed clock can only end a lease early or late, never let two leaders commit, as
//! the epoch decides.

use crate::db::{Conn, Dialect, OptionalExtension, params};
use crate::model::{Fence, LeadershipHistory, Lease, PlacedAttempt, Term};
use crate::{Result, StoreError};

fn lock(c: &dyn Conn, mode: &str) -> &'static str {
    match (c.dialect(), mode) {
        (Dialect::Postgres, "update") => " FOR UPDATE",
        (Dialect::Postgres, _) => " FOR SHARE",
        (Dialect::Sqlite, _) => "",
    }
}

pub(super) fn campaign(c: &dyn Conn, holder: &str, ttl_ms: i64, at: i64) -> Result<Lease> {
    let expires_at = at.saturating_add(ttl_ms);
    c.prepare_cached(
        "INSERT INTO leader_lease (one, holder, epoch, expires_at) VALUES (1, ?1, 0, ?2) ON CONFLICT (one) DO NOTHING",
    )?
    .execute(params![holder, i64::MIN])?;
    let sql =
        format!("SELECT holder, epoch, expires_at FROM leader_lease WHERE one = 1{}", lock(c, "update"));
    let (current, epoch, until): (String, u64, i64) =
        c.prepare_cached(&sql)?.query_row(params![], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    if current != holder && until >= at {
        return Ok(Lease { holder: current, epoch, expires_at: until, leader: false });
    }
    // Renewing a living lease keeps its epoch; anything else is an election.
    let epoch = if current == holder && until >= at { epoch } else { epoch + 1 };
    c.prepare_cached("UPDATE leader_lease SET holder = ?1, epoch = ?2, expires_at = ?3 WHERE one = 1")?
        .execute(params![holder, epoch, expires_at])?;
    if !(current == holder && until >= at) {
        let sql = format!(
            "INSERT INTO leader_terms (epoch, holder, elected_at) VALUES (?1, ?2, {}) ON CONFLICT (epoch) DO NOTHING",
            db_now(c)
        );
        c.prepare_cached(&sql)?.execute(params![epoch, holder])?;
    }
    Ok(Lease { holder: holder.to_owned(), epoch, expires_at, leader: true })
}

/// The lease as it is (`None` before the first campaign).
pub(super) fn current(c: &dyn Conn) -> Result<Option<Lease>> {
    c.prepare_cached("SELECT holder, epoch, expires_at FROM leader_lease WHERE one = 1 AND epoch > 0")?
        .query_row(params![], |r| {
            Ok(Lease { holder: r.get(0)?, epoch: r.get(1)?, expires_at: r.get(2)?, leader: false })
        })
        .optional()
}

/// The database's clock in ms, read when the statement runs (PostgreSQL's `now()` would be the
/// transaction's start, before the lease row was locked).
fn db_now(c: &dyn Conn) -> &'static str {
    match c.dialect() {
        Dialect::Postgres => "CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS BIGINT)",
        Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
    }
}

/// Stamps the current attempt of each of `jobs`, just placed in this transaction after the
/// fence check, with the epoch it was checked against and the database's clock: the history
/// the failover checker reads ([`LeadershipHistory`]).
pub(super) fn stamp(c: &dyn Conn, fence: &Fence, jobs: &[i64]) -> Result<()> {
    let epoch = match fence {
        Fence::Leader { epoch, .. } => Some(*epoch),
        Fence::Unfenced | Fence::Follower => None,
    };
    let sql = format!(
        "UPDATE job_attempts SET leader_epoch = ?2, recorded_at = {} \
         WHERE job_id = ?1 AND attempt = (SELECT attempt FROM jobs WHERE id = ?1)",
        db_now(c)
    );
    let mut stmt = c.prepare_cached(&sql)?;
    for id in jobs {
        stmt.execute(params![id, epoch])?;
    }
    Ok(())
}

/// Every election and every attempt's placement epoch.
pub(super) fn history(c: &dyn Conn) -> Result<LeadershipHistory> {
    let terms = c
        .prepare_cached("SELECT epoch, holder, elected_at FROM leader_terms ORDER BY epoch")?
        .query_map(params![], |r| Ok(Term { epoch: r.get(0)?, holder: r.get(1)?, elected_at: r.get(2)? }))?
        .collect::<Result<Vec<_>>>()?;
    let placements = c
        .prepare_cached(
            "SELECT job_id, attempt, leader_epoch, recorded_at FROM job_attempts ORDER BY job_id, attempt",
        )?
        .query_map(params![], |r| {
            Ok(PlacedAttempt {
                job_id: r.get(0)?,
                attempt: r.get(1)?,
                leader_epoch: r.get(2)?,
                recorded_at: r.get(3)?,
            })
        })?
        .collect::<Result<Vec<_>>>()?;
    Ok(LeadershipHistory { terms, placements })
}

/// Refuses, in the caller's transaction, a leader's write that the lease no longer allows.
pub(super) fn check(c: &dyn Conn, fence: &Fence) -> Result<()> {
    let (holder, epoch) = match fence {
        Fence::Unfenced => return Ok(()),
        Fence::Follower => return Err(StoreError::Fenced("this replica does not lead".into())),
        Fence::Leader { holder, epoch } => (holder, *epoch),
    };
    let sql = format!(
        "SELECT epoch FROM leader_lease WHERE one = 1 AND holder = ?1 AND epoch = ?2{}",
        lock(c, "share")
    );
    let found: Option<u64> =
        c.prepare_cached(&sql)?.query_row(params![holder, epoch], |r| r.get(0)).optional()?;
    found.map(drop).ok_or_else(|| {
        StoreError::Fenced(format!(
            "{holder} no longer leads under epoch {epoch}: another replica was elected"
        ))
    })
}
