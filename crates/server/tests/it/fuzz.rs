//! Property-based fuzzing of every request body and query string: whatever arrives, the server
//! answers a 2xx or a 4xx with a JSON message, never a 5xx, and stays up. Bounded in the normal
//! suite (`GANTRY_FUZZ_CASES`, default 48 per property); the note's longer run sets it higher.

use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::{Map, Value};

use crate::TestServer;

fn cases() -> u32 {
    std::env::var("GANTRY_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
}

/// Field names the endpoints know, so that generated bodies get past "unknown field" often.
const FIELDS: &[&str] = &[
    "command",
    "gpus",
    "gpu_memory_mib",
    "gpu_compute_pct",
    "cpu_milli",
    "memory_mib",
    "team",
    "priority",
    "name",
    "max_retries",
    "request_id",
    "gpu_quota",
    "role",
    "user",
    "node",
    "ttl_seconds",
    "teams",
    "node_id",
    "hostname",
    "epoch",
    "jobs",
    "job_id",
    "attempt",
    "exit",
    "exit_code",
    "reason",
    "uuid",
    "index",
    "model",
    "health",
    "sample",
    "at",
    "env",
];

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(Value::from(1u64 << 63)),
        Just(Value::from(i64::MIN)),
        Just(Value::from(-1)),
        Just(Value::from(0)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,12}",
        ".{0,40}",
        Just("x".repeat(70_000)),
        Just("admin".to_owned()),
        Just("../../etc/passwd".to_owned()),
        Just("stdout".to_owned()),
        Just("member".to_owned()),
        Just("agent".to_owned()),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String)
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELDS).prop_map(str::to_owned), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

const BODY_ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/jobs"),
    ("PUT", "/v1/teams/t"),
    ("POST", "/v1/tokens"),
    ("PUT", "/v1/users/u"),
    ("POST", "/v1/agent/join"),
    ("POST", "/v1/agent/register"),
    ("POST", "/v1/agent/heartbeat"),
    ("POST", "/v1/jobs/1/cancel"),
];

const QUERY_ROUTES: &[&str] =
    &["/v1/jobs", "/v1/events", "/v1/audit", "/v1/jobs/1/logs", "/v1/jobs/1", "/v1/tokens", "/v1/gpus"];

/// One server for the whole property (starting one per case would dominate the run).
fn server() -> &'static (tokio::runtime::Runtime, TestServer) {
    static SERVER: OnceLock<(tokio::runtime::Runtime, TestServer)> = OnceLock::new();
    SERVER.get_or_init(|| {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let server = rt.block_on(TestServer::start());
        rt.block_on(async {
            let first = serde_json::json!({"command": ["true"]});
            server.post("/v1/jobs").json(&first).send().await.expect("seed job");
        });
        (rt, server)
    })
}

fn check(method: &str, path: &str, body: Option<Vec<u8>>) -> Result<(), TestCaseError> {
    let (rt, s) = server();
    let (status, text) = rt.block_on(async {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = s.http.request(method, format!("{}{path}", s.url)).bearer_auth(&s.token);
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        let resp = req.send().await.expect("the server answers");
        (resp.status(), resp.text().await.unwrap_or_default())
    });
    prop_assert!(!status.is_server_error(), "{method} {path} -> {status}: {text}");
    if status.is_client_error() && status != reqwest::StatusCode::METHOD_NOT_ALLOWED {
        let v: Value =
            serde_json::from_str(&text).map_err(|_| TestCaseError::fail(format!("not JSON: {text}")))?;
        prop_assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{method} {path}: {text}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_json_body_gets_a_server_error(route in prop::sample::select(BODY_ROUTES), body in json()) {
        let bytes = serde_json::to_vec(&body).expect("serialise");
        check(route.0, route.1, Some(bytes))?;
    }

    #[test]
    fn no_byte_string_body_gets_a_server_error(
        route in prop::sample::select(BODY_ROUTES),
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        check(route.0, route.1, Some(body))?;
    }

    #[test]
    fn no_query_string_gets_a_server_error(
        path in prop::sample::select(QUERY_ROUTES),
        key in prop::sample::select(&["limit", "before", "state", "team", "offset", "stream", "after", "since"][..]),
        value in prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            Just("99999999999999999999999".to_owned()),
            Just(u64::MAX.to_string()),
            "[a-z%&=]{0,10}",
        ],
    ) {
        check("GET", &format!("{path}?{key}={value}"), None)?;
    }
}
