//! The store's suite on SQLite. `tests/postgres/main.rs` runs the same files (all but
//! `sqlite.rs`: upgrades of old SQLite files, file modes) on PostgreSQL.

mod audit;
mod bulk;
mod elastic;
mod gangs;
mod helpers;
mod idle;
mod inputs;
mod invariants;
mod jobs;
mod leader;
mod nodes;
mod outputs;
mod props;
mod services;
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

#[test]
fn a_jobs_upload_and_chdir_are_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path()).expect("store");
    let upload =
        gantry_api::upload::Upload { digest: format!("sha256:{}", "a".repeat(64)), files: 2, bytes: 57 };
    let spec = SubmitRequest {
        command: vec!["true".into()],
        upload: Some(upload.clone()),
        max_retries: Some(0),
        ..SubmitRequest::default()
    };
    let job = NewJob { spec, team: "vision".into(), name: "j".into(), ..NewJob::default() };
    let (id, _) = store.submit(&job).expect("submitted");
    let kept = store.job(id).expect("read").expect("there");
    assert_eq!((kept.upload, kept.chdir), (Some(upload), None));
    let spec = SubmitRequest {
        command: vec!["pwd".into()],
        chdir: Some("/shared".into()),
        ..SubmitRequest::default()
    };
    let (id, _) =
        store.submit(&NewJob { spec, team: "vision".into(), ..NewJob::default() }).expect("submitted");
    assert_eq!(store.job(id).expect("read").expect("there").chdir.as_deref(), Some("/shared"));
}
