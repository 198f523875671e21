use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::TestServer;

pub async fn error_of(resp: reqwest::Response) -> String {
    let body: Value = resp.json().await.expect("json error body");
    body["error"].as_str().expect("error field").to_owned()
}

#[tokio::test]
async fn a_request_without_a_token_gets_401_and_healthz_needs_none() {
    let s = TestServer::start().await;
    let resp = s.http.get(format!("{}/v1/jobs", s.url)).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let resp = s.http.get(format!("{}/v1/jobs", s.url)).bearer_auth("gty_wrong").send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let resp = s.http.get(format!("{}/healthz", s.url)).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    // A lone server on SQLite leads without an election.
    let health: Value = resp.json().await.expect("json");
    assert_eq!(health, json!({"status": "ok", "role": "leader", "epoch": 0}));
}

#[tokio::test]
async fn malformed_json_gets_400_with_a_message() {
    let s = TestServer::start().await;
    let resp = s
        .post("/v1/jobs")
        .header("content-type", "application/json")
        .body("{\"command\": [")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(!error_of(resp).await.is_empty());
}

#[tokio::test]
async fn a_wrongly_typed_or_unknown_field_gets_422_naming_the_field() {
    let s = TestServer::start().await;
    let resp =
        s.post("/v1/jobs").json(&json!({"command": ["true"], "gpus": "two"})).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(error_of(resp).await.contains("gpus"));
    let resp = s.post("/v1/jobs").json(&json!({"command": ["true"], "gpu": 1})).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(error_of(resp).await.contains("gpu"));
    let resp = s.post("/v1/jobs").json(&json!({"command": []})).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(error_of(resp).await.starts_with("command:"));
    let body = json!({"command": ["true"], "gpus": 1, "gpu_memory_mib": 1000});
    let resp = s.post("/v1/jobs").json(&body).send().await.expect("send");
    assert!(error_of(resp).await.starts_with("gpu_memory_mib:"));
}

#[tokio::test]
async fn a_body_refused_while_read_is_said_from_the_field_on() {
    let s = TestServer::start().await;
    for (body, field) in [
        (json!({"command": ["true"], "gpus": "two"}), "gpus: "),
        (json!({"command": ["true"], "array": "9-0"}), "array: "),
        (json!({"command": ["true"], "after": [{"kind": "maybe", "job": 1}]}), "after[0].kind: "),
    ] {
        let resp = s.post("/v1/jobs").json(&body).send().await.expect("send");
        assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let error = error_of(resp).await;
        assert!(error.starts_with(field), "{body}: {error}");
    }
}

#[tokio::test]
async fn an_unknown_job_gets_404() {
    let s = TestServer::start().await;
    for path in ["/v1/jobs/4242", "/v1/jobs/4242/logs"] {
        let resp = s.get(path).send().await.expect("send");
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
        assert!(error_of(resp).await.contains("4242"));
    }
    let resp = s.post("/v1/jobs/4242/cancel").send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused() {
    let s = TestServer::start().await;
    let huge = "x".repeat(2 << 20);
    let resp = s.post("/v1/jobs").json(&json!({"command": [huge]})).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn a_submission_is_listed_and_a_retry_with_the_same_request_id_is_the_same_job() {
    let s = TestServer::start().await;
    let body = json!({"command": ["echo", "hi"], "gpus": 1, "request_id": "r-1"});
    let first: Value = s.post("/v1/jobs").json(&body).send().await.expect("send").json().await.expect("json");
    let again: Value = s.post("/v1/jobs").json(&body).send().await.expect("send").json().await.expect("json");
    assert_eq!(first["id"], again["id"]);
    assert_eq!((first["created"].as_bool(), again["created"].as_bool()), (Some(true), Some(false)));
    let jobs: Vec<Value> = s.get("/v1/jobs").send().await.expect("send").json().await.expect("json");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["state"], "pending");
    let detail: Value =
        s.get(&format!("/v1/jobs/{}", first["id"])).send().await.expect("send").json().await.expect("json");
    assert_eq!(detail["job"]["name"], "echo");
}

#[tokio::test]
async fn a_user_token_is_bound_to_its_team_and_cannot_create_tokens() {
    let s = TestServer::start().await;
    let resp = s.post("/v1/tokens").json(&json!({"team": "vision"})).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::CREATED);
    let token = resp.json::<Value>().await.expect("json")["token"].as_str().expect("token").to_owned();
    let as_user = |path: &str| s.http.post(format!("{}{path}", s.url)).bearer_auth(&token);
    let ok: Value = as_user("/v1/jobs")
        .json(&json!({"command": ["true"]}))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    let id = ok["id"].as_i64().expect("id");
    let job: Value = s.get(&format!("/v1/jobs/{id}")).send().await.expect("send").json().await.expect("json");
    assert_eq!(job["job"]["team"], "vision");
    let resp =
        as_user("/v1/jobs").json(&json!({"command": ["true"], "team": "nlp"})).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let resp = as_user("/v1/tokens").json(&json!({"team": "vision"})).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn the_openapi_document_and_metrics_are_served() {
    let s = TestServer::start().await;
    let doc: Value = s.get("/openapi.json").send().await.expect("send").json().await.expect("json");
    for path in [
        "/v1/jobs",
        "/v1/jobs/{id}",
        "/v1/jobs/{id}/cancel",
        "/v1/jobs/{id}/logs",
        "/v1/nodes",
        "/v1/gpus",
        "/v1/agent/heartbeat",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing from the OpenAPI document");
    }
    s.post("/v1/jobs").json(&json!({"command": ["true"], "team": "a"})).send().await.expect("send");
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let text = s.get("/metrics").send().await.expect("send").text().await.expect("text");
    for name in
        ["gantry_queue_length", "gantry_jobs", "gantry_placement_latency_seconds", "gantry_submissions_total"]
    {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    assert!(text.contains("gantry_queue_length{team=\"a\"} 1"), "{text}");
    let events: Vec<Value> =
        s.get("/v1/events?limit=5").send().await.expect("send").json().await.expect("json");
    assert_eq!(events[0]["kind"], "token.created", "the admin token's creation is an event");
}

#[test]
fn the_checked_in_openapi_document_is_current() {
    use utoipa::OpenApi;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let generated = gantry_server::api::ApiDoc::openapi().to_pretty_json().expect("serialise") + "\n";
    if std::env::var_os("GANTRY_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).expect("write openapi.json");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "crates/server/openapi.json is stale; rerun with GANTRY_UPDATE_OPENAPI=1"
    );
}

#[tokio::test]
async fn an_admin_sets_a_team_quota_and_teams_list_their_queues() {
    let s = TestServer::start().await;
    let put = s.http.put(format!("{}/v1/teams/vision", s.url)).bearer_auth(&s.token);
    let resp = put.json(&json!({"gpu_quota": 2})).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    s.post("/v1/jobs").json(&json!({"command": ["true"], "team": "vision"})).send().await.expect("send");
    let teams: Vec<Value> = s.get("/v1/teams").send().await.expect("send").json().await.expect("json");
    assert_eq!(teams.len(), 1);
    assert_eq!((teams[0]["name"].as_str(), teams[0]["gpu_quota"].as_u64()), (Some("vision"), Some(2)));
    assert_eq!(teams[0]["pending"], 1);
    let bad = s.http.put(format!("{}/v1/teams/no%20spaces", s.url)).bearer_auth(&s.token);
    let resp = bad.json(&json!({"gpu_quota": 1})).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn bad_workflow_fields_get_422_naming_the_field_whatever_the_client_checked() {
    let s = TestServer::start().await;
    let cases = [
        (json!({"command": ["true"], "array": "9-0"}), "array:"),
        (json!({"command": ["true"], "array": "0-99999"}), "array:"),
        (json!({"command": ["true"], "workdir": "/etc"}), "workdir:"),
        (json!({"command": ["true"], "workdir": "a/../../b"}), "workdir:"),
        (json!({"command": ["true"], "labels": {"a b": "c"}}), "label:"),
        (json!({"command": ["true"], "labels": {"k": "v w"}}), "label:"),
        (json!({"command": ["true"], "gpu_models": ["A100"]}), "gpu_models:"),
        (json!({"command": ["true"], "after": [{"kind": "ok", "job": 0}]}), "after:"),
        (json!({"command": ["true"], "after": [{"kind": "maybe", "job": 1}]}), "after"),
    ];
    for (body, field) in cases {
        let resp = s.post("/v1/jobs").json(&body).send().await.expect("send");
        assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let error = error_of(resp).await;
        assert!(error.contains(field), "{body}: {error}");
    }
    let resp = s.post("/v1/jobs").json(&json!({"command": ["true"], "after": [{"kind": "ok", "job": 4242}]}));
    let resp = resp.send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let resp = s.get("/v1/jobs?label=nope").send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}
