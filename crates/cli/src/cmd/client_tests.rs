//! Which failed requests the client sends on to the next server, against fake servers on
//! loopback: one that reads the request and hangs up (the request may have been acted on), one
//! that answers 503, a closed port (nothing was sent), and one that answers.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Api, ApiStatus, block_on};

/// A fake server: `answer` gives the raw HTTP response, or `None` to hang up after reading the
/// request. Returns its URL and how many requests it read.
fn fake(answer: Option<&'static str>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            if read_request(&mut conn) {
                counted.fetch_add(1, Ordering::SeqCst);
                if let Some(answer) = answer {
                    let _ = conn.write_all(answer.as_bytes());
                }
            }
        }
    });
    (url, hits)
}

/// Reads one request (head and a `content-length` body); false when the client hung up.
fn read_request(conn: &mut TcpStream) -> bool {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = conn.read(&mut buf) else { return false };
        if n == 0 {
            return false;
        }
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return true;
            }
        }
    }
}

const OK: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
const NOT_SERVING: &str = "HTTP/1.1 503 Service Unavailable\r\nx-gantry-not-serving: follower\r\n\
    content-type: application/json\r\ncontent-length: 42\r\n\r\n{\"error\":\"this replica is not the leader\"}";
const UNAVAILABLE: &str = "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
    content-length: 25\r\n\r\n{\"error\":\"store is down\"}";

fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    format!("http://{}", listener.local_addr().expect("addr"))
}

fn api(servers: &[&str]) -> Api {
    Api::new(&servers.join(","), "gty_test").expect("client")
}

async fn post(api: &Api) -> anyhow::Result<serde_json::Value> {
    api.post("/v1/jobs/1/cancel", &serde_json::json!({})).await
}

#[test]
fn a_write_that_may_have_reached_a_server_is_not_sent_to_the_next() {
    let (hangs_up, _) = fake(None);
    let (live, hits) = fake(Some(OK));
    let api = api(&[&hangs_up, &live]);
    let err = block_on(post(&api)).expect("runtime").expect_err("the first server hung up");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "a cancel is never sent twice");
    assert!(err.to_string().contains(&hangs_up), "{err}");
}

#[test]
fn a_read_that_lost_its_connection_goes_to_the_next_server_which_stays_first() {
    let (hangs_up, lost) = fake(None);
    let (live, hits) = fake(Some(OK));
    let api = api(&[&hangs_up, &live]);
    let _: serde_json::Value = block_on(api.get("/v1/jobs")).expect("runtime").expect("the second answers");
    assert_eq!(api.base(), live);
    let again = api.clone();
    let _: serde_json::Value = block_on(again.get("/v1/jobs")).expect("runtime").expect("answers");
    assert_eq!(
        (lost.load(Ordering::SeqCst), hits.load(Ordering::SeqCst)),
        (1, 2),
        "the one that worked first"
    );
}

#[test]
fn any_request_goes_on_when_nothing_was_sent_or_the_replica_says_it_did_nothing() {
    let (live, hits) = fake(Some(OK));
    block_on(post(&api(&[&closed_port(), &live])))
        .expect("runtime")
        .expect("a refused connection sent nothing");
    let (follower, asked) = fake(Some(NOT_SERVING));
    block_on(post(&api(&[&follower, &live]))).expect("runtime").expect("the follower did nothing");
    assert_eq!((asked.load(Ordering::SeqCst), hits.load(Ordering::SeqCst)), (1, 2));
}

#[test]
fn a_503_without_the_mark_repeats_only_what_is_safe_to_repeat() {
    let (unavailable, _) = fake(Some(UNAVAILABLE));
    let (live, hits) = fake(Some(OK));
    let err = block_on(post(&api(&[&unavailable, &live]))).expect("runtime").expect_err("not repeated");
    assert_eq!((ApiStatus::of(&err), hits.load(Ordering::SeqCst)), (Some(503), 0), "{err}");
    let keyed: anyhow::Result<serde_json::Value> =
        block_on(api(&[&unavailable, &live]).post_keyed("/v1/jobs", &serde_json::json!({"request_id": "k"})))
            .expect("runtime");
    keyed.expect("a submission under its idempotency key is repeated");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[test]
fn when_no_server_answers_the_error_says_why_for_each() {
    let (first, second) = (closed_port(), closed_port());
    let err = block_on(api(&[&first, &second]).get::<serde_json::Value>("/v1/jobs"))
        .expect("runtime")
        .expect_err("none answers");
    let text = err.to_string();
    assert!(text.contains(&format!("cannot reach the Gantry server at {first}")), "{text}");
    assert!(text.contains(&format!("; then cannot reach the Gantry server at {second}")), "{text}");
}

#[test]
fn a_context_lists_its_server_then_its_servers_and_server_alone_still_works() {
    let config = super::parse_config(
        "current-context = \"prod\"\n[contexts.prod]\nserver = \"https://a:7070\"\n\
         servers = [\"https://b:7070\", \"https://c:7070\"]\n[contexts.old]\nserver = \"https://h:7070\"\n\
         [contexts.list]\nservers = [\"https://x:7070\"]\n",
    )
    .expect("config");
    let list = |name| config.context(Some(name)).expect("context").server_list();
    assert_eq!(list("prod").as_deref(), Some("https://a:7070,https://b:7070,https://c:7070"));
    assert_eq!(list("old").as_deref(), Some("https://h:7070"));
    assert_eq!(list("list").as_deref(), Some("https://x:7070"));
    let api = Api::new(&list("prod").expect("list"), "gty_x").expect("client");
    assert_eq!(api.base(), "https://a:7070", "the first address before any answered");
}

/// A port that accepts connections and then says nothing: a TLS handshake to it never ends.
fn silent() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("https://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let held: Vec<TcpStream> = listener.incoming().filter_map(Result::ok).collect();
        drop(held);
    });
    url
}

#[test]
fn a_tls_handshake_that_never_ends_counts_as_nothing_sent_and_even_a_cancel_goes_on() {
    let (live, hits) = fake(Some(OK));
    let started = std::time::Instant::now();
    block_on(post(&api(&[&silent(), &live]))).expect("runtime").expect("the second answers");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let waited = started.elapsed();
    assert!(waited < gantry_agent::runner::client::CONNECT_TIMEOUT * 2, "gave up on connecting: {waited:?}");
}
