//! Staging declared inputs over the agents' channel (`POST /v1/agent/staging`): a gang with
//! inputs is staged on each node its workers would go to, holding no GPU, and is placed only
//! when every node reports its inputs staged, on those nodes.

use std::time::Duration;

use gantry_store::JobState;
use reqwest::Method;
use serde_json::{Value, json};

use crate::TestServer;

fn call(s: &TestServer, token: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
    s.http.request(method, format!("{}{path}", s.url)).bearer_auth(token)
}

/// Registers `node` with `gpus` GPUs; its credential and epoch.
pub(crate) async fn node(s: &TestServer, node: &str, gpus: usize) -> (String, u64) {
    let credential = gantry_server::create_node_credential(&*s.store, node).expect("credential");
    let gpus: Vec<Value> = (0..gpus)
        .map(|i| json!({"uuid": format!("GPU-{node}-{i}"), "index": i, "model": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920}))
        .collect();
    let body =
        json!({"node_id": node, "hostname": node, "cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus});
    let resp =
        call(s, &credential, Method::POST, "/v1/agent/register").json(&body).send().await.expect("send");
    assert!(resp.status().is_success(), "{}", resp.status());
    (credential, resp.json::<Value>().await.expect("json")["epoch"].as_u64().expect("epoch"))
}

/// Reports `done` for each of `jobs` to the staging channel as `name`; the job ids ordered of it.
async fn staging(s: &TestServer, name: &str, (credential, epoch): &(String, u64), done: &[i64]) -> Vec<i64> {
    let reports: Vec<Value> = done
        .iter()
        .map(|id| json!({"job_id": id, "done": true, "bytes_done": 4, "bytes_total": 4, "rate_bps": 0,
            "inputs": [{"name": "data", "url": "s3://bucket/data", "bytes": 4, "cache_hit": false, "staged_s": 0.1}]}))
        .collect();
    let body = json!({"node_id": name, "epoch": epoch, "reports": reports, "cache": []});
    let resp = call(s, credential, Method::POST, "/v1/agent/staging").json(&body).send().await.expect("send");
    assert!(resp.status().is_success(), "{}", resp.status());
    let answer: Value = resp.json().await.expect("json");
    let orders = answer["orders"].as_array().cloned().unwrap_or_default();
    orders.iter().filter_map(|o| o["job_id"].as_i64()).collect()
}

fn state(s: &TestServer, id: i64) -> JobState {
    s.store.job(id).expect("job").expect("exists").state
}

#[tokio::test]
async fn a_gang_with_inputs_is_staged_on_each_node_before_it_holds_gpus_and_placed_there_once_staged() {
    let s = TestServer::start_with(|c, _| c.schedule_interval = Duration::from_millis(50)).await;
    let nodes = [("n1", node(&s, "n1", 8).await), ("n2", node(&s, "n2", 8).await)];
    let body = json!({"command": ["train"], "gpus": 8, "replicas": 2,
        "inputs": [{"name": "data", "url": "s3://bucket/data"}]});
    let resp = s.post("/v1/jobs").json(&body).send().await.expect("send");
    assert!(resp.status().is_success(), "{}", resp.status());
    let gang = resp.json::<Value>().await.expect("json")["id"].as_i64().expect("id");

    // Each node is ordered one staging, named by a worker of the gang; nothing is placed.
    let mut ordered = vec![Vec::new(), Vec::new()];
    for _ in 0..200 {
        for (i, (name, n)) in nodes.iter().enumerate() {
            ordered[i] = staging(&s, name, n, &[]).await;
        }
        if ordered.iter().all(|o| !o.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ordered.iter().all(|o| o.len() == 1), "one staging per node: {ordered:?}");
    let workers: Vec<i64> = ordered.iter().flatten().copied().collect();
    for w in &workers {
        let job = s.store.job(*w).expect("job").expect("worker");
        assert_eq!(job.gang.as_ref().map(|g| g.id), Some(gang), "a worker of the gang names it");
    }
    assert_eq!(state(&s, gang), JobState::Pending);

    // One node done: the gang still waits, holding nothing.
    let _ = staging(&s, nodes[0].0, &nodes[0].1, &ordered[0]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(state(&s, gang), JobState::Pending, "the other node is not staged yet");
    assert!(workers.iter().all(|w| state(&s, *w) == JobState::Pending));

    // Both done: its workers are placed, one on each node.
    let _ = staging(&s, nodes[1].0, &nodes[1].1, &ordered[1]).await;
    for _ in 0..200 {
        if workers.iter().all(|w| state(&s, *w) != JobState::Pending) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut on: Vec<String> = workers
        .iter()
        .map(|w| s.store.job(*w).expect("job").expect("worker").node_id.unwrap_or_default())
        .collect();
    on.sort();
    assert_eq!(on, ["n1", "n2"], "placed on the nodes that staged its inputs");
    let staged = s.store.job(workers[0]).expect("job").expect("worker").inputs;
    assert_eq!(staged[0].bytes, Some(4), "what staging found is recorded on the worker: {staged:?}");
}

#[tokio::test]
async fn only_an_admin_marks_a_source_public_audited_and_its_stagings_say_so() {
    let s = TestServer::start_with(|c, _| c.schedule_interval = Duration::from_millis(50)).await;
    let resp = s.post("/v1/tokens").json(&json!({"team": "vision"})).send().await.expect("send");
    let user = resp.json::<Value>().await.expect("json")["token"].as_str().expect("token").to_owned();
    let set = |token: &str, url: &str, public: bool| {
        call(&s, token, Method::PUT, "/v1/cache/public").json(&json!({"url": url, "public": public})).send()
    };
    let resp = set(&user, "s3://datasets/imagenet", true).await.expect("send");
    assert_eq!(resp.status(), reqwest::StatusCode::FORBIDDEN, "a team's member may not");
    let resp = set(&s.token, "ftp://nope", true).await.expect("send");
    assert_eq!(resp.status(), reqwest::StatusCode::UNPROCESSABLE_ENTITY, "not an input URL");
    let resp = set(&s.token, "s3://datasets/imagenet", true).await.expect("send");
    assert_eq!(resp.status(), reqwest::StatusCode::NO_CONTENT);
    let listed: Vec<Value> = call(&s, &user, Method::GET, "/v1/cache/public")
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["url"], "s3://datasets/imagenet");
    let audit = format!("{:?}", s.store.audit_rows(0, None, 100).expect("audit"));
    assert!(audit.contains("cache.public") && audit.contains("source/s3://datasets/imagenet"), "{audit}");

    // A job reading under the public source and a private one: its order names the public one.
    let n1 = node(&s, "n1", 8).await;
    let body = json!({"command": ["train"], "gpus": 1, "inputs": [
        {"name": "train", "url": "s3://datasets/imagenet/train"},
        {"name": "mine", "url": "s3://datasets/imagenet-private"}]});
    let resp = call(&s, &user, Method::POST, "/v1/jobs").json(&body).send().await.expect("send");
    assert!(resp.status().is_success(), "{}", resp.status());
    let mut order = Value::Null;
    for _ in 0..200 {
        let body = json!({"node_id": "n1", "epoch": n1.1, "reports": [], "cache": []});
        let resp = call(&s, &n1.0, Method::POST, "/v1/agent/staging").json(&body).send().await.expect("send");
        let answer: Value = resp.json().await.expect("json");
        if let Some(o) = answer["orders"].as_array().and_then(|o| o.first()) {
            order = o.clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(order["public"], json!(["train"]), "{order}");
}
