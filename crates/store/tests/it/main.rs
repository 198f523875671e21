//! The store's suite on SQLite. `tests/postgres/main.rs` runs the same files (all but
//! `sqlite.rs`: upgrades of old SQLite files, file modes) on PostgreSQL.

mod audit;
mod elastic;
mod gangs;
mod helpers;
mod invariants;
mod jobs;
mod leader;
mod nodes;
mod props;
mod sqlite;
mod workflow;

pub use helpers::*;

use gantry_store::*;

/// What keeps a test's store: its directory.
pub type Fixture = tempfile::TempDir;

/// A fresh store.
pub fn open() -> (Fixture, Box<dyn Store>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path()).expect("open store");
    (dir, Box::new(store))
}

/// The same store opened again (after the test dropped it).
pub fn reopen(dir: &Fixture) -> Box<dyn Store> {
    Box::new(SqliteStore::open(dir.path()).expect("reopen store"))
}

/// Runs SQL on the store's database behind its back.
pub fn raw(dir: &Fixture, sql: &str) -> std::result::Result<(), String> {
    let c = rusqlite::Connection::open(dir.path().join("gantry.db")).map_err(|e| e.to_string())?;
    c.execute_batch(sql).map_err(|e| e.to_string())
}
