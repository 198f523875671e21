//! Schema migrations for PostgreSQL: `crates/store/migrations/postgres/`, the same numbers as
//! SQLite's (a test holds them to it), each the same change in this dialect. The version is
//! the one row of `gantry_schema`; each migration runs in its own transaction under an advisory
//! lock, so replicas starting together apply each one once.

use crate::Result;
use crate::db::{Conn, OptionalExtension, params};

/// (version, SQL). Append only; never edit a released file.
pub(crate) const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../migrations/postgres/0001_init.sql")),
    (2, include_str!("../../migrations/postgres/0002_identity.sql")),
    (3, include_str!("../../migrations/postgres/0003_job_env.sql")),
    (4, include_str!("../../migrations/postgres/0004_time_limit.sql")),
    (5, include_str!("../../migrations/postgres/0005_job_user.sql")),
    (6, include_str!("../../migrations/postgres/0006_job_attempts.sql")),
    (7, include_str!("../../migrations/postgres/0007_workflow.sql")),
    (8, include_str!("../../migrations/postgres/0008_gangs.sql")),
    (9, include_str!("../../migrations/postgres/0009_elastic.sql")),
    (10, include_str!("../../migrations/postgres/0010_scheduler_changes.sql")),
    (11, include_str!("../../migrations/postgres/0011_job_counts.sql")),
    (12, include_str!("../../migrations/postgres/0012_node_network.sql")),
    (13, include_str!("../../migrations/postgres/0013_quotas.sql")),
    (14, include_str!("../../migrations/postgres/0014_team_priority.sql")),
    (15, include_str!("../../migrations/postgres/0015_job_limits.sql")),
    (16, include_str!("../../migrations/postgres/0016_node_scheduling.sql")),
    (17, include_str!("../../migrations/postgres/0017_services.sql")),
    (18, include_str!("../../migrations/postgres/0018_job_upload.sql")),
    (19, include_str!("../../migrations/postgres/0019_pools.sql")),
    (20, include_str!("../../migrations/postgres/0020_invariants.sql")),
    (21, include_str!("../../migrations/postgres/0021_leader_lease.sql")),
    (22, include_str!("../../migrations/postgres/0022_idle_policies.sql")),
    (23, include_str!("../../migrations/postgres/0023_leader_terms.sql")),
    (24, include_str!("../../migrations/postgres/0024_job_inputs.sql")),
    (25, include_str!("../../migrations/postgres/0025_gpu_loans.sql")),
    (26, include_str!("../../migrations/postgres/0026_public_sources.sql")),
    (27, include_str!("../../migrations/postgres/0027_gpu_stalls.sql")),
    (28, include_str!("../../migrations/postgres/0028_audit_head_moves.sql")),
    (29, include_str!("../../migrations/postgres/0029_job_outputs.sql")),
    (30, include_str!("../../migrations/postgres/0030_service_activity.sql")),
    (31, include_str!("../../migrations/postgres/0031_service_activity_ttft.sql")),
    (32, include_str!("../../migrations/postgres/0032_job_image.sql")),
    (33, include_str!("../../migrations/postgres/0033_team_service_caps.sql")),
    (34, include_str!("../../migrations/postgres/0034_pending_bytes.sql")),
    (35, include_str!("../../migrations/postgres/0035_volumes.sql")),
];

/// An arbitrary key for `pg_advisory_xact_lock`: Gantry's migrations.
pub(crate) const LOCK: i64 = 0x6761_6e74_7279;

pub(super) fn apply(c: &dyn Conn) -> Result<()> {
    for (version, sql) in MIGRATIONS {
        c.batch("BEGIN")?;
        let applied = (|| {
            c.prepare_cached("SELECT pg_advisory_xact_lock(?1)")?.execute(params![LOCK])?;
            c.batch("CREATE TABLE IF NOT EXISTS gantry_schema (one INT PRIMARY KEY CHECK (one = 1), version BIGINT NOT NULL)")?;
            let current: Option<i64> = c
                .prepare_cached("SELECT version FROM gantry_schema WHERE one = 1")?
                .query_row(params![], |r| r.get(0))
                .optional()?;
            if current.unwrap_or(0) >= *version {
                return Ok(false);
            }
            c.batch(sql)?;
            c.prepare_cached(
                "INSERT INTO gantry_schema (one, version) VALUES (1, ?1) \
                 ON CONFLICT (one) DO UPDATE SET version = ?1",
            )?
            .execute(params![version])?;
            Ok(true)
        })();
        match applied {
            Ok(done) => {
                c.batch("COMMIT")?;
                if done {
                    tracing::info!(version, "applied store migration (postgres)");
                }
            }
            Err(e) => {
                let _ = c.batch("ROLLBACK");
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Every migration, inside the caller's open transaction (the copier's: a database it fills
/// in one transaction, so that a failure leaves no schema behind either).
pub(crate) fn apply_in_transaction(c: &dyn Conn) -> Result<()> {
    c.batch("CREATE TABLE gantry_schema (one INT PRIMARY KEY CHECK (one = 1), version BIGINT NOT NULL)")?;
    for (_, sql) in MIGRATIONS {
        c.batch(sql)?;
    }
    let last = MIGRATIONS.last().map_or(0, |(v, _)| *v);
    c.prepare_cached("INSERT INTO gantry_schema (one, version) VALUES (1, ?1)")?.execute(params![last])?;
    Ok(())
}
