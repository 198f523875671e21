//! Node pools' settings: placement and the teams that may use them (`gantry pool set`).

use super::{rows, tokens};
use crate::Result;
use crate::db::{Conn, params};
use crate::model::{Pool, PoolPlacement};

/// Creates or replaces a pool's settings.
pub(super) fn set(c: &dyn Conn, pool: &Pool, at: i64) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO pools (name, placement, teams, updated_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT(name) DO UPDATE SET placement = ?2, teams = ?3, updated_at = ?4",
    )?
    .execute(params![pool.name, pool.placement.as_str(), rows::to_json(&pool.teams)?, at])?;
    let teams = if pool.teams.is_empty() { "every team".to_owned() } else { pool.teams.join(", ") };
    let message = format!("pool {} places by {} for {teams}", pool.name, pool.placement);
    tokens::event(c, at, "pool.set", &format!("pool/{}", pool.name), &message, None)
}

/// Every pool an admin set, by name.
pub(super) fn list(c: &dyn Conn) -> Result<Vec<Pool>> {
    let mut stmt = c.prepare_cached("SELECT name, placement, teams FROM pools ORDER BY name")?;
    let rows = stmt.query_map(params![], |r| {
        let placement: String = r.get(1)?;
        let teams: String = r.get(2)?;
        Ok(Pool {
            name: r.get(0)?,
            placement: rows::parse_enum("pool placement", &placement, PoolPlacement::parse)?,
            teams: rows::json("pool teams", &teams)?,
        })
    })?;
    rows.collect::<Result<_>>()
}
