//! API tokens (hashes only), teams and the event log.

use rusqlite::{Connection, OptionalExtension, params};

use super::rows;
use crate::Result;
use crate::model::*;

pub(super) fn create(
    c: &Connection,
    hash: &str,
    role: Role,
    team: Option<&str>,
    name: &str,
    at: i64,
) -> Result<i64> {
    c.prepare_cached("INSERT INTO tokens (hash, role, team, name, created_at) VALUES (?1, ?2, ?3, ?4, ?5)")?
        .execute(params![hash, role.as_str(), team, name, at])?;
    let id = c.last_insert_rowid();
    event(c, at, "token.created", name, &format!("{role} token {id} created"))?;
    Ok(id)
}

pub(super) fn by_hash(c: &Connection, hash: &str) -> Result<Option<TokenRecord>> {
    let row = c
        .prepare_cached("SELECT id, role, team, name FROM tokens WHERE hash = ?1")?
        .query_row([hash], |r| {
            let role: String = r.get(1)?;
            Ok(TokenRecord {
                id: r.get(0)?,
                role: rows::parse_enum("role", &role, Role::parse)?,
                team: r.get(2)?,
                name: r.get(3)?,
            })
        })
        .optional()?;
    Ok(row)
}

pub(super) fn count(c: &Connection, role: Role) -> Result<u64> {
    Ok(c.prepare_cached("SELECT COUNT(*) FROM tokens WHERE role = ?1")?
        .query_row([role.as_str()], |r| r.get(0))?)
}

pub(super) fn set_team(c: &Connection, team: &Team) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO teams (name, gpu_quota) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET gpu_quota = ?2",
    )?
    .execute(params![team.name, team.gpu_quota])?;
    Ok(())
}

pub(super) fn teams(c: &Connection) -> Result<Vec<Team>> {
    let mut stmt = c.prepare_cached("SELECT name, gpu_quota FROM teams ORDER BY name")?;
    let rows = stmt.query_map([], |r| Ok(Team { name: r.get(0)?, gpu_quota: r.get(1)? }))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn event(c: &Connection, at: i64, kind: &str, subject: &str, message: &str) -> Result<()> {
    c.prepare_cached("INSERT INTO events (at, kind, subject, message) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![at, kind, subject, message])?;
    Ok(())
}

pub(super) fn events(c: &Connection, limit: u32) -> Result<Vec<Event>> {
    let mut stmt =
        c.prepare_cached("SELECT id, at, kind, subject, message FROM events ORDER BY id DESC LIMIT ?1")?;
    let rows = stmt.query_map([limit], |r| {
        Ok(Event { id: r.get(0)?, at: r.get(1)?, kind: r.get(2)?, subject: r.get(3)?, message: r.get(4)? })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
