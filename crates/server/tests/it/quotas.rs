//! What a member can make the server store (issue 17): job output under a team quota and a
//! retention window, pending jobs under a team limit, audit rows that refused requests cannot
//! inflate, declared `env` values kept from other readers, and one address unable to hold every
//! connection.

use std::time::Duration;

use base64::Engine;
use gantry_server::output::OutputLimits;
use gantry_store::{JobState, Role, User};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::TestServer;

const HOUR: Duration = Duration::from_secs(3600);
const MIB: u64 = 1 << 20;

fn token(s: &TestServer, name: &str, role: Role, teams: &[&str]) -> String {
    let user = User { name: name.into(), role, teams: teams.iter().map(|t| (*t).to_owned()).collect() };
    gantry_server::create_user_token(&*s.store, &user, HOUR).expect("user token")
}

fn call(s: &TestServer, token: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
    s.http.request(method, format!("{}{path}", s.url)).bearer_auth(token)
}

async fn error_of(resp: reqwest::Response) -> (StatusCode, String) {
    let status = resp.status();
    let body: Value = resp.json().await.expect("a JSON error body");
    (status, body["error"].as_str().unwrap_or_default().to_owned())
}

/// Registers `node` with `gpus` GPUs; returns its credential and epoch.
async fn node(s: &TestServer, node: &str, gpus: usize) -> (String, u64) {
    let credential = gantry_server::create_node_credential(&*s.store, node).expect("credential");
    let gpus: Vec<Value> = (0..gpus)
        .map(|i| json!({"uuid": format!("GPU-{node}-{i}"), "index": i, "model": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920}))
        .collect();
    let body =
        json!({"node_id": node, "hostname": node, "cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus});
    let resp =
        call(s, &credential, Method::POST, "/v1/agent/register").json(&body).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    let epoch = resp.json::<Value>().await.expect("json")["epoch"].as_u64().expect("epoch");
    (credential, epoch)
}

async fn wait_scheduled(s: &TestServer, ids: &[i64]) {
    for _ in 0..100 {
        let placed = ids.iter().all(|id| {
            s.store
                .job(*id)
                .expect("job")
                .is_some_and(|j| matches!(j.state, JobState::Scheduled | JobState::Running))
        });
        if placed {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("jobs {ids:?} were not placed");
}

/// Bytes of the plain files under `dir`.
fn bytes_under(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_under(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Ships `total` bytes of `stdout` for each job, `chunk` bytes a heartbeat.
async fn ship(s: &TestServer, (credential, epoch): (&str, u64), ids: &[i64], total: u64, chunk: usize) {
    let data = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; chunk]);
    let running: Vec<Value> = ids.iter().map(|id| json!({"job_id": id, "attempt": 1})).collect();
    for id in ids {
        let mut offset = 0;
        while offset < total {
            let hb = json!({"node_id": "gpu-1", "epoch": epoch, "gpus": [], "jobs": running,
                "logs": [{"job_id": id, "attempt": 1, "stream": "stdout", "offset": offset, "data": data}]});
            let resp = call(s, credential, Method::POST, "/v1/agent/heartbeat")
                .json(&hb)
                .send()
                .await
                .expect("send");
            assert_eq!(resp.status(), StatusCode::OK, "{}", resp.text().await.unwrap_or_default());
            offset += chunk as u64;
        }
    }
}

async fn array_of(s: &TestServer, token: &str, team: &str, members: u32) -> Vec<i64> {
    let body = json!({"command": ["train"], "team": team, "gpus": 1, "array": format!("0-{}", members - 1)});
    let resp = call(s, token, Method::POST, "/v1/jobs").json(&body).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::CREATED);
    let head = resp.json::<Value>().await.expect("json")["id"].as_i64().expect("id");
    (head..head + i64::from(members)).collect()
}

/// A server whose team vision may keep `quota` bytes of output, a node `gpu-1` of `jobs` GPUs
/// (its credential and epoch), and an array of `jobs` members of alice's placed on it.
async fn running_under_quota(quota: u64, jobs: u32) -> (TestServer, String, (String, u64), Vec<i64>) {
    let s = TestServer::start_with(|c, _| c.body_limit = 16 << 20).await;
    let limit = json!({"gpu_quota": null, "log_quota_bytes": quota});
    let set = s.http.put(format!("{}/v1/teams/vision", s.url)).bearer_auth(&s.token).json(&limit);
    assert_eq!(set.send().await.expect("send").status(), StatusCode::NO_CONTENT);
    let alice = token(&s, "alice", Role::Member, &["vision"]);
    let node = node(&s, "gpu-1", jobs as usize).await;
    let ids = array_of(&s, &alice, "vision", jobs).await;
    wait_scheduled(&s, &ids).await;
    (s, alice, node, ids)
}

#[tokio::test]
async fn a_four_member_array_writing_64_mib_each_keeps_at_most_the_teams_100_mib_quota_on_disk() {
    // Before, each job kept its 64 MiB: 256 MiB on disk, and nothing ever said so.
    let (s, alice, (credential, epoch), ids) = running_under_quota(100 * MIB, 4).await;
    ship(&s, (&credential, epoch), &ids, 64 * MIB, 4 << 20).await;
    let on_disk = bytes_under(&s.app.config.logs_dir);
    assert!(on_disk <= 100 * MIB, "{on_disk} bytes of output kept under a 100 MiB quota");
    assert!(on_disk >= 99 * MIB, "the quota is used, not wasted: {on_disk}");
    let used = s.app.output.used(&*s.store, &s.app.config.logs_dir, "vision");
    assert!(used.abs_diff(on_disk) < 4096, "the counter ({used}) matches the disk ({on_disk})");
    let teams: Vec<Value> = crate::json_of(s.get("/v1/teams")).await;
    let vision = teams.iter().find(|t| t["name"] == "vision").expect("vision");
    assert_eq!(
        (vision["log_bytes"].as_u64(), vision["log_quota_bytes"].as_u64()),
        (Some(used), Some(100 * MIB))
    );
    let marker = "[gantry: output truncated: team vision's log quota of 100 MiB is full]";
    let logs = call(&s, &alice, Method::GET, &format!("/v1/jobs/{}/logs?offset={}", ids[1], 35 * MIB));
    let tail = logs.send().await.expect("send").text().await.expect("text");
    assert!(
        tail.contains(marker),
        "job 2's output ends with the marker: {:?}",
        &tail[tail.len().saturating_sub(200)..]
    );
}

#[tokio::test]
async fn an_ended_jobs_output_is_removed_after_the_retention_window_and_first_when_the_quota_is_full() {
    let (s, _alice, (credential, epoch), ids) = running_under_quota(10 * MIB, 2).await;
    ship(&s, (&credential, epoch), &ids[..1], 6 * MIB, 2 << 20).await;
    let end = json!({"node_id": "gpu-1", "epoch": epoch, "gpus": [],
        "jobs": [{"job_id": ids[0], "attempt": 1, "exit": {"exit_code": 0, "reason": null}}, {"job_id": ids[1], "attempt": 1}]});
    let resp =
        call(&s, &credential, Method::POST, "/v1/agent/heartbeat").json(&end).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    let first = gantry_server::job_logs::dir(&s.app.config.logs_dir, ids[0]);
    let ended = s.store.job(ids[0]).expect("job").expect("job");
    assert!(ended.state.is_terminal(), "{:?}", ended.state);
    let (logs, finished) = (&s.app.config.logs_dir, ended.finished_at.expect("finished"));
    let week = OutputLimits { retention: Duration::from_secs(7 * 86_400), ..s.app.config.output };
    assert_eq!(s.app.output.sweep(&*s.store, logs, finished + 86_400_000, week), 0, "a day after: kept");
    assert!(bytes_under(&first) >= 6 * MIB);
    // The running job needs room: the ended job's output goes first, the running one keeps all.
    ship(&s, (&credential, epoch), &ids[1..], 8 * MIB, 2 << 20).await;
    assert_eq!(bytes_under(&first), 0, "the ended job's output made room");
    assert!(bytes_under(&gantry_server::job_logs::dir(logs, ids[1])) >= 8 * MIB);
    // Past the window, the rest goes too, once the job has ended.
    let end = json!({"node_id": "gpu-1", "epoch": epoch, "gpus": [],
        "jobs": [{"job_id": ids[1], "attempt": 1, "exit": {"exit_code": 0, "reason": null}}]});
    let resp =
        call(&s, &credential, Method::POST, "/v1/agent/heartbeat").json(&end).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    let later = gantry_server::now_ms() + 8 * 86_400_000;
    assert_eq!(s.app.output.sweep(&*s.store, logs, later, week), 2, "both jobs' directories");
    assert_eq!(bytes_under(logs), 0);
    assert_eq!(s.app.output.used(&*s.store, logs, "vision"), 0);
}

#[tokio::test]
async fn a_team_past_its_pending_limit_gets_429_with_a_sentence_and_only_admins_set_the_limit() {
    let s = TestServer::start().await;
    let limit = json!({"gpu_quota": null, "pending_limit": 5});
    let operator = token(&s, "olga", Role::Operator, &[]);
    let by_operator = call(&s, &operator, Method::PUT, "/v1/teams/vision").json(&limit);
    assert_eq!(by_operator.send().await.expect("send").status(), StatusCode::FORBIDDEN);
    let set = s.http.put(format!("{}/v1/teams/vision", s.url)).bearer_auth(&s.token).json(&limit);
    assert_eq!(set.send().await.expect("send").status(), StatusCode::NO_CONTENT);
    let alice = token(&s, "alice", Role::Member, &["vision"]);
    // No node: everything stays pending.
    let submit = |body: Value| call(&s, &alice, Method::POST, "/v1/jobs").json(&body).send();
    let four = json!({"command": ["true"], "array": "0-3", "wait_for_capacity": true});
    assert_eq!(submit(four).await.expect("send").status(), StatusCode::CREATED);
    let two = json!({"command": ["true"], "array": "0-1", "wait_for_capacity": true});
    let (status, error) = error_of(submit(two).await.expect("send")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{error}");
    assert!(error.contains("team vision has 4 pending jobs and may have 5"), "{error}");
    let one = json!({"command": ["true"], "wait_for_capacity": true});
    assert_eq!(submit(one.clone()).await.expect("send").status(), StatusCode::CREATED);
    assert_eq!(submit(one.clone()).await.expect("send").status(), StatusCode::TOO_MANY_REQUESTS);
    let teams: Vec<Value> = crate::json_of(s.get("/v1/teams")).await;
    assert!(teams.iter().any(|t| t["name"] == "vision" && t["pending"] == 5), "{teams:?}");
    // A cancel makes room at once: the checks' cached view is read again after it.
    let jobs: Vec<Value> = crate::json_of(s.get("/v1/jobs?team=vision")).await;
    let id = jobs.iter().filter_map(|j| j["id"].as_u64()).max().expect("a job");
    let cancel = call(&s, &alice, Method::POST, &format!("/v1/jobs/{id}/cancel")).send().await.expect("send");
    assert!(cancel.status().is_success(), "{}", cancel.status());
    assert_eq!(submit(one).await.expect("send").status(), StatusCode::CREATED, "room made by the cancel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_parallel_submissions_against_a_pending_limit_of_fifty_leave_at_most_fifty_pending() {
    let s = TestServer::start().await;
    let limit = json!({"gpu_quota": null, "pending_limit": 50});
    let set = s.http.put(format!("{}/v1/teams/vision", s.url)).bearer_auth(&s.token).json(&limit);
    assert_eq!(set.send().await.expect("send").status(), StatusCode::NO_CONTENT);
    let alice = token(&s, "alice", Role::Member, &["vision"]);
    // Arrays of ten at once: each checks the cached count, which none of the others has
    // reached yet; the store's check in the insert's transaction holds the limit.
    let ten = json!({"command": ["true"], "array": "0-9", "wait_for_capacity": true});
    let sends: Vec<_> = (0..20)
        .map(|_| {
            let req = call(&s, &alice, Method::POST, "/v1/jobs").json(&ten);
            tokio::spawn(async move { req.send().await.expect("send").status() })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in sends {
        statuses.push(t.await.expect("task"));
    }
    let created = statuses.iter().filter(|s| **s == StatusCode::CREATED).count();
    assert!(
        statuses.iter().all(|s| *s == StatusCode::CREATED || *s == StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    let teams: Vec<Value> = crate::json_of(s.get("/v1/teams")).await;
    let pending =
        teams.iter().find(|t| t["name"] == "vision").and_then(|t| t["pending"].as_u64()).unwrap_or(0);
    assert!(pending <= 50, "{pending} pending against a limit of 50 ({created} accepted)");
    assert_eq!(pending, created as u64 * 10);
}

#[tokio::test]
async fn fifty_refused_heartbeats_with_a_900_kb_node_id_add_under_64_kib_to_the_database() {
    // Before, each one was audited with its node id: 50 MB that could never be removed.
    let s = TestServer::start().await;
    let viewer = token(&s, "vic", Role::Viewer, &["vision"]);
    let size = || {
        ["gantry.db", "gantry.db-wal"]
            .iter()
            .map(|f| std::fs::metadata(s.dir.path().join(f)).map_or(0, |m| m.len()))
            .sum::<u64>()
    };
    let before = size();
    let huge = "\u{1b}".repeat(10) + &"n".repeat(900_000);
    for _ in 0..50 {
        let hb = json!({"node_id": huge, "epoch": 1, "gpus": [], "jobs": []});
        let (status, error) = error_of(
            call(&s, &viewer, Method::POST, "/v1/agent/heartbeat").json(&hb).send().await.expect("send"),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(error.len() < 200, "the answer does not echo the id: {} bytes", error.len());
    }
    // And refusals that are audited (a viewer acting as a node) collapse into one counted row.
    for _ in 0..50 {
        let hb = json!({"node_id": "gpu-1", "epoch": 1, "gpus": [], "jobs": []});
        let resp =
            call(&s, &viewer, Method::POST, "/v1/agent/heartbeat").json(&hb).send().await.expect("send");
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    }
    // What the rows hold, and the files themselves (which also hold the write-ahead log's
    // frames, reused after each checkpoint: a page per commit, not per row).
    let rows: Vec<Value> = crate::json_of(s.get("/v1/audit")).await;
    let stored: usize = rows.iter().map(|r| r.to_string().len()).sum();
    assert!(stored < 64 << 10, "the audit log holds {stored} bytes");
    let grown = size().saturating_sub(before);
    assert!(grown < 1 << 20, "the database files grew by {grown} bytes");
    let refused: Vec<&Value> = rows.iter().filter(|r| r["action"] == "node.heartbeat").collect();
    assert!(refused.len() <= 2, "one row a minute: {refused:?}");
    assert_eq!(refused.iter().map(|r| r["count"].as_u64().unwrap_or(0)).sum::<u64>(), 50);
    let verified: Value = crate::json_of(s.get("/v1/audit/verify")).await;
    assert_eq!(verified["ok"], true, "{verified}");
}

#[tokio::test]
async fn declared_env_values_reach_the_submitter_and_admins_only() {
    let s = TestServer::start().await;
    let alice = token(&s, "alice", Role::Member, &["vision"]);
    let bob = token(&s, "bob", Role::Member, &["vision"]);
    let viewer = token(&s, "vic", Role::Viewer, &["vision"]);
    let operator = token(&s, "olga", Role::Operator, &[]);
    let body = json!({"command": ["true"], "env": {"WANDB_API_KEY": "s3cret"}, "wait_for_capacity": true});
    let resp = call(&s, &alice, Method::POST, "/v1/jobs").json(&body).send().await.expect("send");
    let id = resp.json::<Value>().await.expect("json")["id"].as_i64().expect("id");
    for (who, secret, sees) in [
        ("alice", &alice, true),
        ("admin", &s.token, true),
        ("bob", &bob, false),
        ("viewer", &viewer, false),
        ("operator", &operator, false),
    ] {
        let one: Value = crate::json_of(call(&s, secret, Method::GET, &format!("/v1/jobs/{id}"))).await;
        let listed: Vec<Value> = crate::json_of(call(&s, secret, Method::GET, "/v1/jobs")).await;
        let value = if sees { "s3cret" } else { "<redacted>" };
        assert_eq!(one["job"]["env"]["WANDB_API_KEY"], value, "{who}: {one}");
        assert_eq!(listed[0]["env"]["WANDB_API_KEY"], value, "{who}");
    }
}

#[tokio::test]
async fn many_connections_from_one_address_do_not_block_another_address() {
    // Before, the cap was global: 20 idle connections from 127.0.0.1 took all 8 slots and
    // 127.0.0.2 waited in the backlog until one timed out.
    let s = TestServer::start_with(|c, _| {
        c.max_connections = 8;
        c.max_connections_per_address = 4;
        // Loopback aliases stand for two machines here; the API counts them as one by default.
        c.loopback_is_one_source = false;
    })
    .await;
    let addr: std::net::SocketAddr = s.url.trim_start_matches("http://").parse().expect("addr");
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(([127, 0, 0, 2], 0).into()).expect("bind 127.0.0.2");
    let answer = tokio::time::timeout(Duration::from_secs(3), async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = socket.connect(addr).await.expect("connect");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut text = String::new();
        stream.read_to_string(&mut text).await.expect("read");
        text
    })
    .await
    .expect("127.0.0.2 is answered while 127.0.0.1 holds its connections");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(idle);
}

#[tokio::test]
async fn the_same_failed_change_repeated_by_one_caller_adds_one_counted_audit_row() {
    let s = TestServer::start().await;
    let alice = token(&s, "alice", Role::Member, &["vision"]);
    let body = json!({"command": ["true"], "team": "vision", "wait_for_capacity": true});
    let resp = call(&s, &alice, Method::POST, "/v1/jobs").json(&body).send().await.expect("send");
    let id = resp.json::<Value>().await.expect("json")["id"].as_i64().expect("id");
    let cancel = || call(&s, &alice, Method::POST, &format!("/v1/jobs/{id}/cancel")).send();
    assert_eq!(cancel().await.expect("send").status(), StatusCode::OK);
    for _ in 0..20 {
        assert_eq!(cancel().await.expect("send").status(), StatusCode::CONFLICT, "already cancelled");
    }
    let rows: Vec<Value> = crate::json_of(s.get("/v1/audit")).await;
    let failed: Vec<&Value> = rows
        .iter()
        .filter(|r| {
            r["action"] == "job.cancel" && r["outcome"].as_str().is_some_and(|o| o.starts_with("error:"))
        })
        .collect();
    assert!(failed.len() <= 2, "{failed:?}");
    assert_eq!(failed.iter().map(|r| r["count"].as_u64().unwrap_or(0)).sum::<u64>(), 20);
    let verified: Value = crate::json_of(s.get("/v1/audit/verify")).await;
    assert_eq!(verified["ok"], true, "{verified}");
}

#[tokio::test]
async fn output_an_agent_writes_straight_to_disk_is_counted_held_to_the_quota_and_removed_by_the_sweep() {
    // `gantry up`'s agent writes into the server's logs directory and ships nothing: before,
    // none of it was counted, so neither the quota nor retention ever touched it.
    let s = TestServer::start().await;
    let quota = json!({"gpu_quota": null, "log_quota_bytes": 10 * MIB});
    let set = s.http.put(format!("{}/v1/teams/vision", s.url)).bearer_auth(&s.token).json(&quota);
    assert_eq!(set.send().await.expect("send").status(), StatusCode::NO_CONTENT);
    let alice = token(&s, "alice", Role::Member, &["vision"]);
    let (credential, epoch) = node(&s, "gpu-1", 2).await;
    let ids = array_of(&s, &alice, "vision", 2).await;
    wait_scheduled(&s, &ids).await;
    let logs = s.app.config.logs_dir.clone();
    for id in &ids {
        let dir = gantry_server::job_logs::attempt_dir(&logs, *id, 1);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("stdout"), vec![b'x'; 6 << 20]).expect("write");
    }
    let ended: Vec<Value> = ids
        .iter()
        .map(|id| json!({"job_id": id, "attempt": 1, "exit": {"exit_code": 0, "reason": null}}))
        .collect();
    let end = json!({"node_id": "gpu-1", "epoch": epoch, "gpus": [], "jobs": ended});
    let resp =
        call(&s, &credential, Method::POST, "/v1/agent/heartbeat").json(&end).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    let limits = s.app.config.output;
    assert_eq!(s.app.output.sweep(&*s.store, &logs, gantry_server::now_ms(), limits), 0);
    assert_eq!(bytes_under(&gantry_server::job_logs::dir(&logs, ids[0])), 0, "the older job's output went");
    assert_eq!(bytes_under(&logs), 6 * MIB, "12 MiB written, 10 MiB allowed: the newer job's 6 MiB stay");
    assert_eq!(s.app.output.used(&*s.store, &logs, "vision"), 6 * MIB);
    let later = gantry_server::now_ms() + 8 * 86_400_000;
    assert_eq!(s.app.output.sweep(&*s.store, &logs, later, limits), 2);
    assert_eq!((bytes_under(&logs), s.app.output.used(&*s.store, &logs, "vision")), (0, 0));
}

#[tokio::test]
async fn submissions_get_507_with_a_sentence_while_the_data_disk_is_below_its_free_space_floor() {
    let s = TestServer::start_with(|c, _| c.output.min_free_disk = u64::MAX).await;
    let body = json!({"command": ["true"], "wait_for_capacity": true});
    let (status, error) = error_of(s.post("/v1/jobs").json(&body).send().await.expect("send")).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{error}");
    assert!(error.contains("below its floor") && error.contains("--min-free-disk"), "{error}");
    let roomy = TestServer::start_with(|c, _| c.output.min_free_disk = 1).await;
    let resp = roomy.post("/v1/jobs").json(&body).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn output_running_jobs_write_straight_to_disk_is_cut_at_the_quota_while_they_run() {
    // `gantry up`'s agent writes straight into the logs directory: before, a team's running jobs
    // held any amount (641 MiB against a quota of 100) until they ended.
    let (s, _alice, (credential, epoch), ids) = running_under_quota(10 * MIB, 3).await;
    let logs = s.app.config.logs_dir.clone();
    for (id, mib) in ids.iter().zip([4u64, 6, 6]) {
        let dir = gantry_server::job_logs::attempt_dir(&logs, *id, 1);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("stdout"), vec![b'x'; (mib * MIB) as usize]).expect("write");
    }
    let limits = s.app.config.output;
    let beat = |jobs: Value| {
        let hb = json!({"node_id": "gpu-1", "epoch": epoch, "gpus": [], "jobs": jobs});
        call(&s, &credential, Method::POST, "/v1/agent/heartbeat").json(&hb).send()
    };
    let running: Vec<Value> = ids.iter().map(|id| json!({"job_id": id, "attempt": 1})).collect();
    assert_eq!(beat(json!(running)).await.expect("send").status(), StatusCode::OK);
    // The minute's sweep counts all three; none has ended, so it removes nothing.
    assert_eq!(s.app.output.sweep(&*s.store, &logs, gantry_server::now_ms(), limits), 0);
    // The first ends; the other two run on.
    let jobs = json!([{"job_id": ids[0], "attempt": 1, "exit": {"exit_code": 0, "reason": null}},
        {"job_id": ids[1], "attempt": 1}, {"job_id": ids[2], "attempt": 1}]);
    assert_eq!(beat(jobs).await.expect("send").status(), StatusCode::OK);
    // 16 MiB against 10: the ended job's 4 MiB go first, then both running attempts are marked.
    assert_eq!(s.app.output.hold_running(&*s.store, &logs, limits), 2);
    assert_eq!(bytes_under(&gantry_server::job_logs::dir(&logs, ids[0])), 0, "the ended job's output went");
    for id in &ids[1..] {
        let dir = gantry_server::job_logs::attempt_dir(&logs, *id, 1);
        let line = std::fs::read_to_string(dir.join(gantry_server::job_logs::QUOTA_FULL)).expect("marked");
        assert!(line.contains("team vision's log quota of 10 MiB is full"), "{line}");
        assert_eq!(
            std::fs::metadata(dir.join("stdout")).expect("kept").len(),
            6 * MIB,
            "nothing running is removed"
        );
    }
    assert_eq!(s.app.output.hold_running(&*s.store, &logs, limits), 0, "marked once");
}

#[tokio::test]
async fn an_arrays_command_and_env_are_stored_once_and_the_teams_pending_bytes_are_limited() {
    // One 120 KB array of 2,000 members stored the command and env once per member: 245 MB.
    let s = TestServer::start().await;
    let alice = token(&s, "alice", Role::Member, &["vision"]);
    let db = |dir: &std::path::Path| -> u64 {
        ["gantry.db", "gantry.db-wal"]
            .iter()
            .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
            .map(|m| m.len())
            .sum()
    };
    let before = db(s.dir.path());
    let (script, value) = ("x".repeat(60_000), "y".repeat(60_000));
    let big = json!({"command": ["sh", "-c", script], "env": {"BIG": value}, "array": "0-1999",
        "wait_for_capacity": true});
    let resp = call(&s, &alice, Method::POST, "/v1/jobs").json(&big).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::CREATED);
    let grew = db(s.dir.path()).saturating_sub(before);
    eprintln!("a 2,000-member array of 120 KB grew the store by {} KiB", grew >> 10);
    assert!(grew < 32 << 20, "stored once, not per member: {} MiB", grew >> 20);
    let jobs = s.store.jobs(&gantry_store::JobFilter::default()).expect("jobs");
    assert_eq!(jobs.len(), 2000);
    let last = jobs.iter().max_by_key(|j| j.id).expect("a member");
    assert_eq!(last.command[2].len(), 60_000, "every member reads the array's command");
    assert_eq!(last.env["BIG"].len(), 60_000, "and its env");
    // The team's pending jobs' bytes are limited: past them, 429 with the figures.
    let limit = json!({"gpu_quota": null, "pending_bytes_limit": 300_000});
    let set = s.http.put(format!("{}/v1/teams/vision", s.url)).bearer_auth(&s.token).json(&limit);
    assert_eq!(set.send().await.expect("send").status(), StatusCode::NO_CONTENT);
    let teams: Vec<Value> = crate::json_of(s.get("/v1/teams")).await;
    let vision = teams.iter().find(|t| t["name"] == "vision").cloned().expect("vision");
    assert_eq!(vision["pending_bytes_limit"], 300_000, "{vision}");
    let one = json!({"command": ["sh", "-c", script], "env": {"BIG": value}, "wait_for_capacity": true});
    let resp = call(&s, &alice, Method::POST, "/v1/jobs").json(&one).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::CREATED, "a second copy fits 300,000 bytes");
    let resp = call(&s, &alice, Method::POST, "/v1/jobs").json(&one).send().await.expect("send");
    let (status, error) = error_of(resp).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{error}");
    assert!(error.contains("may store 0.3 MiB") && error.contains("adds 0.1 MiB"), "{error}");
}
