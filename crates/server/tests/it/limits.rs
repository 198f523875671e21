//! Inputs at and past the edges: numbers too large for the store, malformed query strings and
//! paths, a huge body. Each gets a 4xx with a JSON message, never a 500.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::TestServer;

async fn error_of(resp: reqwest::Response) -> (StatusCode, String) {
    let status = resp.status();
    let body: Value = resp.json().await.expect("a JSON error body");
    (status, body["error"].as_str().expect("error field").to_owned())
}

#[tokio::test]
async fn numbers_too_large_for_the_store_get_422_naming_the_field() {
    let s = TestServer::start().await;
    for (field, value) in [
        ("gpu_memory_mib", json!(1u64 << 63)),
        ("gpu_memory_mib", json!(u64::MAX)),
        ("cpu_milli", json!(1u64 << 63)),
        ("memory_mib", json!(u64::MAX)),
    ] {
        let mut body = json!({"command": ["true"]});
        body[field] = value;
        let (status, error) = error_of(s.post("/v1/jobs").json(&body).send().await.expect("send")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {error}");
        assert!(error.starts_with(field), "{error}");
    }
    let register =
        json!({"node_id": "n1", "hostname": "h", "cpu_milli": 1000, "memory_mib": u64::MAX, "gpus": []});
    let (status, error) =
        error_of(s.post("/v1/agent/register").json(&register).send().await.expect("send")).await;
    assert_eq!(
        (status, error.starts_with("memory_mib")),
        (StatusCode::UNPROCESSABLE_ENTITY, true),
        "{error}"
    );
    let huge_gpu = json!({"node_id": "n1", "hostname": "h", "cpu_milli": 1000, "memory_mib": 1024,
        "gpus": [{"uuid": "GPU-1", "index": 0, "model": "X", "memory_mib": 1u64 << 63}]});
    let (status, error) =
        error_of(s.post("/v1/agent/register").json(&huge_gpu).send().await.expect("send")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
}

#[tokio::test]
async fn a_huge_heartbeat_epoch_is_a_conflict_not_a_server_error() {
    let s = TestServer::start().await;
    let node = gantry_server::create_node_credential(&*s.store, "n1").expect("credential");
    let as_node = |path: &str| s.http.post(format!("{}{path}", s.url)).bearer_auth(&node);
    let register =
        json!({"node_id": "n1", "hostname": "h", "cpu_milli": 1000, "memory_mib": 1024, "gpus": []});
    assert_eq!(
        as_node("/v1/agent/register").json(&register).send().await.expect("send").status(),
        StatusCode::OK
    );
    let hb = json!({"node_id": "n1", "epoch": u64::MAX, "gpus": [], "jobs": [], "at": 0});
    let resp = as_node("/v1/agent/heartbeat").json(&hb).send().await.expect("send");
    assert!(resp.status().is_client_error(), "{}", resp.status());
}

#[tokio::test]
async fn malformed_query_strings_and_paths_get_a_json_400() {
    let s = TestServer::start().await;
    let id: Value = crate::json_of(s.post("/v1/jobs").json(&json!({"command": ["true"]}))).await;
    let id = id["id"].as_i64().expect("id");
    for path in [
        "/v1/jobs?limit=-1".to_owned(),
        "/v1/jobs?limit=99999999999999999999".to_owned(),
        "/v1/events?limit=x".to_owned(),
        format!("/v1/jobs/{id}/logs?offset=99999999999999999999"),
        "/v1/jobs/abc".to_owned(),
    ] {
        let (status, error) = error_of(s.get(&path).send().await.expect("send")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {error}");
        assert!(!error.is_empty());
    }
    let (status, error) =
        error_of(s.get(&format!("/v1/jobs/{id}/logs?offset={}", u64::MAX)).send().await.expect("send")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert!(error.starts_with("offset"), "{error}");
}

#[tokio::test]
async fn a_100_mb_body_is_refused_with_413_without_being_read() {
    let s = TestServer::start().await;
    let addr = s.url.trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.expect("connect");
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n",
        s.token
    );
    conn.write_all(head.as_bytes()).await.expect("headers");
    // Send just past the 1 MiB limit of the promised 100 MB. If the server needed the rest it
    // would wait for it, and the read below would time out.
    conn.write_all(&vec![b' '; (1 << 20) + 16 * 1024]).await.expect("the first MiB");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = conn.read(&mut buf).await {
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
            if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer without the full body");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

#[tokio::test]
async fn an_advertised_address_is_a_host_name_or_an_ip_else_422_and_nodes_show_it() {
    let s = TestServer::start().await;
    let node = gantry_server::create_node_credential(&*s.store, "n1").expect("credential");
    let as_node = |path: &str| s.http.post(format!("{}{path}", s.url)).bearer_auth(&node);
    let register = |addr: &str| {
        json!({"node_id": "n1", "hostname": "h", "advertise_addr": addr, "cpu_milli": 1000, "memory_mib": 1024,
            "gpus": []})
    };
    let long = format!("{}.example", "a".repeat(250));
    for bad in ["", "-h", "a b", "h_1", "10.0.0.999", "http://h", "h:7070", "a..b", long.as_str()] {
        let (status, error) =
            error_of(as_node("/v1/agent/register").json(&register(bad)).send().await.expect("send")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad:?}: {error}");
        assert!(error.starts_with("advertise_addr"), "{error}");
    }
    for good in ["fe80::1", "node-7.example.org", "10.0.0.7"] {
        let resp = as_node("/v1/agent/register").json(&register(good)).send().await.expect("send");
        assert_eq!(resp.status(), StatusCode::OK, "{good}");
    }
    let nodes: Value = crate::json_of(s.get("/v1/nodes")).await;
    assert_eq!(nodes[0]["advertise_addr"], "10.0.0.7", "{nodes}");
}
