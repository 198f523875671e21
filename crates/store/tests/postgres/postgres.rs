//! What only the PostgreSQL store has: connections that come back, replicas migrating at once.

use gantry_store::*;

use crate::{Fixture, harness, new_job, open};

#[test]
fn a_store_whose_connections_were_terminated_connects_again_and_loses_nothing_acknowledged() {
    let (fixture, store) = open();
    let Fixture::Postgres(url) = &fixture else { return };
    let (a, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    let server = harness::shared().expect("server");
    let db = url.rsplit('/').next().expect("database name");
    let killed = server
        .psql(url, &format!("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '{db}' AND pid <> pg_backend_pid()"))
        .expect("terminate");
    assert_ne!(killed, "0", "the store's connections were there to terminate");
    // The first write after may fail (its connection was gone mid-transaction); none after it.
    let _ = store.submit(&new_job("b", 1, 0));
    let (c, _) = store.submit(&new_job("c", 1, 0)).expect("submit after reconnecting");
    let ids: Vec<JobId> = store.jobs(&JobFilter::default()).expect("list").iter().map(|j| j.id).collect();
    assert!(ids.contains(&a) && ids.contains(&c), "{ids:?}");
}

#[test]
fn replicas_opening_one_database_at_once_apply_each_migration_once() {
    let Some(server) = harness::shared() else { return };
    let url = server.create_database();
    let stores: Vec<PgStore> = std::thread::scope(|s| {
        let opening: Vec<_> = (0..3).map(|_| s.spawn(|| PgStore::open(&url).expect("open"))).collect();
        opening.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let version = server.psql(&url, "SELECT version FROM gantry_schema").expect("version");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
    let files = std::fs::read_dir(dir).expect("migrations").count();
    assert_eq!(version, files.to_string(), "the last migration, applied once");
    let (id, _) = stores[0].submit(&new_job("a", 0, 0)).expect("submit");
    assert_eq!(stores[2].job(id).expect("read").map(|j| j.id), Some(id), "one database under all three");
}
