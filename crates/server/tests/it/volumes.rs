//! Volumes over HTTP: created by operators and admins, listed by their team only, mounted by
//! their team's jobs only, and a node-local one holds its jobs to its node.

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

#[tokio::test]
async fn a_node_local_volume_holds_its_jobs_to_its_node_and_stays_its_teams() {
    let s = TestServer::start_with(|c, dir| c.volume_roots = vec![dir.join("shared")]).await;
    let mut nodes = Vec::new();
    for node in ["n1", "n2"] {
        let credential = gantry_server::create_node_credential(&*s.store, node).expect("credential");
        let register =
            json!({"node_id": node, "hostname": node, "cpu_milli": 8000, "memory_mib": 65536, "gpus": []});
        let resp =
            s.http.post(format!("{}/v1/agent/register", s.url)).bearer_auth(&credential).json(&register);
        let registered: Value = resp.send().await.expect("send").json().await.expect("json");
        nodes.push((node, credential, registered["epoch"].as_u64().expect("epoch")));
    }
    let alice = token(&s, "alice", Role::Member, &["vision"]);
    let carol = token(&s, "carol", Role::Member, &["nlp"]);
    let create = |tok: &str, body: Value| call(&s, tok, Method::POST, "/v1/volumes").json(&body).send();
    // Members do not create volumes; two nodes need one named; a path must be under a root.
    assert_eq!(
        create(&alice, json!({"name": "data", "team": "vision"})).await.expect("send").status(),
        StatusCode::FORBIDDEN
    );
    let resp = create(&s.token, json!({"name": "data", "team": "vision"})).await.expect("send");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let resp = create(&s.token, json!({"name": "x", "team": "vision", "path": "/etc"})).await.expect("send");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let shared = s.dir.path().join("shared/vision/ckpt").display().to_string();
    let resp =
        create(&s.token, json!({"name": "ckpt", "team": "vision", "path": shared})).await.expect("send");
    assert_eq!(resp.status(), StatusCode::CREATED);
    let resp = create(&s.token, json!({"name": "data", "team": "vision", "node": "n2"})).await.expect("send");
    assert_eq!(resp.status(), StatusCode::CREATED);
    let again =
        create(&s.token, json!({"name": "data", "team": "vision", "node": "n1"})).await.expect("send");
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let listed: Vec<Value> =
        call(&s, &carol, Method::GET, "/v1/volumes").send().await.expect("send").json().await.expect("json");
    assert!(listed.is_empty(), "another team's volumes are not listed: {listed:?}");
    // Another team cannot mount it; its own team's job runs on its node with both mounted.
    let job = json!({"command": ["true"], "volumes": [{"name": "data", "path": "/mnt/data"},
        {"name": "ckpt", "path": "/mnt/ckpt", "read_only": true}]});
    let resp = call(&s, &carol, Method::POST, "/v1/jobs").json(&job).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let resp = call(&s, &alice, Method::POST, "/v1/jobs").json(&job).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::CREATED);
    let mut seen: Vec<(&str, Value)> = Vec::new();
    for _ in 0..50 {
        for (node, credential, epoch) in &nodes {
            let hb = json!({"node_id": node, "epoch": epoch, "gpus": [], "jobs": [], "logs": []});
            let resp = s.http.post(format!("{}/v1/agent/heartbeat", s.url)).bearer_auth(credential).json(&hb);
            let answer: Value = resp.send().await.expect("send").json().await.expect("json");
            for a in answer["assignments"].as_array().cloned().unwrap_or_default() {
                seen.push((node, a));
            }
        }
        if !seen.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let [(node, a)] = seen.as_slice() else { panic!("one assignment: {seen:?}") };
    assert_eq!(*node, "n2", "the node-local volume's node");
    let volumes = a["volumes"].as_array().cloned().unwrap_or_default();
    assert_eq!(volumes.len(), 2, "{a}");
    assert!(
        volumes.iter().any(|v| v["name"] == "ckpt" && v["read_only"] == true && v["source"] == shared),
        "{a}"
    );
    // A volume a job mounts is not deleted under it.
    let resp = call(&s, &s.token, Method::DELETE, "/v1/volumes/data?team=vision").send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::CONFLICT);
}
