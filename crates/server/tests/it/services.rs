//! The service routes over HTTP, in process (no agent: replicas stay pending): a file is
//! checked with sentences, applying it again is a no-op, a changed one is a new generation, a
//! service is its team's, and every apply and delete is in the audit log.

use std::time::Duration;

use gantry_store::{Role, User};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::TestServer;

fn token(s: &TestServer, name: &str, role: Role, teams: &[&str]) -> String {
    let user = User { name: name.into(), role, teams: teams.iter().map(|t| (*t).to_owned()).collect() };
    gantry_server::create_user_token(&*s.store, &user, Duration::from_secs(3600)).expect("user token")
}

fn call(s: &TestServer, token: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
    s.http.request(method, format!("{}{path}", s.url)).bearer_auth(token)
}

async fn apply(s: &TestServer, token: &str, body: &Value) -> (StatusCode, Value) {
    let resp = call(s, token, Method::POST, "/v1/services").json(body).send().await.expect("send");
    (resp.status(), resp.json().await.expect("json"))
}

fn echo() -> Value {
    json!({"name": "echo", "replicas": "1..4", "port": 8000, "command": ["python3", "server.py"],
           "readiness": {"path": "/health", "interval_s": 2, "timeout_s": 1, "initial_delay_s": 0, "failure_threshold": 3},
           "max_concurrency": 4, "scale_to_zero_after": "15m",
           "autoscale": {"sync_s": 15, "tolerance": 0.1, "metrics": [{"type": "in_flight", "target": 2}]}})
}

#[tokio::test]
async fn a_service_file_is_created_then_unchanged_then_configured_and_a_bad_one_gets_a_sentence() {
    let s = TestServer::start().await;
    let ana = token(&s, "ana", Role::Member, &["ml"]);
    let (status, body) = apply(&s, &ana, &echo()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["action"].as_str(), body["team"].as_str(), body["generation"].as_u64()),
        (Some("created"), Some("ml"), Some(1))
    );
    let (_, again) = apply(&s, &ana, &echo()).await;
    assert_eq!(again["action"], "unchanged");
    let mut changed = echo();
    changed["max_concurrency"] = json!(8);
    let (_, configured) = apply(&s, &ana, &changed).await;
    assert_eq!(
        (configured["action"].as_str(), configured["generation"].as_u64()),
        (Some("configured"), Some(2))
    );

    let cases = [
        (json!({"name": "x", "port": 1, "command": ["x"], "replica": 2}), "unknown field `replica`"),
        (json!({"name": "x", "port": 1, "command": ["x"], "replicas": "3..1"}), "the range 3..1 is empty"),
        (json!({"name": "x", "port": 1, "command": ["x"], "gpus": 1, "gpu_memory": 100}), "not both"),
        (
            json!({"name": "x", "port": 1, "command": ["x"], "autoscale": {"metrics": []}}),
            "autoscale.metrics needs at least one metric",
        ),
        (
            json!({"name": "x", "port": 1, "command": ["x"], "autoscale": {"metrics": [{"type": "qps", "target": 1}]}}),
            "autoscale: unknown variant `qps`",
        ),
        (
            json!({"name": "x", "port": 1, "command": ["x"], "autoscale": {"policy": "gantry"}}),
            "autoscale.replica_rps: policy: gantry needs",
        ),
        (json!({"name": "x", "port": 1, "command": ["x"], "env": {"PORT": "1"}}), "PORT is set by Gantry"),
    ];
    for (file, sentence) in cases {
        let (status, body) = apply(&s, &ana, &file).await;
        assert!(status.is_client_error(), "{file} got {status}");
        assert!(body["error"].as_str().is_some_and(|e| e.contains(sentence)), "{file}: {body}");
    }
}

#[tokio::test]
async fn a_service_is_its_teams_another_team_gets_404_and_every_change_is_audited() {
    let s = TestServer::start().await;
    let ana = token(&s, "ana", Role::Member, &["ml"]);
    let bo = token(&s, "bo", Role::Member, &["cv"]);
    assert_eq!(apply(&s, &ana, &echo()).await.0, StatusCode::OK);
    let mine = call(&s, &ana, Method::GET, "/v1/services/echo").send().await.expect("send");
    assert_eq!(mine.status(), StatusCode::OK);
    let view: Value = mine.json().await.expect("json");
    assert_eq!((view["replicas"]["min"].as_u64(), view["replicas"]["max"].as_u64()), (Some(1), Some(4)));
    for path in ["/v1/services/echo?team=ml", "/v1/services/nothing?team=ml"] {
        let theirs = call(&s, &bo, Method::GET, path).send().await.expect("send");
        assert_eq!(
            theirs.status(),
            StatusCode::NOT_FOUND,
            "{path}: the same answer for another team's and none"
        );
    }
    let listed: Vec<Value> =
        call(&s, &bo, Method::GET, "/v1/services").send().await.expect("send").json().await.expect("json");
    assert!(listed.is_empty(), "another team lists none: {listed:?}");
    let mut into_ml = echo();
    into_ml["team"] = json!("ml");
    assert_eq!(
        apply(&s, &bo, &into_ml).await.0,
        StatusCode::FORBIDDEN,
        "a member of cv cannot apply into ml"
    );
    let delete = call(&s, &bo, Method::DELETE, "/v1/services/echo?team=ml").send().await.expect("send");
    assert_eq!(delete.status(), StatusCode::NOT_FOUND);
    let delete = call(&s, &ana, Method::DELETE, "/v1/services/echo").send().await.expect("send");
    assert_eq!(delete.status(), StatusCode::NO_CONTENT);
    let gone = call(&s, &ana, Method::GET, "/v1/services/echo").send().await.expect("send");
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    let rows: Vec<Value> = crate::json_of(s.get("/v1/audit")).await;
    let actions: Vec<(&str, &str)> = rows
        .iter()
        .filter(|r| r["action"].as_str().is_some_and(|a| a.starts_with("service.")))
        .map(|r| (r["action"].as_str().unwrap_or(""), r["outcome"].as_str().unwrap_or("")))
        .collect();
    assert!(
        actions.contains(&("service.apply", "ok")) && actions.contains(&("service.delete", "ok")),
        "{actions:?}"
    );
    assert!(actions.iter().any(|(a, o)| *a == "service.apply" && o.starts_with("denied")), "{actions:?}");
}

#[tokio::test]
async fn replica_ports_are_each_nodes_so_two_nodes_run_twice_the_range_and_pending_replicas_hold_none() {
    // Ports were chosen cluster-wide as replicas were submitted: pending ones held them, and a
    // range of two ran two replicas however many nodes there were.
    let s = TestServer::start_with(|c, _| c.service_ports = (20000, 20001)).await;
    let ana = token(&s, "ana", Role::Member, &["ml"]);
    let mut nodes = Vec::new();
    for node in ["n1", "n2"] {
        let credential = gantry_server::create_node_credential(&*s.store, node).expect("credential");
        let register = json!({"node_id": node, "hostname": node, "cpu_milli": 8000, "memory_mib": 65536,
            "gpus": []});
        let resp =
            s.http.post(format!("{}/v1/agent/register", s.url)).bearer_auth(&credential).json(&register);
        let registered: Value = resp.send().await.expect("send").json().await.expect("json");
        nodes.push((node, credential, registered["epoch"].as_u64().expect("epoch")));
    }
    let file = json!({"name": "web", "replicas": 5, "port": 8000, "command": ["python3", "server.py"],
        "cpu": 1, "memory": 1024});
    let (status, body) = apply(&s, &ana, &file).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut ports: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for _ in 0..100 {
        ports.clear();
        for (node, credential, epoch) in &nodes {
            let hb = json!({"node_id": node, "epoch": epoch, "gpus": [], "jobs": [], "logs": []});
            let resp = s.http.post(format!("{}/v1/agent/heartbeat", s.url)).bearer_auth(credential).json(&hb);
            let answer: Value = resp.send().await.expect("send").json().await.expect("json");
            let assigned = answer["assignments"].as_array().cloned().unwrap_or_default();
            let mut mine: Vec<u64> = assigned.iter().filter_map(|a| a["port"].as_u64()).collect();
            mine.sort_unstable();
            ports.insert(node, mine);
        }
        if ports.values().map(Vec::len).sum::<usize>() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (node, got) in &ports {
        assert!(got.len() <= 2, "a node never hands out a port twice: {ports:?}");
        assert!(got.iter().all(|p| (20000..=20001).contains(p)), "{node}: {got:?}");
    }
    assert_eq!(ports.values().map(Vec::len).sum::<usize>(), 4, "two replicas per node run: {ports:?}");
}
