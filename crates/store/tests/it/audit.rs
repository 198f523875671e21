//! The audit log: rows are appended with the change they record, and the hash chain catches an
//! edited, removed or reordered row. Also: a version-1 database upgrades with its tokens mapped.

use gantry_store::audit::{ChainError, verify};
use gantry_store::*;

use crate::{new_job, open};

fn entry(actor: &str, action: &str) -> AuditEntry {
    let actor = Actor { name: actor.into(), role: "member".into(), team: Some("default".into()), peer: None };
    AuditEntry { actor, action: action.into(), target: String::new(), at: 42 }
}

fn chain(store: &SqliteStore) -> std::result::Result<(), ChainError> {
    let rows = store.audit_rows(0, None, 10_000).expect("rows");
    let head = store.audit_head().expect("head");
    verify(&rows, head.as_ref().map(|(id, h)| (*id, h.as_str())))
}

fn history(store: &SqliteStore) {
    for i in 0..5 {
        store
            .apply(Change::Submit(Box::new(new_job(&format!("k{i}"), 0, 0))), entry("alice", "job.submit"))
            .expect("apply");
    }
    store.audit_refusal(entry("mallory", "job.cancel"), "denied: not visible".into()).expect("refusal");
}

fn raw(dir: &tempfile::TempDir) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.path().join("gantry.db")).expect("raw connection")
}

#[test]
fn each_change_is_recorded_with_its_target_and_a_failed_one_with_its_error() {
    let (_dir, store) = open();
    let Changed::Submitted { id, .. } = store
        .apply(Change::Submit(Box::new(new_job("a", 0, 0))), entry("alice", "job.submit"))
        .expect("apply")
    else {
        panic!("not a submission")
    };
    let err = store.apply(Change::Cancel(999), entry("alice", "job.cancel"));
    assert!(err.is_err());
    let rows = store.audit_rows(0, None, 100).expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].target.as_str(), rows[0].outcome.as_str()), (format!("job/{id}").as_str(), "ok"));
    assert!(rows[1].outcome.starts_with("error:"), "{:?}", rows[1]);
    assert_eq!(chain(&store), Ok(()));
}

#[test]
fn changing_one_byte_of_one_row_breaks_the_chain() {
    let (dir, store) = open();
    history(&store);
    assert_eq!(chain(&store), Ok(()));
    raw(&dir).execute("UPDATE audit SET actor = 'blice' WHERE id = 3", []).expect("tamper");
    assert_eq!(chain(&store), Err(ChainError::Edited(3)));
}

#[test]
fn removing_or_reordering_rows_breaks_the_chain() {
    let (dir, store) = open();
    history(&store);
    raw(&dir).execute("DELETE FROM audit WHERE id = 2", []).expect("remove");
    assert_eq!(chain(&store), Err(ChainError::Gap { after: 1, found: 3 }));

    let (dir, store) = open();
    history(&store);
    raw(&dir).execute("DELETE FROM audit WHERE id = 6", []).expect("truncate");
    assert_eq!(chain(&store), Err(ChainError::Head { last: 5, head: 6 }));

    let (dir, store) = open();
    history(&store);
    let c = raw(&dir);
    c.execute_batch(
        "UPDATE audit SET id = 100 WHERE id = 2; UPDATE audit SET id = 2 WHERE id = 3; \
         UPDATE audit SET id = 3 WHERE id = 100;",
    )
    .expect("swap");
    assert_eq!(chain(&store), Err(ChainError::Link(2)));
}

#[test]
fn a_version_1_database_upgrades_with_admins_teams_and_unbound_agent_tokens_mapped() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let c = rusqlite::Connection::open(dir.path().join("gantry.db")).expect("db");
        c.execute_batch(include_str!("../../migrations/0001_init.sql")).expect("v1 schema");
        c.execute_batch(
            "PRAGMA user_version = 1;
             INSERT INTO tokens (hash, role, team, name, created_at) VALUES ('h-admin', 'admin', NULL, 'admin', 1);
             INSERT INTO tokens (hash, role, team, name, created_at) VALUES ('h-vision', 'user', 'vision', 'v', 2);
             INSERT INTO tokens (hash, role, team, name, created_at) VALUES ('h-agent', 'agent', NULL, 'n1', 3);
             INSERT INTO jobs (request_id, team, name, priority, command, gpus, gpu_memory_mib, gpu_compute_pct,
                cpu_milli, memory_mib, state, max_retries, submitted_at)
                VALUES ('k', 'vision', 'j', 0, '[\"true\"]', 0, 0, 0, 0, 0, 'pending', 1, 5);
             INSERT INTO job_transitions (job_id, from_state, to_state, at) VALUES (1, NULL, 'pending', 5);",
        )
        .expect("v1 rows");
    }
    let store = SqliteStore::open(dir.path()).expect("upgrade");
    let admin = store.token_by_hash("h-admin").expect("read").expect("admin token");
    assert_eq!((admin.role, admin.user.as_deref()), (Role::Admin, Some("admin")));
    let member = store.token_by_hash("h-vision").expect("read").expect("team token");
    assert_eq!((member.role, member.teams.clone()), (Role::Member, vec!["vision".to_owned()]));
    let agent = store.token_by_hash("h-agent").expect("read").expect("agent token");
    assert_eq!(agent.refusal(10), Some("revoked"), "unbound agent tokens must join again");
    let job = store.job(1).expect("read").expect("job survives the rebuild");
    assert_eq!(job.team, "vision");
    let mut same_key = new_job("k", 0, 0);
    same_key.team = "nlp".into();
    assert!(store.submit(&same_key).expect("submit").1, "request ids are per team now");
}

#[test]
fn the_store_directory_and_database_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let store = SqliteStore::open(dir.path()).expect("open");
    store.submit(&new_job("x", 0, 0)).expect("write");
    let mode = |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(dir.path()), 0o700);
    for name in ["gantry.db", "gantry.db-wal", "gantry.db-shm"] {
        assert_eq!(mode(&dir.path().join(name)), 0o600, "{name}");
    }
}

#[test]
fn a_version_5_database_gets_the_attempts_its_allocation_history_shows() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let c = rusqlite::Connection::open(dir.path().join("gantry.db")).expect("db");
        for sql in [
            include_str!("../../migrations/0001_init.sql"),
            include_str!("../../migrations/0002_identity.sql"),
            include_str!("../../migrations/0003_job_env.sql"),
            include_str!("../../migrations/0004_time_limit.sql"),
            include_str!("../../migrations/0005_job_user.sql"),
        ] {
            c.execute_batch(sql).expect("schema up to version 5");
        }
        c.execute_batch(
            "PRAGMA user_version = 5;
             INSERT INTO jobs (team, name, priority, command, gpus, gpu_memory_mib, gpu_compute_pct,
                cpu_milli, memory_mib, state, attempt, max_retries, submitted_at, node_id, epoch)
                VALUES ('t', 'j', 0, '[\"true\"]', 1, 0, 0, 0, 0, 'scheduled', 1, 1, 5, 'n1', 1);
             INSERT INTO job_transitions (job_id, from_state, to_state, at) VALUES (1, NULL, 'pending', 5);
             INSERT INTO allocations (job_id, attempt, node_id, epoch, gpu_uuid, share_milli, memory_mib, created_at)
                VALUES (1, 1, 'n1', 1, 'GPU-0', 1000, 81920, 20);",
        )
        .expect("version 5 rows");
    }
    let store = SqliteStore::open(dir.path()).expect("upgrade");
    let attempts = store.attempts(1).expect("attempts");
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!((attempts[0].attempt, attempts[0].node_id.as_str(), attempts[0].placed_at), (1, "n1", 20));
    assert_eq!(attempts[0].gpu_uuids, vec!["GPU-0".to_owned()]);
    assert!(store.transitions(1).expect("transitions").iter().all(|t| t.attempt.is_none()));
}
