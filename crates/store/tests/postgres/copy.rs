//! `postgres::copy`: a SQLite store's whole state into an empty PostgreSQL database, in one
//! transaction, refused with a sentence when the target is not empty or the source is no store.

use gantry_store::postgres::copy::{CopyError, sqlite_to_postgres};
use gantry_store::*;

use crate::{harness, new_job, register, whole};

fn entry(action: &str) -> AuditEntry {
    let actor =
        Actor { name: "alice".into(), role: "member".into(), team: Some("default".into()), peer: None };
    AuditEntry { actor, action: action.into(), target: String::new(), at: 42, credential: None }
}

/// A SQLite store with jobs (one placed), a node, audited changes and a refusal.
fn filled() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path()).expect("open");
    let epoch = register(&store, 2);
    let mut ids = Vec::new();
    for i in 0..5 {
        let Changed::Submitted { id, .. } = store
            .apply(Change::Submit(Box::new(new_job(&format!("k{i}"), 1, 0))), entry("job.submit"))
            .expect("apply")
        else {
            panic!("not a submission")
        };
        ids.push(id);
    }
    store.place(&whole(ids[0], epoch, &["GPU-0"])).expect("place");
    store.apply(Change::Cancel(ids[4]), entry("job.cancel")).expect("cancel");
    store.audit_refusal(entry("job.cancel"), "denied: not visible".into()).expect("refusal");
    dir
}

fn chain(store: &dyn Store) -> Vec<AuditRecord> {
    let rows = store.audit_rows(0, None, 10_000).expect("rows");
    let head = store.audit_head().expect("head");
    audit::verify(&rows, head.as_ref().map(|(id, h)| (*id, h.as_str()))).expect("an unbroken chain");
    rows
}

#[test]
fn a_sqlite_store_is_copied_whole_and_its_ids_continue_after_the_highest() {
    let Some(server) = harness::shared() else { return };
    let dir = filled();
    // More rows than one page the copier reads (5,000) in the change log.
    let c = rusqlite::Connection::open(dir.path().join("gantry.db")).expect("open");
    c.execute_batch(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12001) \
         INSERT INTO scheduler_changes (job_id) SELECT NULL FROM n",
    )
    .expect("a long change log");
    let logged: i64 = c.query_row("SELECT count(*) FROM scheduler_changes", [], |r| r.get(0)).expect("count");
    let last: i64 = c.query_row("SELECT MAX(seq) FROM scheduler_changes", [], |r| r.get(0)).expect("max");
    drop(c);
    let url = server.create_database();
    let copied = sqlite_to_postgres(dir.path(), &url).expect("copy");
    let pg = |sql: &str| server.psql(&url, sql).expect("psql");
    assert_eq!(pg("SELECT count(*) FROM scheduler_changes"), logged.to_string(), "every page");
    assert_eq!(pg("SELECT seq FROM scheduler_seq"), last.to_string(), "the counter continues the log");
    assert!(copied.tables.iter().any(|(t, n)| t == "jobs" && *n == 5), "{copied:?}");
    let before = SqliteStore::open(dir.path()).expect("reopen sqlite");
    let after = PgStore::open(&url).expect("open postgres");
    let jobs = |s: &dyn Store| format!("{:?}", s.jobs(&JobFilter::default()).expect("jobs"));
    assert_eq!(jobs(&after), jobs(&before));
    assert_eq!(
        format!("{:?}", after.nodes().expect("nodes")),
        format!("{:?}", before.nodes().expect("nodes"))
    );
    assert_eq!(
        format!("{:?}", after.allocations(false).expect("allocations")),
        format!("{:?}", before.allocations(false).expect("allocations"))
    );
    assert_eq!(
        format!("{:?}", chain(&after)),
        format!("{:?}", chain(&before)),
        "the audit chain, hashes and all"
    );
    assert_eq!(after.job_counts().expect("counts"), before.job_counts().expect("counts"));
    // New rows continue the ids and the chain, and the triggers are on again.
    let (next, _) = after.submit(&new_job("later", 1, 0)).expect("submit on postgres");
    assert_eq!(next, 6, "after the highest copied id");
    after.apply(Change::Cancel(next), entry("job.cancel")).expect("audited on postgres");
    let rows = chain(&after);
    assert_eq!(rows.len(), chain(&before).len() + 1);
    let counted: u64 = after.job_counts().expect("counts").iter().map(|(_, _, n)| n).sum();
    assert_eq!(counted, 6, "the job counts' triggers run again");
}

#[test]
fn a_target_that_is_not_empty_or_a_source_that_is_no_store_is_refused_and_nothing_is_written() {
    let Some(server) = harness::shared() else { return };
    let dir = filled();
    let used = server.create_database();
    drop(PgStore::open(&used).expect("a store made its tables"));
    let err = sqlite_to_postgres(dir.path(), &used).expect_err("not empty");
    assert!(matches!(err, CopyError::Refused(_)), "{err}");
    assert!(err.to_string().contains("not empty"), "{err}");

    let empty = server.create_database();
    let missing = dir.path().join("nowhere");
    let err = sqlite_to_postgres(&missing, &empty).expect_err("no such directory");
    assert!(err.to_string().contains("is not a directory"), "{err}");
    let other = empty;
    let not_a_store = tempfile::tempdir().expect("temp dir");
    let err = sqlite_to_postgres(not_a_store.path(), &other).expect_err("no gantry.db");
    assert!(err.to_string().contains("no SQLite store"), "{err}");
    let tables = server
        .psql(&other, "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()")
        .expect("count");
    assert_eq!(tables, "0", "nothing was written");
}

#[test]
fn a_copy_that_fails_midway_leaves_the_target_without_a_table() {
    let Some(server) = harness::shared() else { return };
    let dir = filled();
    // A value SQLite kept in an integer column that PostgreSQL cannot take.
    let c = rusqlite::Connection::open(dir.path().join("gantry.db")).expect("open");
    c.execute_batch("UPDATE jobs SET submitted_at = 'yesterday' WHERE id = 3").expect("corrupt a row");
    drop(c);
    let url = server.create_database();
    let err = sqlite_to_postgres(dir.path(), &url).expect_err("a text in a bigint column");
    assert!(err.to_string().contains("jobs.submitted_at"), "{err}");
    let tables = server
        .psql(&url, "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()")
        .expect("count");
    assert_eq!(tables, "0", "the migrations were rolled back with the copy");
}

#[test]
fn a_table_or_column_the_copier_does_not_know_is_refused_rather_than_dropped() {
    let Some(server) = harness::shared() else { return };
    for (sql, said) in [
        ("CREATE TABLE reservations (id INTEGER PRIMARY KEY, node TEXT)", "table `reservations`"),
        ("ALTER TABLE jobs ADD COLUMN colour TEXT", "column `jobs.colour`"),
    ] {
        let dir = filled();
        let c = rusqlite::Connection::open(dir.path().join("gantry.db")).expect("open");
        c.execute_batch(sql).expect("a schema newer than this copier");
        drop(c);
        let url = server.create_database();
        let err = sqlite_to_postgres(dir.path(), &url).expect_err("unknown to the copier");
        assert!(matches!(err, CopyError::Refused(_)) && err.to_string().contains(said), "{err}");
        let tables = server
            .psql(
                &url,
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()",
            )
            .expect("count");
        assert_eq!(tables, "0", "nothing was written");
    }
}
