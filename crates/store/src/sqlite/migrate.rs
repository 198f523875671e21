//! Schema migrations: SQL files under `crates/store/migrations/`, applied in order, tracked in
//! SQLite's `user_version`.

use rusqlite::Connection;

use crate::Result;

/// (version, SQL). Append only; never edit a released file.
const MIGRATIONS: &[(i64, &str)] = &[(1, include_str!("../../migrations/0001_init.sql"))];

/// Applies every migration newer than the database's version, each in its own transaction.
pub(super) fn apply(conn: &mut Connection) -> Result<()> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
        tracing::info!(version, "applied store migration");
    }
    Ok(())
}
