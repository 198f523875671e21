//! Services: the file per (team, name), its generations, the count the controller keeps and
//! its decisions; replicas are jobs naming their service.
//!
//! Applying a file whose digest is the service's is `unchanged`; another digest makes it the
//! next generation (`configured`): nothing else happens here, the controller sees replicas of
//! an older generation and replaces them one at a time. Deleting a service cancels its replicas
//! in the same transaction, so no replica outlives its service.

use crate::db::{Conn, OptionalExtension, Row, params};

use super::{jobs, rows};
use crate::model::*;
use crate::{Result, StoreError};

const SERVICE_COLUMNS: &str = "id, team, name, spec, digest, generation, desired, created_at, updated_at";

/// Decisions kept per service; older ones are removed as new ones come.
const KEPT_DECISIONS: i64 = 200;

fn service(r: &Row) -> Result<Service> {
    let spec: String = r.get(3)?;
    Ok(Service {
        id: r.get(0)?,
        team: r.get(1)?,
        name: r.get(2)?,
        spec: rows::json("service file", &spec)?,
        digest: r.get(4)?,
        generation: r.get(5)?,
        desired: r.get(6)?,
        created_at: r.get(7)?,
        updated_at: r.get(8)?,
    })
}

pub(super) fn apply(
    c: &dyn Conn,
    team: &str,
    spec: &ServiceSpec,
    digest: &str,
    desired: u32,
    at: i64,
) -> Result<(ServiceAction, u64)> {
    let subject = format!("service/{team}/{}", spec.name);
    let Some(old) = get(c, team, &spec.name)? else {
        c.prepare_cached(
            "INSERT INTO services (team, name, spec, digest, generation, desired, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?6)",
        )?
        .execute(params![team, spec.name, rows::to_json(spec)?, digest, desired, at])?;
        super::tokens::event(c, at, "service.created", &subject, "service created", Some(team))?;
        return Ok((ServiceAction::Created, 1));
    };
    if old.digest == digest {
        return Ok((ServiceAction::Unchanged, old.generation));
    }
    let generation = old.generation + 1;
    // A new range moves the count into it; otherwise the autoscaler's count stays.
    let r = spec.replicas;
    let kept = old.desired.clamp(r.min, r.max);
    c.prepare_cached(
        "UPDATE services SET spec = ?2, digest = ?3, generation = ?4, desired = ?5, updated_at = ?6 WHERE id = ?1",
    )?
    .execute(params![old.id, rows::to_json(spec)?, digest, generation, kept, at])?;
    let why = format!("generation {generation}: replicas are replaced one at a time");
    super::tokens::event(c, at, "service.configured", &subject, &why, Some(team))?;
    Ok((ServiceAction::Configured, generation))
}

pub(super) fn delete(c: &dyn Conn, team: &str, name: &str, at: i64) -> Result<()> {
    // Held until the deletion commits: a replica being inserted (which holds the row shared)
    // is listed below and stopped, and one inserted after finds no service.
    let lock = match c.dialect() {
        crate::db::Dialect::Postgres => " FOR UPDATE",
        crate::db::Dialect::Sqlite => "",
    };
    let sql = format!("SELECT {SERVICE_COLUMNS} FROM services WHERE team = ?1 AND name = ?2{lock}");
    let Some(old) = c.prepare_cached(&sql)?.query_row(params![team, name], service).optional()? else {
        return Err(StoreError::NotFound(format!("service {name} of team {team}")));
    };
    for r in replicas(c, team, name, 0)? {
        if !r.job.state.is_terminal() && r.job.stop.is_none() {
            stop_replica(c, r.job.id, "its service was deleted", at)?;
        }
    }
    c.prepare_cached("DELETE FROM services WHERE id = ?1")?.execute(params![old.id])?;
    c.prepare_cached("DELETE FROM service_activity WHERE team = ?1 AND service = ?2")?
        .execute(params![team, name])?;
    let subject = format!("service/{team}/{name}");
    super::tokens::event(c, at, "service.deleted", &subject, "service deleted", Some(team))
}

pub(super) fn get(c: &dyn Conn, team: &str, name: &str) -> Result<Option<Service>> {
    let sql = format!("SELECT {SERVICE_COLUMNS} FROM services WHERE team = ?1 AND name = ?2");
    c.prepare_cached(&sql)?.query_row(params![team, name], service).optional()
}

pub(super) fn list(c: &dyn Conn, teams: Option<&[String]>) -> Result<Vec<Service>> {
    let teams = teams.map(|t| rows::to_json(&t)).transpose()?;
    let sql = format!(
        "SELECT {SERVICE_COLUMNS} FROM services WHERE (team IN (SELECT value FROM json_each(?1)) OR ?1 IS NULL) \
         ORDER BY team, name"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![teams], service)?;
    rows.collect::<Result<_>>()
}

/// A service's replicas that have not ended, and the `ended` most recent that have, by id.
pub(super) fn replicas(c: &dyn Conn, team: &str, name: &str, ended: u32) -> Result<Vec<Replica>> {
    let sql = format!(
        "SELECT {}, service_generation FROM jobs WHERE team = ?1 AND service = ?2 AND (\
         state IN ('pending', 'scheduled', 'running') OR id IN (SELECT id FROM jobs WHERE team = ?1 \
         AND service = ?2 AND state NOT IN ('pending', 'scheduled', 'running') ORDER BY id DESC LIMIT ?3)) \
         ORDER BY id",
        rows::JOB_COLUMNS
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let out = stmt.query_map(params![team, name, ended], |r| {
        Ok(Replica {
            job: rows::job(r)?,
            generation: r.get::<_, Option<u64>>(rows::JOB_COLUMN_COUNT)?.unwrap_or(0),
        })
    })?;
    out.collect::<Result<_>>()
}

/// Stops a replica: a pending one is cancelled now, an active one is asked to stop (the agent
/// sends SIGTERM), with `reason` on the job and in an event.
pub(super) fn stop_replica(c: &dyn Conn, id: JobId, reason: &str, at: i64) -> Result<()> {
    let job = jobs::require(c, id)?;
    if job.service.is_none() {
        return Err(StoreError::Conflict(format!("job {id} is not a service replica")));
    }
    match job.state {
        JobState::Pending => jobs::transition(c, &job, JobState::Cancelled, Some(reason), at)?,
        s if s.is_active() && job.stop.is_none() => {
            c.prepare_cached("UPDATE jobs SET stop = 'cancel', reason = ?2 WHERE id = ?1")?
                .execute(params![id, reason])?;
        }
        _ => return Ok(()),
    }
    super::tokens::event(c, at, "service.replica_stopped", &format!("job/{id}"), reason, Some(&job.team))
}

pub(super) fn scale(c: &dyn Conn, id: i64, desired: u32, decision: Option<&ServiceDecision>) -> Result<()> {
    c.prepare_cached("UPDATE services SET desired = ?2 WHERE id = ?1")?.execute(params![id, desired])?;
    if let Some(d) = decision {
        c.prepare_cached(
            "INSERT INTO service_decisions (service_id, at, from_count, to_count, reason) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![id, d.at, d.from, d.to, d.reason])?;
        c.prepare_cached(
            "DELETE FROM service_decisions WHERE service_id = ?1 AND id <= \
             (SELECT id FROM service_decisions WHERE service_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
        )?
        .execute(params![id, KEPT_DECISIONS])?;
    }
    Ok(())
}

/// [`crate::Store::note_service_activity`].
pub(super) fn note_activity(c: &dyn Conn, seen: &[ServiceActivity]) -> Result<()> {
    let mut stmt = c.prepare_cached(
        "INSERT INTO service_activity \
         (team, service, replica, last_request_at, held, in_flight, queue_length, rps, at, ttft_histogram) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT (team, service, replica) DO UPDATE SET \
         last_request_at = CASE WHEN excluded.last_request_at > service_activity.last_request_at \
         THEN excluded.last_request_at ELSE service_activity.last_request_at END, \
         held = excluded.held, in_flight = excluded.in_flight, queue_length = excluded.queue_length, \
         rps = excluded.rps, at = excluded.at, ttft_histogram = excluded.ttft_histogram",
    )?;
    for s in seen {
        let ttft = rows::to_json(&s.ttft_histogram)?;
        stmt.execute(params![
            s.team,
            s.service,
            s.replica,
            s.last_request_at,
            s.held,
            s.in_flight,
            s.queue_length,
            s.rps,
            s.at,
            ttft
        ])?;
    }
    Ok(())
}

/// [`crate::Store::service_activity`].
pub(super) fn activity(c: &dyn Conn) -> Result<Vec<ServiceActivity>> {
    let mut stmt = c.prepare_cached(
        "SELECT team, service, replica, last_request_at, held, in_flight, queue_length, rps, at, \
         ttft_histogram FROM service_activity ORDER BY team, service, replica",
    )?;
    let rows = stmt.query_map(params![], |r| {
        Ok(ServiceActivity {
            team: r.get(0)?,
            service: r.get(1)?,
            replica: r.get(2)?,
            last_request_at: r.get(3)?,
            held: r.get(4)?,
            in_flight: r.get(5)?,
            queue_length: r.get(6)?,
            rps: r.get(7)?,
            at: r.get(8)?,
            ttft_histogram: rows::json("service activity's TTFT histogram", &r.get::<_, String>(9)?)?,
        })
    })?;
    rows.collect::<Result<_>>()
}

/// The last `limit` decisions, newest first.
pub(super) fn decisions(c: &dyn Conn, id: i64, limit: u32) -> Result<Vec<ServiceDecision>> {
    let mut stmt = c.prepare_cached(
        "SELECT at, from_count, to_count, reason FROM service_decisions WHERE service_id = ?1 \
         ORDER BY id DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![id, limit], |r| {
        Ok(ServiceDecision { at: r.get(0)?, from: r.get(1)?, to: r.get(2)?, reason: r.get(3)? })
    })?;
    rows.collect::<Result<_>>()
}
