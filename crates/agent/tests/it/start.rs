//! Event-driven start: with a heartbeat interval far longer than a start takes, a job placed
//! on an idle node starts, and a cancelled one is stopped, long before the agent's next poll
//! could have happened; against a server that does not hold heartbeats (an older one) the agent
//! polls, and jobs still run.

use std::time::{Duration, Instant};

use gantry_store::JobState;
use serde_json::{Value, json};

use crate::runner::{Harness, Setup, job, start_with, until};

/// The agent's heartbeat interval in the first test: a poll would take this long.
const POLL: Duration = Duration::from_secs(10);

/// Submits `command` (a shell line) as an admin over HTTP, as `gantry submit` does.
async fn submit(h: &Harness, http: &reqwest::Client, token: &str, command: &str) -> i64 {
    let body = json!({"command": ["sh", "-c", command], "team": "t"});
    let resp = http.post(format!("{}/v1/jobs", h.url())).bearer_auth(token).json(&body).send().await;
    let answer: Value = resp.expect("send").json().await.expect("json");
    answer["id"].as_i64().unwrap_or_else(|| panic!("submitted: {answer}"))
}

/// Waits for `check`, which must hold well before a poll could have happened.
async fn before_a_poll(what: &str, since: Instant, mut check: impl FnMut() -> bool) {
    while !check() {
        assert!(since.elapsed() < POLL / 2, "{what} took {:?}: it waited for a poll", since.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn ready(h: &Harness) {
    let store = &h.store;
    until("the node to register", || {
        store.nodes().ok()?.iter().any(|n| n.state == gantry_store::NodeState::Ready).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_placed_on_an_idle_node_starts_and_a_cancel_reaches_it_long_before_the_next_poll() {
    let h = start_with(Setup { heartbeat_interval: POLL, ..Setup::default() }).await;
    let token = gantry_server::ensure_admin_token(&*h.store).expect("token").expect("new store");
    let http = reqwest::Client::new();
    ready(&h).await;
    // The agent's first heartbeat has been answered; a polling agent's next is POLL away.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let marker = h.shared.join("stopped");
    let script =
        format!("trap 'echo stopped > {}; exit 0' TERM; while true; do sleep 0.05; done", marker.display());
    let submitted = Instant::now();
    let id = submit(&h, &http, &token, &script).await;
    before_a_poll("starting the job", submitted, || job(&*h.store, id).state == JobState::Running).await;

    let cancelled = Instant::now();
    let resp = http.post(format!("{}/v1/jobs/{id}/cancel", h.url())).bearer_auth(&token).send().await;
    assert!(resp.expect("send").status().is_success());
    before_a_poll("stopping the cancelled job", cancelled, || marker.exists()).await;
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_polls_a_server_that_does_not_hold_heartbeats_and_its_jobs_still_run() {
    let h = start_with(Setup { hold_heartbeats: false, ..Setup::default() }).await;
    let token = gantry_server::ensure_admin_token(&*h.store).expect("token").expect("new store");
    let http = reqwest::Client::new();
    ready(&h).await;
    let id = submit(&h, &http, &token, "exit 0").await;
    until("the job to succeed", || (job(&*h.store, id).state == JobState::Succeeded).then_some(())).await;
    let _ = h.stop.send(true);
}
