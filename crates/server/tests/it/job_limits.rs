//! A team's `pids_limit`, a node's defaults for jobs that ask for nothing, and the limits a
//! job's detail shows.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::TestServer;
use crate::api::error_of;

async fn put_team(s: &TestServer, body: Value) -> reqwest::Response {
    s.http
        .put(format!("{}/v1/teams/vision", s.url))
        .bearer_auth(&s.token)
        .json(&body)
        .send()
        .await
        .expect("send")
}

async fn vision(s: &TestServer) -> Value {
    let teams: Vec<Value> = s.get("/v1/teams").send().await.expect("send").json().await.expect("json");
    teams.into_iter().find(|t| t["name"] == "vision").expect("team vision")
}

async fn submit(s: &TestServer, body: Value) -> i64 {
    let resp = s.post("/v1/jobs").json(&body).send().await.expect("send");
    resp.json::<Value>().await.expect("json")["id"].as_i64().expect("id")
}

async fn limits(s: &TestServer, id: i64) -> Value {
    let detail: Value =
        s.get(&format!("/v1/jobs/{id}")).send().await.expect("send").json().await.expect("json");
    detail["limits"].clone()
}

#[tokio::test]
async fn a_teams_pids_limit_is_kept_until_changed_cleared_with_zero_and_bounded() {
    let s = TestServer::start().await;
    assert_eq!(
        put_team(&s, json!({"gpu_quota": 2, "pids_limit": 128})).await.status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(vision(&s).await["pids_limit"], 128);
    assert_eq!(put_team(&s, json!({"gpu_quota": 3})).await.status(), StatusCode::NO_CONTENT);
    let team = vision(&s).await;
    assert_eq!((team["gpu_quota"].as_u64(), team["pids_limit"].as_u64()), (Some(3), Some(128)), "{team}");
    assert_eq!(put_team(&s, json!({"gpu_quota": 3, "pids_limit": 0})).await.status(), StatusCode::NO_CONTENT);
    assert!(vision(&s).await.get("pids_limit").is_none(), "back to each node's default");
    let resp = put_team(&s, json!({"gpu_quota": 3, "pids_limit": 1_000_000_000u64})).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(error_of(resp).await.contains("pids_limit"));
}

#[tokio::test]
async fn a_job_gets_its_teams_pids_limit_and_its_detail_shows_the_nodes_defaults_it_runs_under() {
    let s = TestServer::start().await;
    assert_eq!(
        put_team(&s, json!({"gpu_quota": null, "pids_limit": 256})).await.status(),
        StatusCode::NO_CONTENT
    );
    let credential = gantry_server::create_node_credential(&*s.store, "n1").expect("credential");
    let defaults = json!({"memory_mib": 2048, "cpu_milli": 1500, "pids_max": 4096});
    let register = json!({"node_id": "n1", "hostname": "n1", "cpu_milli": 8000, "memory_mib": 65536,
        "gpus": [], "job_defaults": defaults});
    let resp = s.http.post(format!("{}/v1/agent/register", s.url)).bearer_auth(&credential).json(&register);
    let registered: Value = resp.send().await.expect("send").json().await.expect("json");
    let epoch = registered["epoch"].as_u64().expect("epoch");
    let plain = submit(&s, json!({"command": ["true"], "team": "vision"})).await;
    let sized = submit(&s, json!({"command": ["true"], "team": "other", "memory_mib": 512})).await;
    let mut assigned = Vec::new();
    for _ in 0..50 {
        let hb = json!({"node_id": "n1", "epoch": epoch, "gpus": [], "jobs": [], "logs": []});
        let resp = s.http.post(format!("{}/v1/agent/heartbeat", s.url)).bearer_auth(&credential).json(&hb);
        let answer: Value = resp.send().await.expect("send").json().await.expect("json");
        assigned = answer["assignments"].as_array().cloned().unwrap_or_default();
        if assigned.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let of = |id: i64| assigned.iter().find(|a| a["job_id"] == id).cloned().expect("assigned");
    assert_eq!(of(plain)["pids_limit"], 256, "the team's limit travels with the assignment");
    assert!(of(sized)["pids_limit"].is_null(), "a team without one leaves the node's default");
    assert_eq!(limits(&s, plain).await, json!({"memory_mib": 2048, "cpu_milli": 1500, "pids_max": 256}));
    assert_eq!(limits(&s, sized).await, json!({"memory_mib": 512, "cpu_milli": 1500, "pids_max": 4096}));
}
