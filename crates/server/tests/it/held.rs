//! Held heartbeats: an agent's heartbeat that asks to wait is answered as soon as its node's
//! work changes (a placement, a cancel), not when the hold ends; one that does not ask, or a
//! server that does not hold, is answered at once, as before.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::TestServer;

/// Far longer than any answer here may take: a test answered after it was not held-and-woken.
const HOLD: Duration = Duration::from_secs(10);

async fn server(hold: bool) -> TestServer {
    TestServer::start_with(|c, _| {
        c.heartbeat_interval = HOLD;
        c.heartbeat_timeout = HOLD * 6;
        c.schedule_interval = Duration::from_millis(100);
        c.hold_heartbeats = hold;
    })
    .await
}

/// Registers node n1 (8 cores, no GPU); its credential and epoch.
async fn register(s: &TestServer) -> (String, u64) {
    let credential = gantry_server::create_node_credential(&*s.store, "n1").expect("credential");
    let register =
        json!({"node_id": "n1", "hostname": "n1", "cpu_milli": 8000, "memory_mib": 65536, "gpus": []});
    let resp = s.http.post(format!("{}/v1/agent/register", s.url)).bearer_auth(&credential).json(&register);
    let registered: Value = resp.send().await.expect("send").json().await.expect("json");
    (credential, registered["epoch"].as_u64().expect("epoch"))
}

/// Sends a heartbeat reporting `jobs` (`[job id, attempt]`, running), with `query`; the answer.
fn heartbeat(
    s: &TestServer,
    node: &(String, u64),
    jobs: &[(i64, u32)],
    query: String,
) -> tokio::task::JoinHandle<Value> {
    let jobs: Vec<Value> =
        jobs.iter().map(|(id, a)| json!({"job_id": id, "attempt": a, "exit": null})).collect();
    let hb = json!({"node_id": "n1", "epoch": node.1, "gpus": [], "jobs": jobs});
    let req = s.http.post(format!("{}/v1/agent/heartbeat{query}", s.url)).bearer_auth(&node.0).json(&hb);
    tokio::spawn(async move {
        let resp = req.send().await.expect("send");
        assert!(resp.status().is_success(), "{}", resp.status());
        resp.json().await.expect("json")
    })
}

fn waiting(known: &Value) -> String {
    format!("?wait_ms={}&known={}", HOLD.as_millis(), known.as_str().expect("a version"))
}

/// Waits for a heartbeat answer, which must come well before the hold could have ended.
async fn answer(held: tokio::task::JoinHandle<Value>, since: Instant) -> Value {
    let answer =
        tokio::time::timeout(HOLD / 2, held).await.expect("answered before the hold ended").expect("join");
    assert!(since.elapsed() < HOLD / 2, "answered after {:?}", since.elapsed());
    answer
}

/// Still held (not answered) a while after it was sent.
async fn still_held(held: &tokio::task::JoinHandle<Value>) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "the heartbeat was answered although the node's work had not changed");
}

fn assigned(answer: &Value) -> Vec<i64> {
    let list = answer["assignments"].as_array().cloned().unwrap_or_default();
    list.iter().filter_map(|a| a["job_id"].as_i64()).collect()
}

#[tokio::test]
async fn a_held_heartbeat_is_answered_when_a_job_is_placed_on_its_node_and_when_it_is_cancelled() {
    let s = server(true).await;
    let node = register(&s).await;
    let started = Instant::now();
    let first = answer(heartbeat(&s, &node, &[], format!("?wait_ms={}", HOLD.as_millis())), started).await;
    assert_eq!(assigned(&first), Vec::<i64>::new());
    let held = heartbeat(&s, &node, &[], waiting(&first["version"]));
    still_held(&held).await;

    let submitted = Instant::now();
    let resp = s.post("/v1/jobs").json(&json!({"command": ["sleep", "600"]})).send().await.expect("send");
    let id = resp.json::<Value>().await.expect("json")["id"].as_i64().expect("id");
    let placed = answer(held, submitted).await;
    assert_eq!(assigned(&placed), vec![id], "{placed}");
    assert_ne!(placed["version"], first["version"]);

    // The agent starts it and reports it: held again, until the cancel.
    let held = heartbeat(&s, &node, &[(id, 1)], waiting(&placed["version"]));
    still_held(&held).await;
    let cancelled = Instant::now();
    let resp = s.post(&format!("/v1/jobs/{id}/cancel")).send().await.expect("send");
    assert!(resp.status().is_success(), "{}", resp.status());
    let stopped = answer(held, cancelled).await;
    assert_eq!(assigned(&stopped), Vec::<i64>::new(), "the cancelled job is no longer assigned: {stopped}");
}

#[tokio::test]
async fn a_heartbeat_whose_known_version_is_stale_is_answered_at_once() {
    let s = server(true).await;
    let node = register(&s).await;
    let started = Instant::now();
    let stale = answer(heartbeat(&s, &node, &[], waiting(&json!("0123456789abcdef"))), started).await;
    assert!(stale["version"].is_string(), "{stale}");
}

#[tokio::test]
async fn a_heartbeat_that_asks_no_wait_or_to_a_server_that_does_not_hold_is_answered_at_once_without_a_version()
 {
    let s = server(true).await;
    let node = register(&s).await;
    let started = Instant::now();
    let plain = answer(heartbeat(&s, &node, &[], String::new()), started).await;
    assert!(plain.get("version").is_none(), "an older agent's answer is as it was: {plain}");

    let s = server(false).await;
    let node = register(&s).await;
    let first = answer(heartbeat(&s, &node, &[], format!("?wait_ms={}", HOLD.as_millis())), started).await;
    assert!(first.get("version").is_none(), "{first}");
    let started = Instant::now();
    let again = answer(heartbeat(&s, &node, &[], waiting(&json!("0123456789abcdef"))), started).await;
    assert!(again.get("version").is_none(), "so its agents poll: {again}");
}

#[tokio::test]
async fn a_wake_from_the_node_answers_its_held_heartbeat_and_one_from_another_node_is_refused() {
    let s = server(true).await;
    let node = register(&s).await;
    let started = Instant::now();
    let first = answer(heartbeat(&s, &node, &[], format!("?wait_ms={}", HOLD.as_millis())), started).await;
    let held = heartbeat(&s, &node, &[], waiting(&first["version"]));
    still_held(&held).await;
    // Another node's credential may not cut n1's hold short.
    let other = gantry_server::create_node_credential(&*s.store, "n2").expect("credential");
    let wake = |credential: &str| {
        s.http
            .post(format!("{}/v1/agent/wake", s.url))
            .bearer_auth(credential)
            .json(&json!({"node_id": "n1"}))
            .send()
    };
    assert_eq!(wake(&other).await.expect("send").status(), reqwest::StatusCode::FORBIDDEN);
    still_held(&held).await;
    let unknown =
        s.http.post(format!("{}/v1/agent/wake", s.url)).bearer_auth(&node.0).json(&json!({"node": "n1"}));
    assert_eq!(unknown.send().await.expect("send").status(), reqwest::StatusCode::UNPROCESSABLE_ENTITY);
    // Its own agent, with a job's end to report: answered now, its work as it was.
    let started = Instant::now();
    assert_eq!(wake(&node.0).await.expect("send").status(), reqwest::StatusCode::NO_CONTENT);
    let woken = answer(held, started).await;
    assert_eq!(woken["version"], first["version"], "nothing changed but the hold: {woken}");
}
