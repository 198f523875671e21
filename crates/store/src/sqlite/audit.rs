//! Appending to and reading the audit log (the chain itself is in [`crate::audit`]).

use crate::db::{Conn, Dialect, OptionalExtension, params};

use crate::Result;
use crate::audit::{GENESIS, row_hash};
use crate::model::*;

/// Appends one row after the current head, in the caller's transaction; the database moves the
/// head to it (migration 28). On PostgreSQL the head is read locked: replicas appending at
/// once take turns, each after the other's row (unlocked, both would read one head and the
/// database would refuse the second).
pub(super) fn append(c: &dyn Conn, entry: &AuditEntry, outcome: &str) -> Result<()> {
    let head = locked_head(c)?;
    let row = chain(head, [(entry, outcome)]).remove(0);
    c.prepare_cached(
        "INSERT INTO audit (id, at, actor, role, team, action, target, outcome, peer, prev_hash, hash) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        row.id,
        row.at,
        row.actor,
        row.role,
        row.team,
        row.action,
        row.target,
        row.outcome,
        row.peer,
        row.prev_hash,
        row.hash
    ])?;
    Ok(())
}

/// The chain's head (id and hash of its last row; the genesis before any), locked on
/// PostgreSQL until the caller's transaction ends.
pub(crate) fn locked_head(c: &dyn Conn) -> Result<(i64, String)> {
    let lock = match c.dialect() {
        Dialect::Postgres => " FOR UPDATE",
        Dialect::Sqlite => "",
    };
    Ok(c.prepare_cached(&format!("SELECT last_id, last_hash FROM audit_head WHERE one = 1{lock}"))?
        .query_row(params![], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .unwrap_or((0, GENESIS.to_owned())))
}

/// The rows that `entries` (each with its outcome) append after `head`, in order, each
/// linked to the one before it.
pub(crate) fn chain<'a>(
    head: (i64, String),
    entries: impl IntoIterator<Item = (&'a AuditEntry, &'a str)>,
) -> Vec<AuditRecord> {
    let (mut last_id, mut last_hash) = head;
    entries
        .into_iter()
        .map(|(entry, outcome)| {
            let mut row = AuditRecord {
                id: last_id + 1,
                at: entry.at,
                actor: entry.actor.name.clone(),
                role: entry.actor.role.clone(),
                team: entry.actor.team.clone(),
                action: entry.action.clone(),
                target: entry.target.clone(),
                outcome: outcome.to_owned(),
                peer: entry.actor.peer.clone(),
                prev_hash: last_hash.clone(),
                hash: String::new(),
                count: 1,
            };
            row.hash = row_hash(&row.prev_hash, &row);
            (last_id, last_hash) = (row.id, row.hash.clone());
            row
        })
        .collect()
}

/// Records a refusal or a failed change: on the row of the same caller's refusal for the same action and reason
/// within the same minute when there is one (its `count` grows), else as a new row.
pub(super) fn refusal(c: &dyn Conn, entry: &AuditEntry, outcome: &str) -> Result<()> {
    let minute = entry.at - entry.at.rem_euclid(60_000);
    let same: Option<i64> = c
        .prepare_cached(
            "SELECT id FROM audit WHERE actor = ?1 AND action = ?2 AND at >= ?3 AND at < ?3 + 60000 \
             AND role = ?4 AND outcome = ?5 ORDER BY id DESC LIMIT 1",
        )?
        .query_row(params![entry.actor.name, entry.action, minute, entry.actor.role, outcome], |r| r.get(0))
        .optional()?;
    match same {
        Some(id) => {
            c.prepare_cached("UPDATE audit SET count = count + 1 WHERE id = ?1")?.execute(params![id])?;
            Ok(())
        }
        None => append(c, entry, outcome),
    }
}

/// The last row's id and hash.
pub(super) fn head(c: &dyn Conn) -> Result<Option<(i64, String)>> {
    c.prepare_cached("SELECT last_id, last_hash FROM audit_head WHERE one = 1")?
        .query_row(params![], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}

/// Rows with ids above `after`, oldest first, at most `limit`; only those at or after `since`.
pub(super) fn rows(c: &dyn Conn, after: i64, since: Option<i64>, limit: u32) -> Result<Vec<AuditRecord>> {
    let mut stmt = c.prepare_cached(
        "SELECT id, at, actor, role, team, action, target, outcome, peer, prev_hash, hash, count FROM audit \
         WHERE id > ?1 AND (at >= ?2 OR ?2 IS NULL) ORDER BY id LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![after, since, limit], |r| {
        Ok(AuditRecord {
            id: r.get(0)?,
            at: r.get(1)?,
            actor: r.get(2)?,
            role: r.get(3)?,
            team: r.get(4)?,
            action: r.get(5)?,
            target: r.get(6)?,
            outcome: r.get(7)?,
            peer: r.get(8)?,
            prev_hash: r.get(9)?,
            hash: r.get(10)?,
            count: r.get(11)?,
        })
    })?;
    rows.collect::<Result<_>>()
}
