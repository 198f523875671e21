//! Schema migrations: SQL files under `crates/store/migrations/`, applied in order, tracked in
//! SQLite's `user_version`.

use rusqlite::Connection;

use crate::{Result, StoreError};

/// (version, SQL). Append only; never edit a released file.
pub(crate) const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../migrations/0001_init.sql")),
    (2, include_str!("../../migrations/0002_identity.sql")),
    (3, include_str!("../../migrations/0003_job_env.sql")),
    (4, include_str!("../../migrations/0004_time_limit.sql")),
    (5, include_str!("../../migrations/0005_job_user.sql")),
    (6, include_str!("../../migrations/0006_job_attempts.sql")),
    (7, include_str!("../../migrations/0007_workflow.sql")),
    (8, include_str!("../../migrations/0008_gangs.sql")),
    (9, include_str!("../../migrations/0009_elastic.sql")),
    (10, include_str!("../../migrations/0010_scheduler_changes.sql")),
    (11, include_str!("../../migrations/0011_job_counts.sql")),
    (12, include_str!("../../migrations/0012_node_network.sql")),
    (13, include_str!("../../migrations/0013_quotas.sql")),
    (14, include_str!("../../migrations/0014_team_priority.sql")),
    (15, include_str!("../../migrations/0015_job_limits.sql")),
    (16, include_str!("../../migrations/0016_node_scheduling.sql")),
    (17, include_str!("../../migrations/0017_services.sql")),
    (18, include_str!("../../migrations/0018_job_upload.sql")),
    (19, include_str!("../../migrations/0019_pools.sql")),
    (20, include_str!("../../migrations/0020_invariants.sql")),
    (21, include_str!("../../migrations/0021_leader_lease.sql")),
    (22, include_str!("../../migrations/0022_idle_policies.sql")),
    (23, include_str!("../../migrations/0023_leader_terms.sql")),
    (24, include_str!("../../migrations/0024_job_inputs.sql")),
    (25, include_str!("../../migrations/0025_gpu_loans.sql")),
    (26, include_str!("../../migrations/0026_public_sources.sql")),
    (27, include_str!("../../migrations/0027_gpu_stalls.sql")),
    (28, include_str!("../../migrations/0028_audit_head_moves.sql")),
    (29, include_str!("../../migrations/0029_job_outputs.sql")),
    (30, include_str!("../../migrations/0030_service_activity.sql")),
    (31, include_str!("../../migrations/0031_service_activity_ttft.sql")),
    (32, include_str!("../../migrations/0032_job_image.sql")),
    (33, include_str!("../../migrations/0033_team_service_caps.sql")),
    (34, include_str!("../../migrations/0034_pending_bytes.sql")),
    (35, include_str!("../../migrations/0035_volumes.sql")),
];

/// Applies every migration newer than the database's version, each in its own transaction.
/// Foreign keys are off while they run (SQLite can only rebuild a referenced table that way,
/// and the pragma is a no-op inside a transaction); each migration must leave none dangling.
pub(super) fn apply(conn: &mut Connection) -> Result<()> {
    apply_up_to(conn, i64::MAX)
}

/// [`apply`], stopping after version `last` (tests build an older schema with it).
pub(super) fn apply_up_to(conn: &mut Connection, last: i64) -> Result<()> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    let mut pending = MIGRATIONS.iter().filter(|(v, _)| *v > current && *v <= last);
    let result = pending.try_for_each(|(version, sql)| {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        let dangling: i64 =
            tx.query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| r.get(0))?;
        if dangling > 0 {
            return Err(StoreError::Corrupt(format!(
                "migration {version} left {dangling} dangling references"
            )));
        }
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
        tracing::info!(version, "applied store migration");
        Ok(())
    });
    conn.pragma_update(None, "foreign_keys", "ON")?;
    result
}

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    /// The numbers in a migrations directory, from the file names (`0007_workflow.sql`).
    fn numbers_in(dir: &str) -> Vec<i64> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut found: Vec<i64> = std::fs::read_dir(&path)
            .expect("migrations directory")
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".sql")?.split('_').next()?.parse().ok()
            })
            .collect();
        found.sort_unstable();
        found
    }

    #[test]
    fn both_dialects_have_the_same_numbered_migrations_and_apply_every_file() {
        let sqlite: Vec<i64> = MIGRATIONS.iter().map(|(v, _)| *v).collect();
        let postgres: Vec<i64> = crate::postgres::migrate::MIGRATIONS.iter().map(|(v, _)| *v).collect();
        assert_eq!(sqlite, (1..=sqlite.len() as i64).collect::<Vec<_>>(), "numbered 1, 2, … without gaps");
        assert_eq!(postgres, sqlite, "every SQLite migration has its PostgreSQL twin, and no other");
        assert_eq!(numbers_in("migrations"), sqlite, "every SQLite file is applied");
        assert_eq!(numbers_in("migrations/postgres"), sqlite, "every PostgreSQL file is applied");
    }
}
