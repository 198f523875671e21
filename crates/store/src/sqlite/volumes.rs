//! Volumes: a team's directories that outlive its jobs (`gantry_api::volumes`).

use crate::db::{Conn, OptionalExtension, params};

use super::rows;
use crate::model::*;
use crate::{Result, StoreError};

const COLUMNS: &str = "team, name, path, node, size_bytes, created_at";

fn volume(r: &crate::db::Row) -> Result<Volume> {
    Ok(Volume {
        team: r.get(0)?,
        name: r.get(1)?,
        path: r.get(2)?,
        node: r.get(3)?,
        size_bytes: r.get(4)?,
        created_at: r.get(5)?,
    })
}

/// Creates `v`; `Conflict` when its team has a volume of that name.
pub(super) fn create(c: &dyn Conn, v: &Volume) -> Result<()> {
    let exists: Option<i64> = c
        .prepare_cached("SELECT 1 FROM volumes WHERE team = ?1 AND name = ?2")?
        .query_row(params![v.team, v.name], |r| r.get(0))
        .optional()?;
    if exists.is_some() {
        return Err(StoreError::Conflict(format!("team {} already has a volume {}", v.team, v.name)));
    }
    c.prepare_cached(&format!("INSERT INTO volumes ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"))?
        .execute(params![v.team, v.name, v.path, v.node, v.size_bytes, v.created_at])?;
    Ok(())
}

/// Deletes a volume (its files stay where they are); `NotFound` for an unknown one, `Conflict`
/// while a job that has not ended or a service mounts it.
pub(super) fn delete(c: &dyn Conn, team: &str, name: &str) -> Result<()> {
    let users: Vec<(i64, Option<String>)> = c
        .prepare_cached(
            "SELECT id, volumes FROM jobs WHERE team = ?1 AND volumes IS NOT NULL \
             AND state IN ('pending', 'scheduled', 'running')",
        )?
        .query_map(params![team], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_>>()?;
    for (id, text) in users {
        let mounts: Vec<VolumeMount> =
            text.map(|t| rows::json("volumes", &t)).transpose()?.unwrap_or_default();
        if mounts.iter().any(|m| m.name == name) {
            return Err(StoreError::Conflict(format!(
                "job {id} mounts volume {name}: cancel it or wait for it to end"
            )));
        }
    }
    let teams = [team.to_owned()];
    let services = super::services::list(c, Some(&teams))?;
    if let Some(s) = services.iter().find(|s| s.spec.volumes.iter().any(|m| m.name == name)) {
        return Err(StoreError::Conflict(format!(
            "service {} mounts volume {name}: delete it or apply its file without the volume first",
            s.name
        )));
    }
    let n = c
        .prepare_cached("DELETE FROM volumes WHERE team = ?1 AND name = ?2")?
        .execute(params![team, name])?;
    if n == 0 {
        return Err(StoreError::NotFound(format!("volume {name} of team {team}")));
    }
    Ok(())
}

/// Volumes of `teams` (all when `None`), by team and name.
pub(super) fn list(c: &dyn Conn, teams: Option<&[String]>) -> Result<Vec<Volume>> {
    let teams = teams.map(|t| rows::to_json(&t)).transpose()?;
    let sql = format!(
        "SELECT {COLUMNS} FROM volumes WHERE (team IN (SELECT value FROM json_each(?1)) OR ?1 IS NULL) \
         ORDER BY team, name"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![teams], volume)?;
    rows.collect::<Result<_>>()
}
