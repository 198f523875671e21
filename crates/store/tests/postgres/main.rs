//! The store's suite on PostgreSQL: the files of `tests/it` (but its `sqlite.rs`), each test on a
//! fresh database of one throwaway server ([`harness`]).

#[path = "../it/audit.rs"]
mod audit;
#[path = "../it/bulk.rs"]
mod bulk;
mod copy;
#[path = "../it/elastic.rs"]
mod elastic;
#[path = "../it/gangs.rs"]
mod gangs;
pub mod harness;
#[path = "../it/helpers.rs"]
mod helpers;
#[path = "../it/idle.rs"]
mod idle;
#[path = "../it/inputs.rs"]
mod inputs;
#[path = "../it/invariants.rs"]
mod invariants;
#[path = "../it/jobs.rs"]
mod jobs;
#[path = "../it/leader.rs"]
mod leader;
#[path = "../it/nodes.rs"]
mod nodes;
#[path = "../it/outputs.rs"]
mod outputs;
mod postgres;
#[path = "../it/props.rs"]
mod props;
#[path = "../it/services.rs"]
mod services;
mod tls;
#[path = "../it/workflow.rs"]
mod workflow;

pub use helpers::*;

use gantry_store::*;

/// What a test's store lives in.
#[derive(Debug)]
pub enum Fixture {
    /// A database of the throwaway server.
    Postgres(String),
    /// A directory: PostgreSQL was skipped (`GANTRY_TEST_NO_POSTGRES`), so the test runs on
    /// SQLite and still checks something.
    Skipped(tempfile::TempDir),
}

/// A fresh store on a fresh database.
pub fn open() -> (Fixture, Box<dyn Store>) {
    let Some(server) = harness::shared() else {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open(dir.path()).expect("open store");
        return (Fixture::Skipped(dir), Box::new(store));
    };
    let url = server.create_database();
    let store = PgStore::open(&url).expect("open store");
    (Fixture::Postgres(url), Box::new(store))
}

/// The same store opened again (after the test dropped it).
pub fn reopen(f: &Fixture) -> Box<dyn Store> {
    match f {
        Fixture::Postgres(url) => Box::new(PgStore::open(url).expect("reopen store")),
        Fixture::Skipped(dir) => Box::new(SqliteStore::open(dir.path()).expect("reopen store")),
    }
}

/// Runs SQL on the store's database behind its back.
pub fn raw(f: &Fixture, sql: &str) -> std::result::Result<(), String> {
    match f {
        Fixture::Postgres(url) => harness::shared().ok_or("no postgres")?.psql(url, sql).map(drop),
        Fixture::Skipped(dir) => {
            let c = rusqlite::Connection::open(dir.path().join("gantry.db")).map_err(|e| e.to_string())?;
            c.execute_batch(sql).map_err(|e| e.to_string())
        }
    }
}
