//! Crash test: 1,000 submissions from 8 concurrent clients while `gantry up` is SIGKILLed and
//! restarted 5 times. Every acknowledged submission exists exactly once afterwards, and the
//! store's allocation history never gave a GPU to two jobs at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gantry_store::{JobFilter, Store};

use crate::harness::Cluster;

const CLIENTS: usize = 8;
const PER_CLIENT: usize = 125;

async fn client(
    http: reqwest::Client,
    (url, token): (String, String),
    c: usize,
    acked: Arc<Mutex<Vec<(String, i64)>>>,
) {
    let deadline = Instant::now() + Duration::from_secs(100);
    for i in 0..PER_CLIENT {
        let key = format!("crash-{c}-{i}");
        let body = serde_json::json!({
            "command": ["sleep", "0.2"], "gpus": 1, "request_id": key, "max_retries": 100
        });
        loop {
            assert!(Instant::now() < deadline, "client {c} could not submit {key}");
            let sent = http.post(format!("{url}/v1/jobs")).bearer_auth(&token).json(&body).send().await;
            if let Ok(resp) = sent
                && resp.status().is_success()
                && let Ok(v) = resp.json::<serde_json::Value>().await
                && let Some(id) = v["id"].as_i64()
            {
                acked.lock().expect("lock").push((key, id));
                // Pace the clients so all five crashes land while submissions are in flight.
                tokio::time::sleep(Duration::from_millis(15)).await;
                break;
            }
            // Not acknowledged (server down or killed mid-request): retry with the same key.
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
}

/// A small xorshift: the kill moments only need to vary, not to be good random numbers.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn acknowledged_submissions_survive_sigkill_exactly_once_and_no_gpu_is_double_allocated() {
    let mut cluster = Cluster::start(&["--simulated-gpus", "4xA100-80GB", "--grace", "1"]);
    let (url, token) = (cluster.url(), cluster.token());
    let http = cluster.http_builder().timeout(Duration::from_secs(5)).build().expect("client");
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let acked = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| rt.spawn(client(http.clone(), (url.clone(), token.clone()), c, Arc::clone(&acked))))
        .collect();
    let mut seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64)
            | 1;
    let started = Instant::now();
    while acked.lock().expect("lock").len() < 50 && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    for round in 0..5 {
        let pause = 100 + next(&mut seed) % 300;
        std::thread::sleep(Duration::from_millis(pause));
        eprintln!(
            "crash round {round}: SIGKILL after {pause} ms, {} acknowledged",
            acked.lock().expect("lock").len()
        );
        cluster.kill();
        cluster.restart();
    }
    for t in tasks {
        rt.block_on(t).expect("client task");
    }
    // Let jobs run for a while, then crash once more before checking.
    std::thread::sleep(Duration::from_secs(2));
    cluster.kill();
    let acked = acked.lock().expect("lock").clone();
    assert_eq!(acked.len(), CLIENTS * PER_CLIENT);
    let keys: HashSet<&str> = acked.iter().map(|(k, _)| k.as_str()).collect();
    let ids: HashSet<i64> = acked.iter().map(|(_, id)| *id).collect();
    assert_eq!((keys.len(), ids.len()), (acked.len(), acked.len()), "one id per acknowledged key");
    let store = cluster.store();
    let jobs = store.jobs(&JobFilter::default()).expect("jobs");
    let stored: HashSet<i64> = jobs.iter().map(|j| j.id).collect();
    assert_eq!(jobs.len(), acked.len(), "no job was stored twice");
    assert_eq!(stored, ids, "every acknowledged job exists");
    cluster.assert_no_double_allocation();
    let placed = store.allocations(false).expect("history").len();
    eprintln!("{} jobs, {placed} allocations in the history", jobs.len());
}
