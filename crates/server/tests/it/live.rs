//! The dashboard's reads beyond the basics, tried as a member of another team would: the watch
//! stream (`/v1/watch`), findings and queues. A member of nlp must see none of vision's jobs.

use std::time::{Duration, Instant};

use gantry_store::{GpuHealth, GpuInfo, GpuReport, Heartbeat, NodeRegistration, RegisterRequest, Role, User};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{TestServer, json_of};

const HOUR: Duration = Duration::from_secs(3600);
const SECRET: &str = "secret-vision-run";

fn token(s: &TestServer, name: &str, teams: &[&str]) -> String {
    let user = User {
        name: name.into(),
        role: Role::Member,
        teams: teams.iter().map(|t| (*t).to_owned()).collect(),
    };
    gantry_server::create_user_token(&*s.store, &user, HOUR).expect("token")
}

fn now() -> i64 {
    gantry_server::now_ms()
}

/// A node with two GPUs, each with a finding in its sample (one idle while held, one throttled).
fn node(s: &TestServer) -> u64 {
    let gpus: Vec<GpuInfo> = (0..2)
        .map(|i| GpuInfo {
            uuid: format!("GPU-{i}"),
            index: i,
            model: "NVIDIA H100".into(),
            memory_mib: 81920,
        })
        .collect();
    let reg = NodeRegistration {
        request: RegisterRequest {
            attempts: Vec::new(),
            node_id: "n1".into(),
            hostname: "n1".into(),
            advertise_addr: None,
            network: Default::default(),
            job_defaults: None,
            labels: Default::default(),
            cpu_milli: 64_000,
            memory_mib: 512_000,
            gpus: gpus.clone(),
        },
        at: now(),
    };
    let epoch = s.store.register_node(&reg).expect("register");
    beat(s, epoch, 10.0);
    epoch
}

fn beat(s: &TestServer, epoch: u64, util: f64) {
    beat_with(s, epoch, util, None);
}

fn beat_with(s: &TestServer, epoch: u64, util: f64, failing: Option<&str>) {
    let gpus = (0..2u32)
        .map(|i| {
            let kind = if i == 0 { "idle_allocated" } else { "thermal_throttle" };
            let sample = json!({"findings": [{"gpu": i, "kind": kind, "detail": format!("detail of GPU {i}")}],
                "xid_counts": {}, "sample": {"gpu_util_percent": util + f64::from(i), "memory_used_bytes": 1u64 << 30,
                "memory_free_bytes": 79u64 << 30, "memory_reserved_bytes": 0, "gpu_temp_celsius": 50.0,
                "power_watts": 300.0, "pcie_rx_bytes": 123456}});
            let uuid = format!("GPU-{i}");
            let health = if failing == Some(uuid.as_str()) { GpuHealth::Unhealthy } else { GpuHealth::Healthy };
            GpuReport { uuid, health, sample: Some(sample) }
        })
        .collect();
    let hb = Heartbeat { node_id: "n1".into(), epoch, gpus, jobs: vec![], logs: vec![] };
    s.store.heartbeat(&hb, now()).expect("heartbeat");
}

async fn submit(s: &TestServer, token: &str, name: &str) -> i64 {
    let body = json!({"command": ["sleep", "600"], "gpus": 1, "name": name});
    let resp =
        s.http.post(format!("{}/v1/jobs", s.url)).bearer_auth(token).json(&body).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::CREATED);
    resp.json::<Value>().await.expect("json")["id"].as_i64().expect("id")
}

async fn wait_placed(s: &TestServer, id: i64) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let job: Value = json_of(s.get(&format!("/v1/jobs/{id}"))).await;
        if job["job"]["state"] == "scheduled" {
            return job["job"]["gpu_uuids"][0].as_str().expect("uuid").to_owned();
        }
        assert!(Instant::now() < deadline, "job {id} was not placed: {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads a watch stream for `for_` (or until it ends); the text and whether it ended.
async fn read_stream(resp: &mut reqwest::Response, for_: Duration) -> (String, bool) {
    let mut text = String::new();
    let deadline = Instant::now() + for_;
    while Instant::now() < deadline {
        match tokio::time::timeout(deadline - Instant::now(), resp.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Ok(None) | Err(_)) => return (text, true),
            Err(_) => break,
        }
    }
    (text, false)
}

/// The data of every `event: name` in an SSE text, flattened.
fn events(text: &str, name: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|frame| frame.lines().any(|l| l == format!("event: {name}")))
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .flat_map(|data| match serde_json::from_str::<Value>(data).expect("event data is JSON") {
            Value::Array(items) => items,
            other => vec![other],
        })
        .collect()
}

#[tokio::test]
async fn the_watch_stream_sends_changes_scoped_to_the_callers_teams_and_ends_when_the_token_is_revoked() {
    let s = TestServer::start().await;
    let epoch = node(&s);
    let vision = token(&s, "vera", &["vision"]);
    let nlp = token(&s, "nils", &["nlp"]);
    let first = submit(&s, &vision, SECRET).await;
    let held = wait_placed(&s, first).await;

    let open = |t: &str| s.http.get(format!("{}/v1/watch", s.url)).bearer_auth(t.to_owned()).send();
    let mut as_vision = open(&vision).await.expect("send");
    let mut as_nlp = open(&nlp).await.expect("send");
    assert_eq!(as_nlp.status(), StatusCode::OK);
    assert_eq!(as_nlp.headers()["content-type"], "text/event-stream");
    let (start, _) = read_stream(&mut as_nlp, Duration::from_millis(1500)).await;
    assert_eq!(events(&start, "hello").len(), 1, "{start}");
    let gpus = events(&start, "gpus");
    assert_eq!(gpus.len(), 2, "every GPU once at the start: {start}");
    assert!(gpus.iter().all(|g| g["holders"] == json!([])), "nlp sees vision's holder: {gpus:?}");
    assert!(gpus[0]["gpu"]["sample"]["sample"].get("pcie_rx_bytes").is_none(), "samples are cut to readings");
    assert_eq!(events(&start, "nodes").len(), 1);
    assert_eq!(events(&start, "synced").len(), 1, "the first full copy is marked: {start}");

    // Changes: a second vision job (a state change) and new readings (GPU changes).
    let second = submit(&s, &vision, SECRET).await;
    beat(&s, epoch, 55.0);
    let (nlp_text, _) = read_stream(&mut as_nlp, Duration::from_millis(2500)).await;
    let (vision_text, _) = read_stream(&mut as_vision, Duration::from_millis(2500)).await;
    assert!(
        !nlp_text.contains(SECRET) && !start.contains(SECRET),
        "nlp's stream names vision's job:\n{nlp_text}"
    );
    assert!(events(&nlp_text, "jobs").is_empty(), "nlp gets vision's jobs: {nlp_text}");
    let changed = events(&nlp_text, "gpus");
    assert_eq!(changed.len(), 2, "both GPUs' readings changed: {nlp_text}");
    assert!(changed.iter().all(|g| g["holders"] == json!([])), "{changed:?}");
    let jobs = events(&vision_text, "jobs");
    assert!(
        jobs.iter().any(|j| j["id"] == second && j["team"] == "vision"),
        "vision misses its job: {vision_text}"
    );
    let vision_gpus = events(&vision_text, "gpus");
    let mine = vision_gpus.iter().find(|g| g["gpu"]["uuid"] == held.as_str());
    assert!(mine.is_some_and(|g| g["holders"][0]["job_id"] == first), "{vision_text}");

    // Nothing changes: nothing is sent (the next bytes would be a keep-alive after 15 s).
    let (quiet, _) = read_stream(&mut as_nlp, Duration::from_millis(1500)).await;
    assert!(!quiet.contains("event:"), "an unchanged cluster sent {quiet}");

    // Revoking the token ends its stream.
    let listed: Vec<Value> = json_of(s.get("/v1/tokens")).await;
    let id = listed.iter().find(|t| t["user"] == "nils").expect("nlp token")["id"].as_i64().expect("id");
    let resp =
        s.http.delete(format!("{}/v1/tokens/{id}", s.url)).bearer_auth(&s.token).send().await.expect("send");
    assert!(resp.status().is_success());
    let (_, ended) = read_stream(&mut as_nlp, Duration::from_secs(5)).await;
    assert!(ended, "the revoked token's stream went on");
}

#[tokio::test]
async fn the_watch_stream_needs_a_bearer_token_and_limits_streams_per_token() {
    let s = TestServer::start().await;
    let url = format!("{}/v1/watch", s.url);
    assert_eq!(s.http.get(&url).send().await.expect("send").status(), StatusCode::UNAUTHORIZED);
    let in_url = format!("{url}?token={}", s.token);
    assert_eq!(
        s.http.get(&in_url).send().await.expect("send").status(),
        StatusCode::UNAUTHORIZED,
        "no token in URLs"
    );
    let mut open = Vec::new();
    for _ in 0..gantry_server::api::watch::PER_TOKEN {
        let resp = s.get("/v1/watch").send().await.expect("send");
        assert_eq!(resp.status(), StatusCode::OK);
        open.push(resp);
    }
    let refused = s.get("/v1/watch").send().await.expect("send");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    open.pop();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.get("/v1/watch").send().await.expect("send").status() != StatusCode::OK {
        assert!(Instant::now() < deadline, "a closed stream did not give its place back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn findings_name_only_the_callers_jobs_and_leave_out_gpus_another_team_holds() {
    let s = TestServer::start().await;
    let epoch = node(&s);
    let vision = token(&s, "vera", &["vision"]);
    let nlp = token(&s, "nils", &["nlp"]);
    let id = submit(&s, &vision, SECRET).await;
    let held = wait_placed(&s, id).await;
    let as_ = |t: &str| s.http.get(format!("{}/v1/findings", s.url)).bearer_auth(t.to_owned());

    let all: Vec<Value> = json_of(s.get("/v1/findings")).await;
    assert_eq!(all.len(), 2, "{all:?}");
    let theirs: Vec<Value> = json_of(as_(&vision)).await;
    let on_held =
        theirs.iter().find(|f| f["gpu_uuid"] == held.as_str()).expect("vision sees its GPU's finding");
    assert_eq!(on_held["jobs"], json!([{"id": id, "name": SECRET, "team": "vision"}]));
    let others: Vec<Value> = json_of(as_(&nlp)).await;
    let text = serde_json::to_string(&others).expect("json");
    assert!(!text.contains(SECRET) && !text.contains(&held), "nlp sees vision's GPU or job: {text}");
    assert_eq!(others.len(), 1, "the free GPU's finding is everyone's: {others:?}");

    // A failing GPU is shown to everyone, without the jobs of other teams.
    beat_with(&s, epoch, 10.0, Some(&held));
    let others: Vec<Value> = json_of(as_(&nlp)).await;
    let failing = others.iter().find(|f| f["kind"] == "gpu_health").expect("the failing GPU");
    assert_eq!(failing["jobs"], json!([]), "{failing}");
}

#[tokio::test]
async fn queues_show_guarantee_use_and_borrowing_and_members_see_their_own_team_only() {
    let s = TestServer::start().await;
    node(&s);
    let quota =
        s.http.put(format!("{}/v1/teams/vision", s.url)).bearer_auth(&s.token).json(&json!({"gpu_quota": 1}));
    assert!(quota.send().await.expect("send").status().is_success());
    let vision = token(&s, "vera", &["vision"]);
    let nlp = token(&s, "nils", &["nlp"]);
    for _ in 0..2 {
        let id = submit(&s, &vision, SECRET).await;
        wait_placed(&s, id).await;
    }
    let queues: Vec<Value> = json_of(s.http.get(format!("{}/v1/queues", s.url)).bearer_auth(&vision)).await;
    assert_eq!(queues.len(), 1, "{queues:?}");
    let q = &queues[0];
    assert_eq!((q["team"].as_str(), q["guaranteed_gpus"].as_u64()), (Some("vision"), Some(1)));
    assert_eq!((q["used_gpus"].as_f64(), q["borrowed_gpus"].as_f64()), (Some(2.0), Some(1.0)), "{q}");
    assert_eq!(
        (q["max_gpus"].as_u64(), q["cluster_gpus"].as_u64(), q["active"].as_u64()),
        (Some(2), Some(2), Some(2))
    );
    let theirs: Vec<Value> = json_of(s.http.get(format!("{}/v1/queues", s.url)).bearer_auth(&nlp)).await;
    assert!(theirs.iter().all(|q| q["team"] != "vision"), "nlp sees vision's queue: {theirs:?}");
}

/// Before, `/v1/gpus` and the stream's `gpus` events carried each GPU's raw sample with its
/// findings, so a member of nlp read that vision's GPU sat idle (or starved) although
/// `/v1/findings` leaves that out for GPUs another team holds.
#[tokio::test]
async fn gpu_samples_carry_no_findings_about_a_gpu_another_team_holds() {
    let s = TestServer::start().await;
    node(&s);
    let vision = token(&s, "vera", &["vision"]);
    let nlp = token(&s, "nils", &["nlp"]);
    let held = wait_placed(&s, submit(&s, &vision, SECRET).await).await;
    let findings = |gpus: &[Value], uuid: &str| -> Vec<Value> {
        let g = gpus.iter().find(|g| g["gpu"]["uuid"] == uuid).expect("the GPU is listed");
        g["gpu"]["sample"]["findings"].as_array().cloned().unwrap_or_default()
    };
    let free = if held == "GPU-0" { "GPU-1" } else { "GPU-0" };
    let as_ = |t: &str| s.http.get(format!("{}/v1/gpus", s.url)).bearer_auth(t.to_owned());
    let theirs: Vec<Value> = json_of(as_(&vision)).await;
    assert_eq!(findings(&theirs, &held).len(), 1, "vision sees its own GPU's finding");
    let others: Vec<Value> = json_of(as_(&nlp)).await;
    assert_eq!(findings(&others, &held), Vec::<Value>::new(), "nlp sees vision's GPU's finding");
    assert_eq!(findings(&others, free).len(), 1, "a free GPU's finding is everyone's");

    let mut stream =
        s.http.get(format!("{}/v1/watch", s.url)).bearer_auth(nlp.clone()).send().await.expect("send");
    let (text, _) = read_stream(&mut stream, Duration::from_secs(2)).await;
    let gpus = events(&text, "gpus");
    assert_eq!(findings(&gpus, &held), Vec::<Value>::new(), "the stream shows nlp vision's finding");
    assert_eq!(findings(&gpus, free).len(), 1);
}
