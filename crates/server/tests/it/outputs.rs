//! Declared outputs over the agents' channel (`POST /v1/agent/outputs`): a submission's
//! outputs are checked (names, URLs, the secret its team holds); only the node an attempt ran
//! on reports its uploads, and is answered the upload secret; a forged report from another
//! node is refused and changes nothing.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::TestServer;

fn call(s: &TestServer, token: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
    s.http.request(method, format!("{}{path}", s.url)).bearer_auth(token)
}

/// Registers `node` with 8 GPUs; its credential and epoch.
async fn node(s: &TestServer, node: &str) -> (String, u64) {
    crate::staging::node(s, node, 8).await
}

async fn submit(s: &TestServer, extra: Value) -> reqwest::Response {
    let mut body = json!({"command": ["train"], "gpus": 1});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    s.post("/v1/jobs").json(&body).send().await.expect("send")
}

async fn refused(s: &TestServer, extra: Value, says: &str) {
    let resp = submit(s, extra.clone()).await;
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "{extra}");
    let body = resp.text().await.expect("text");
    assert!(body.contains(says), "{extra}: {body}");
}

#[tokio::test]
async fn a_submissions_outputs_are_checked_with_a_sentence_each() {
    let s = TestServer::start().await;
    let out = |name: &str, url: &str| json!({"name": name, "url": url});
    refused(&s, json!({"outputs": [out("bad-name", "s3://bucket/p")]}), "is not a name").await;
    refused(&s, json!({"outputs": [out("m", "s3://bucket/p"), out("M", "s3://bucket/q")]}), "declared twice")
        .await;
    refused(
        &s,
        json!({"outputs": [out("m", "file:///shared/x")]}),
        "a job writes to shared (file://) storage itself",
    )
    .await;
    refused(&s, json!({"outputs": [out("m", "s3://Bad/x")]}), "S3 bucket").await;
    refused(
        &s,
        json!({"outputs": [out("m", "s3://bucket/p")], "output_secret": "nope"}),
        "has no secret `nope`",
    )
    .await;
    // Another team's secret is as unknown as none.
    let resp = call(&s, &s.token, Method::PUT, "/v1/secrets/theirs")
        .json(&json!({"team": "nlp", "data": {"AWS_ACCESS_KEY_ID": "k"}}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    refused(&s, json!({"outputs": [out("m", "s3://bucket/p")], "output_secret": "theirs"}), "has no secret")
        .await;
    refused(&s, json!({"output_secret": "theirs"}), "declare one").await;
    // Never with the node's own credentials, which could write where no team should.
    refused(
        &s,
        json!({"outputs": [out("m", "s3://bucket/p")]}),
        "the node's credentials are not lent for writes",
    )
    .await;
    // Nor with a secret that holds no keys (only a region or an endpoint): the agent would
    // otherwise have had to fill the keys in from somewhere.
    for data in [json!({"AWS_REGION": "us-east-1"}), json!({"AWS_ACCESS_KEY_ID": "k"})] {
        let resp = call(&s, &s.token, Method::PUT, "/v1/secrets/ours")
            .json(&json!({"team": "default", "data": data}))
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
        refused(
            &s,
            json!({"outputs": [out("m", "s3://bucket/p")], "output_secret": "ours"}),
            "holds no AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        )
        .await;
    }
    let resp = call(&s, &s.token, Method::PUT, "/v1/secrets/ours")
        .json(&json!({"team": "default", "data": {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    // A submitter's word for what an upload did is dropped.
    let resp = submit(
        &s,
        json!({"outputs": [{"name": "m", "url": "s3://bucket/p", "state": "uploaded", "files": 9}], "output_secret": "ours"}),
    )
    .await;
    assert!(resp.status().is_success(), "{}", resp.status());
    let id = resp.json::<Value>().await.expect("json")["id"].as_i64().expect("id");
    let job = s.store.job(id).expect("job").expect("exists");
    assert_eq!(job.outputs, [gantry_api::outputs::Output::new("m", "s3://bucket/p")]);
}

#[tokio::test]
async fn only_the_node_an_attempt_ran_on_reports_its_outputs_and_a_forged_report_changes_nothing() {
    let s = TestServer::start_with(|c, _| c.schedule_interval = Duration::from_millis(50)).await;
    let resp = call(&s, &s.token, Method::PUT, "/v1/secrets/out")
        .json(&json!({"team": "default", "data": {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "hush"}}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let n1 = node(&s, "n1").await;
    let resp = submit(
        &s,
        json!({"gpus": 8, "outputs": [{"name": "model", "url": "s3://bucket/run"}], "output_secret": "out"}),
    )
    .await;
    assert!(resp.status().is_success(), "{}", resp.status());
    let id = resp.json::<Value>().await.expect("json")["id"].as_i64().expect("id");
    let mut placed = None;
    for _ in 0..200 {
        placed = s.store.job(id).expect("job").expect("exists").node_id;
        if placed.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(placed.as_deref(), Some("n1"), "the only node");
    let n2 = node(&s, "n2").await;
    let attempt = s.store.job(id).expect("job").expect("exists").attempt;
    let report = |name: &str, epoch: u64, state: &str| {
        json!({"node_id": name, "epoch": epoch, "job_id": id, "attempt": attempt,
            "outputs": [{"name": "model", "url": "s3://bucket/run", "state": state, "files": 2, "bytes": 10}]})
    };

    // n2 did not run it: refused, nothing recorded, no secret.
    let resp =
        call(&s, &n2.0, Method::POST, "/v1/agent/outputs").json(&report("n2", n2.1, "uploaded")).send();
    let resp = resp.await.expect("send");
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let body = resp.text().await.expect("text");
    assert!(body.contains("did not run attempt") && !body.contains("hush"), "{body}");
    let outputs = s.store.job(id).expect("job").expect("exists").outputs;
    assert_eq!(outputs[0].state, gantry_api::outputs::OutputState::Pending, "{outputs:?}");
    // Nor may n2's credential speak as n1.
    let resp =
        call(&s, &n2.0, Method::POST, "/v1/agent/outputs").json(&report("n1", n1.1, "uploaded")).send();
    assert_eq!(resp.await.expect("send").status(), StatusCode::FORBIDDEN);
    // n1 with a stale epoch must register again.
    let resp =
        call(&s, &n1.0, Method::POST, "/v1/agent/outputs").json(&report("n1", n1.1 + 7, "uploading")).send();
    assert_eq!(resp.await.expect("send").status(), StatusCode::CONFLICT);
    // An output the job did not declare.
    let mut stranger = report("n1", n1.1, "uploading");
    stranger["outputs"][0]["name"] = json!("other");
    let resp = call(&s, &n1.0, Method::POST, "/v1/agent/outputs").json(&stranger).send();
    assert_eq!(resp.await.expect("send").status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        s.store.job(id).expect("job").expect("exists").outputs[0].state,
        gantry_api::outputs::OutputState::Pending
    );

    // n1 ran it: `uploading` is answered with the secret, then the result is recorded.
    let resp =
        call(&s, &n1.0, Method::POST, "/v1/agent/outputs").json(&report("n1", n1.1, "uploading")).send();
    let resp = resp.await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    let answer: Value = resp.json().await.expect("json");
    assert_eq!(answer["secret"]["AWS_SECRET_ACCESS_KEY"], "hush", "{answer}");
    let resp =
        call(&s, &n1.0, Method::POST, "/v1/agent/outputs").json(&report("n1", n1.1, "uploaded")).send();
    let resp = resp.await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.json::<Value>().await.expect("json").get("secret").is_none(),
        "the secret only while uploading"
    );
    let got: Value = s.get(&format!("/v1/jobs/{id}")).send().await.expect("send").json().await.expect("json");
    let o = &got["job"]["outputs"][0];
    assert_eq!(
        (o["state"].as_str(), o["files"].as_u64(), o["attempt"].as_u64()),
        (Some("uploaded"), Some(2), Some(u64::from(attempt))),
        "{got}"
    );
}
