//! `gantry up --db postgres://…`: the cluster's state in PostgreSQL, through the real binary
//! and a throwaway server ([`crate::pg_harness`]). A job runs to success on the simulated
//! fleet, the server is killed (`kill -9`) and started again, and everything it acknowledged is
//! still there; the data directory holds no store of its own. Two replicas on one database: one
//! leads, and a leader stopped past its lease hands over to the other.

use std::time::Duration;

use gantry_store::{JobFilter, JobState, PgStore, Store, history};
use serde_json::Value;

use crate::harness::{Cluster, eventually};
use crate::pg_harness;

fn state(cluster: &Cluster, id: &str) -> Value {
    let job: Value = serde_json::from_str(&cluster.gantry(&["job", id, "-o", "json"])).expect("job json");
    job["job"]["state"].clone()
}

fn run_to_success(cluster: &Cluster) -> String {
    let id = cluster.gantry(&["submit", "--gpus", "1", "--", "sh", "-c", "echo hello from postgres"]);
    let id = id.trim().to_owned();
    eventually(Duration::from_secs(60), "the job to succeed", || {
        (state(cluster, &id) == "succeeded").then_some(())
    });
    id
}

#[test]
fn gantry_up_on_postgres_runs_a_job_and_keeps_its_state_across_a_kill_and_a_restart() {
    let Some(server) = pg_harness::shared() else { return };
    let url = server.create_database();
    let mut cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB", "--db", &url]);
    let first = run_to_success(&cluster);
    assert_eq!(cluster.gantry(&["logs", &first]), "hello from postgres\n");
    cluster.kill();
    cluster.restart();
    assert_eq!(state(&cluster, &first), "succeeded", "the job and its end survive the restart");
    let second = run_to_success(&cluster);
    assert_ne!(first, second);
    assert!(!cluster.data_dir().join("gantry.db").exists(), "no SQLite store beside PostgreSQL");
    // What the binary wrote is in the database, read by a store of our own beside it.
    let store = PgStore::open(&url).expect("open the database");
    let jobs = store.jobs(&JobFilter::default()).expect("jobs");
    assert_eq!(jobs.iter().filter(|j| j.state == JobState::Succeeded).count(), 2, "{jobs:?}");
    let conflicts =
        history::conflicts(&store.allocations(false).expect("history"), &store.gpus().expect("gpus"));
    assert!(conflicts.is_empty(), "{conflicts:?}");
    let audit = store.audit_rows(0, None, 1000).expect("audit");
    let head = store.audit_head().expect("head");
    gantry_store::audit::verify(&audit, head.as_ref().map(|(id, h)| (*id, h.as_str())))
        .expect("an unbroken chain");
}

#[test]
fn a_bad_db_url_is_refused_with_a_sentence_before_anything_listens() {
    let home = tempfile::tempdir().expect("home");
    let out = crate::harness::command(home.path())
        .args(["server", "--db", "mysql://x", "--data-dir"])
        .arg(home.path().join("data"))
        .output()
        .expect("run gantry");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("neither `sqlite` nor a URL like postgres://"), "{err}");
}

#[test]
fn bench_submit_measures_durable_submissions_on_postgres() {
    let Some(server) = pg_harness::shared() else { return };
    let url = server.create_database();
    let out = crate::gantry(&["bench", "submit", "--clients", "4", "--requests", "200", "--db", &url]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("200 durable submissions from 4 clients"), "{said}");
    let store = PgStore::open(&url).expect("open the database");
    assert_eq!(store.jobs(&JobFilter::default()).expect("jobs").len(), 200, "every one is in the database");
}

#[test]
fn bench_pass_measures_a_scheduling_pass_on_postgres() {
    let Some(server) = pg_harness::shared() else { return };
    let url = server.create_database();
    let args = ["bench", "pass", "--pending", "40", "--nodes", "1", "--gpus-per-node", "2", "--rounds", "1"];
    let out = crate::gantry(&[&args[..], &["--json", "--db", &url]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!((v["pending"].as_u64(), v["db"].as_str()), (Some(40), Some("postgresql")), "{v}");
    for key in ["full_pass_s", "idle_pass_s", "change_pass_s", "job_counts_s"] {
        assert!(v[key].as_f64().is_some_and(|s| s >= 0.0), "{key} in {v}");
    }
    let store = PgStore::open(&url).expect("open the database");
    let pending = JobFilter { state: Some(JobState::Pending), ..JobFilter::default() };
    assert_eq!(store.jobs(&pending).expect("jobs").len(), 40, "the queue is in the database");
}

/// `/healthz` of a plain-HTTP server: (role, epoch).
fn health(cluster: &Cluster) -> (String, u64) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", cluster.port)).expect("connect");
    conn.write_all(b"GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n").expect("ask");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("answer");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
    assert_eq!(v["status"], "ok", "{v}");
    (v["role"].as_str().unwrap_or_default().to_owned(), v["epoch"].as_u64().unwrap_or_default())
}

/// The status of `GET path` with a bearer token, on a plain-HTTP server.
fn status_with(cluster: &Cluster, path: &str, token: &str) -> u16 {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", cluster.port)).expect("connect");
    let ask = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\r\n");
    conn.write_all(ask.as_bytes()).expect("ask");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("answer");
    answer.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("{answer}"))
}

#[test]
fn a_token_revoked_through_one_replica_is_refused_by_the_other_within_seconds() {
    let Some(server) = pg_harness::shared() else { return };
    let url = server.create_database();
    let args = ["--db", &url, "--no-tls", "--gateway-listen", "none"];
    let a = Cluster::start_as("server", "127.0.0.1", &args);
    let b = Cluster::start_as("server", "127.0.0.1", &args);
    let secret = a.gantry(&["token", "create", "--team", "vision", "--user", "alice"]).trim().to_owned();
    // Both replicas verify it, and remember it.
    assert_eq!(status_with(&a, "/v1/jobs", &secret), 200);
    assert_eq!(status_with(&b, "/v1/jobs", &secret), 200);
    let tokens: Value =
        serde_json::from_str(&a.gantry(&["token", "list", "-o", "json"])).expect("token json");
    let id = tokens
        .as_array()
        .and_then(|t| t.iter().find(|t| t["user"] == "alice"))
        .and_then(|t| t["id"].as_i64())
        .unwrap_or_else(|| panic!("alice's token in {tokens}"));
    a.gantry(&["token", "revoke", &id.to_string()]);
    assert_eq!(status_with(&a, "/v1/jobs", &secret), 401, "refused at once where it was revoked");
    // The other replica trusted its cached copy: it asks the database again within 5 s.
    eventually(Duration::from_secs(15), "the other replica to refuse the revoked token", || {
        (status_with(&b, "/v1/jobs", &secret) == 401).then_some(())
    });
}

#[test]
fn a_leader_stopped_past_its_lease_hands_over_and_the_new_leaders_placements_stand() {
    let Some(server) = pg_harness::shared() else { return };
    let url = server.create_database();
    let lease = ["--db", &url, "--lease-ttl", "2s", "--no-tls", "--gateway-listen", "none"];
    let a = Cluster::start_as("server", "127.0.0.1", &lease);
    let mut with_gpus = lease.to_vec();
    with_gpus.extend(["--simulated-gpus", "1xA100-80GB"]);
    let b = Cluster::start(&with_gpus);
    assert_eq!(health(&a), ("leader".to_owned(), 1), "the first replica leads");
    assert_eq!(health(&b), ("follower".to_owned(), 1), "the second serves the API only");
    // The leader places what the follower was given; the follower's agent runs it.
    let first = run_to_success(&b);
    a.send("STOP");
    let elected = eventually(Duration::from_secs(20), "the follower to be elected", || {
        Some(health(&b)).filter(|(role, _)| role == "leader")
    });
    assert_eq!(elected.1, 2, "an election is a new epoch");
    let second = run_to_success(&b);
    a.send("CONT");
    eventually(Duration::from_secs(20), "the old leader to learn it follows", || {
        (health(&a) == ("follower".to_owned(), 2)).then_some(())
    });
    let third = run_to_success(&b);
    let store = PgStore::open(&url).expect("open the database");
    for id in [&first, &second, &third] {
        let attempts = store.attempts(id.parse().expect("id")).expect("attempts");
        assert_eq!(attempts.len(), 1, "job {id} placed once: {attempts:?}");
    }
    let conflicts =
        history::conflicts(&store.allocations(false).expect("history"), &store.gpus().expect("gpus"));
    assert!(conflicts.is_empty(), "{conflicts:?}");
    assert_eq!(store.lease().expect("lease").map(|l| l.epoch), Some(2));
}

#[test]
fn bench_failover_injects_every_fault_in_turn_and_the_history_breaks_no_invariant() {
    if pg_harness::shared().is_none() {
        return;
    }
    // CI-sized: two rounds of the five faults, a 2 s lease (failover in about 2.7 s).
    let out = crate::gantry(&[
        "bench",
        "failover",
        "--replicas",
        "3",
        "--trials",
        "10",
        "--lease-ttl",
        "2s",
        "--json",
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(said.trim()).unwrap_or_else(|e| panic!("{e}: {said}"));
    assert_eq!(v["trials"], 10, "{v}");
    for count in [
        "double_allocations",
        "lost_acknowledged",
        "duplicate_starts",
        "stale_epoch_writes",
        "impossible_states",
    ] {
        assert_eq!(v[count], 0, "{count}: {v}");
    }
    assert_eq!(v["failover_s"]["n"], 4, "a failover measured for each leader killed or stopped: {v}");
    let p99 = v["failover_s"]["p99"].as_f64().expect("p99");
    assert!(p99 > 0.0 && p99 < 10.0, "{v}");
}
