//! Users, API tokens (hashes only), teams and the event log.

use crate::db::{Conn, OptionalExtension, Row, params};

use super::rows;
use crate::model::*;
use crate::{Result, StoreError};

pub(super) fn create(c: &dyn Conn, t: &NewToken) -> Result<i64> {
    if let Some(user) = &t.user
        && user_role(c, user)?.is_none()
    {
        return Err(StoreError::NotFound(format!("user {user}")));
    }
    let role = if t.kind == TokenKind::Api { "user" } else { "agent" };
    let id: i64 = c.prepare_cached(
        "INSERT INTO tokens (hash, role, team, name, created_at, kind, \"user\", node, expires_at, cert_sha256, service) \
         VALUES (?1, ?2, NULL, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING id",
    )?
    .query_row(params![
        t.hash,
        role,
        t.name,
        t.created_at,
        t.kind.as_str(),
        t.user,
        t.node,
        t.expires_at,
        t.cert_sha256,
        t.service
    ], |r| r.get(0))?;
    let owner = t.user.as_deref().or(t.node.as_deref()).or(t.service.as_deref()).unwrap_or("any node");
    let message = format!("{} token {id} ({}) created for {owner}", t.kind, t.name);
    event(c, t.created_at, "token.created", &format!("token/{id}"), &message, None)?;
    Ok(id)
}

const TOKEN_COLUMNS: &str = "t.id, t.kind, t.\"user\", COALESCE(u.role, 'agent'), t.node, t.name, t.created_at, \
     t.expires_at, t.revoked_at, t.used_at, t.cert_sha256, t.service";

fn token_row(r: &Row) -> Result<TokenRecord> {
    let kind: String = r.get(1)?;
    let role: String = r.get(3)?;
    Ok(TokenRecord {
        id: r.get(0)?,
        kind: rows::parse_enum("token kind", &kind, TokenKind::parse)?,
        user: r.get(2)?,
        role: rows::parse_enum("role", &role, Role::parse)?,
        teams: Vec::new(),
        node: r.get(4)?,
        name: r.get(5)?,
        created_at: r.get(6)?,
        expires_at: r.get(7)?,
        revoked_at: r.get(8)?,
        used_at: r.get(9)?,
        cert_sha256: r.get(10)?,
        service: r.get(11)?,
    })
}

fn with_teams(c: &dyn Conn, mut t: TokenRecord) -> Result<TokenRecord> {
    if let Some(user) = &t.user {
        t.teams = user_teams(c, user)?;
    }
    Ok(t)
}

pub(super) fn by_hash(c: &dyn Conn, hash: &str) -> Result<Option<TokenRecord>> {
    let sql = format!(
        "SELECT {TOKEN_COLUMNS} FROM tokens t LEFT JOIN users u ON u.name = t.\"user\" WHERE t.hash = ?1"
    );
    let row = c.prepare_cached(&sql)?.query_row(params![hash], token_row).optional()?;
    row.map(|t| with_teams(c, t)).transpose()
}

pub(super) fn get(c: &dyn Conn, id: i64) -> Result<Option<TokenRecord>> {
    let sql = format!(
        "SELECT {TOKEN_COLUMNS} FROM tokens t LEFT JOIN users u ON u.name = t.\"user\" WHERE t.id = ?1"
    );
    let row = c.prepare_cached(&sql)?.query_row(params![id], token_row).optional()?;
    row.map(|t| with_teams(c, t)).transpose()
}

/// Refuses a change whose caller's token, read again in the change's transaction, was revoked
/// or expired, or whose user no longer has the role or a team the change was authorised with.
pub(crate) fn still_holds(c: &dyn Conn, credential: &Credential, now: i64) -> Result<()> {
    let refused = |why: &str| {
        Err(StoreError::CredentialChanged(format!(
            "your token {why} since this request was authorised; nothing was changed"
        )))
    };
    let Some(token) = get(c, credential.token_id)? else {
        return refused("was deleted");
    };
    if token.revoked_at.is_some() {
        return refused("was revoked");
    }
    if token.expires_at.is_some_and(|t| t <= now) {
        return refused("expired");
    }
    if token.role != credential.role {
        return refused(&format!("lost its role ({} now)", token.role));
    }
    if let Some(team) = credential.teams.iter().find(|t| !token.teams.contains(t)) {
        return refused(&format!("lost team {team}"));
    }
    Ok(())
}

/// Tokens, newest first; only `user`'s when given.
pub(super) fn list(c: &dyn Conn, user: Option<&str>) -> Result<Vec<TokenRecord>> {
    let sql = format!(
        "SELECT {TOKEN_COLUMNS} FROM tokens t LEFT JOIN users u ON u.name = t.\"user\" \
         WHERE (t.\"user\" = ?1 OR ?1 IS NULL) ORDER BY t.id DESC"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![user], token_row)?.collect::<Result<Vec<_>>>()?;
    rows.into_iter().map(|t| with_teams(c, t)).collect()
}

/// The invoke tokens of the services of `teams` (their key is `team/service`).
pub(super) fn invoke_tokens(c: &dyn Conn, teams: &[String]) -> Result<Vec<TokenRecord>> {
    let sql = format!(
        "SELECT {TOKEN_COLUMNS} FROM tokens t LEFT JOIN users u ON u.name = t.\"user\" \
         WHERE t.kind = 'invoke' AND EXISTS (SELECT 1 FROM json_each(?1) j WHERE t.service LIKE j.value || '/%') \
         ORDER BY t.id DESC"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows =
        stmt.query_map(params![super::rows::to_json(&teams)?], token_row)?.collect::<Result<Vec<_>>>()?;
    rows.into_iter().map(|t| with_teams(c, t)).collect()
}

/// Revokes `user`'s invoke tokens of services of teams they no longer act for (a member of
/// the service's team, or an admin), in the transaction that changed them.
fn revoke_stale_invoke_tokens(c: &dyn Conn, user: &User, at: i64) -> Result<()> {
    let held: Vec<(i64, Option<String>)> = c
        .prepare_cached(
            "SELECT id, service FROM tokens WHERE kind = 'invoke' AND \"user\" = ?1 AND revoked_at IS NULL",
        )?
        .query_map(params![&user.name], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_>>()?;
    for (id, service) in held {
        let team = service.as_deref().and_then(|s| s.split_once('/')).map(|(t, _)| t.to_owned());
        let keeps = match user.role {
            Role::Admin => true,
            Role::Member => team.is_some_and(|t| user.teams.contains(&t)),
            _ => false,
        };
        if !keeps {
            c.prepare_cached("UPDATE tokens SET revoked_at = ?2 WHERE id = ?1")?.execute(params![id, at])?;
            let message =
                format!("invoke token {id} revoked: {} no longer acts for its service's team", user.name);
            event(c, at, "token.revoked", &format!("token/{id}"), &message, None)?;
        }
    }
    Ok(())
}

/// Number of usable admin tokens at `now`.
pub(super) fn admin_count(c: &dyn Conn, now: i64) -> Result<u64> {
    c.prepare_cached(
        "SELECT COUNT(*) FROM tokens t JOIN users u ON u.name = t.\"user\" WHERE u.role = 'admin' \
         AND t.kind = 'api' AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > ?1)",
    )?
    .query_row(params![now], |r| r.get(0))
}

pub(super) fn revoke(c: &dyn Conn, id: i64, at: i64) -> Result<()> {
    let changed = c
        .prepare_cached("UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1")?
        .execute(params![id, at])?;
    if changed == 0 {
        return Err(StoreError::NotFound(format!("token {id}")));
    }
    event(c, at, "token.revoked", &format!("token/{id}"), &format!("token {id} revoked"), None)
}

/// Trades an unused join token for a node credential, in one transaction.
pub(super) fn join(c: &dyn Conn, join_id: i64, credential: &NewToken) -> Result<i64> {
    let Some(node) = credential.node.as_deref() else {
        return Err(StoreError::Conflict("a node credential names its node".into()));
    };
    let used = c
        .prepare_cached("UPDATE tokens SET used_at = ?2 WHERE id = ?1 AND kind = 'join' AND used_at IS NULL")?
        .execute(params![join_id, credential.created_at])?;
    if used == 0 {
        return Err(StoreError::Conflict(format!("join token {join_id} was already used")));
    }
    // A node joins once: its earlier credentials stop working.
    c.prepare_cached(
        "UPDATE tokens SET revoked_at = ?2 WHERE kind = 'node' AND node = ?1 AND revoked_at IS NULL",
    )?
    .execute(params![node, credential.created_at])?;
    create(c, credential)
}

fn user_role(c: &dyn Conn, name: &str) -> Result<Option<Role>> {
    let role: Option<String> = c
        .prepare_cached("SELECT role FROM users WHERE name = ?1")?
        .query_row(params![name], |r| r.get(0))
        .optional()?;
    role.map(|r| rows::parse_enum("role", &r, Role::parse)).transpose()
}

fn user_teams(c: &dyn Conn, name: &str) -> Result<Vec<String>> {
    let mut stmt = c.prepare_cached("SELECT team FROM user_teams WHERE \"user\" = ?1 ORDER BY team")?;
    stmt.query_map(params![name], |r| r.get(0))?.collect::<Result<_>>()
}

/// Creates or replaces a user (its role and its whole team list).
pub(super) fn set_user(c: &dyn Conn, user: &User, at: i64) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO users (name, role, created_at) VALUES (?1, ?2, ?3) ON CONFLICT(name) DO UPDATE SET role = ?2",
    )?
    .execute(params![user.name, user.role.as_str(), at])?;
    c.prepare_cached("DELETE FROM user_teams WHERE \"user\" = ?1")?.execute(params![&user.name])?;
    for team in &user.teams {
        c.prepare_cached("INSERT INTO user_teams (\"user\", team) VALUES (?1, ?2) ON CONFLICT DO NOTHING")?
            .execute(params![&user.name, team])?;
    }
    revoke_stale_invoke_tokens(c, user, at)
}

pub(super) fn user(c: &dyn Conn, name: &str) -> Result<Option<User>> {
    let Some(role) = user_role(c, name)? else { return Ok(None) };
    Ok(Some(User { name: name.to_owned(), role, teams: user_teams(c, name)? }))
}

pub(super) fn users(c: &dyn Conn) -> Result<Vec<User>> {
    let names: Vec<String> = c
        .prepare_cached("SELECT name FROM users ORDER BY name")?
        .query_map(params![], |r| r.get(0))?
        .collect::<Result<_>>()?;
    names.iter().filter_map(|n| user(c, n).transpose()).collect()
}

pub(super) fn set_team(c: &dyn Conn, team: &Team) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO teams (name, gpu_quota, log_quota_bytes, pending_limit, max_priority, preempt_other_teams, \
         pids_limit, max_services, max_replicas, pending_bytes_limit) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
         ON CONFLICT(name) DO UPDATE SET gpu_quota = ?2, \
         log_quota_bytes = COALESCE(?3, teams.log_quota_bytes), pending_limit = COALESCE(?4, teams.pending_limit), \
         max_priority = COALESCE(?5, teams.max_priority), \
         preempt_other_teams = COALESCE(?6, teams.preempt_other_teams), \
         pids_limit = ?7, max_services = COALESCE(?8, teams.max_services), \
         max_replicas = COALESCE(?9, teams.max_replicas), \
         pending_bytes_limit = COALESCE(?10, teams.pending_bytes_limit)",
    )?
    .execute(params![
        team.name,
        team.gpu_quota,
        team.log_quota_bytes,
        team.pending_limit,
        team.max_priority,
        team.preempt_other_teams,
        team.pids_limit,
        team.max_services,
        team.max_replicas,
        team.pending_bytes_limit
    ])?;
    Ok(())
}

pub(super) fn teams(c: &dyn Conn) -> Result<Vec<Team>> {
    let mut stmt = c.prepare_cached(
        "SELECT name, gpu_quota, log_quota_bytes, pending_limit, max_priority, preempt_other_teams, pids_limit, \
             max_services, max_replicas, pending_bytes_limit FROM teams ORDER BY name",
    )?;
    let rows = stmt.query_map(params![], |r| {
        Ok(Team {
            name: r.get(0)?,
            gpu_quota: r.get(1)?,
            log_quota_bytes: r.get(2)?,
            pending_limit: r.get(3)?,
            max_priority: r.get(4)?,
            preempt_other_teams: r.get(5)?,
            pids_limit: r.get(6)?,
            max_services: r.get(7)?,
            max_replicas: r.get(8)?,
            pending_bytes_limit: r.get(9)?,
        })
    })?;
    rows.collect::<Result<_>>()
}

pub(super) fn event(
    c: &dyn Conn,
    at: i64,
    kind: &str,
    subject: &str,
    message: &str,
    team: Option<&str>,
) -> Result<()> {
    c.prepare_cached("INSERT INTO events (at, kind, subject, message, team) VALUES (?1, ?2, ?3, ?4, ?5)")?
        .execute(params![at, kind, subject, message, team])?;
    Ok(())
}

/// Events newest first, before the id `before` when given; only those of `teams` when given.
pub(super) fn events(c: &dyn Conn, filter: &EventFilter) -> Result<Vec<Event>> {
    let teams = filter.teams.as_ref().map(rows::to_json).transpose()?;
    let mut stmt = c.prepare_cached(
        "SELECT id, at, kind, subject, message, team FROM events WHERE (id < ?2 OR ?2 IS NULL) \
         AND (team IN (SELECT value FROM json_each(?3)) OR ?3 IS NULL) AND (at >= ?4 OR ?4 IS NULL) \
         AND (id > ?5 OR ?5 IS NULL) AND (subject = ?6 OR ?6 IS NULL) ORDER BY id DESC LIMIT ?1",
    )?;
    let args = params![filter.limit, filter.before, teams, filter.since, filter.after, filter.subject];
    let rows = stmt.query_map(args, |r| {
        Ok(Event {
            id: r.get(0)?,
            at: r.get(1)?,
            kind: r.get(2)?,
            subject: r.get(3)?,
            message: r.get(4)?,
            team: r.get(5)?,
        })
    })?;
    rows.collect::<Result<_>>()
}
