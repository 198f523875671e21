//! What only the SQLite store has: files of older versions to upgrade, file modes.

use gantry_store::*;

use crate::new_job;

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
