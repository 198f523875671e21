//! The listener's limits: header timeout, connection limit, graceful shutdown.

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use gantry_server::transport::{self, Limits};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::TestServer;

/// Waits until the server closes `conn` (EOF or reset); false if it is still open at `deadline`.
async fn closed_by(conn: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; 256];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, conn.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {} // a 408 or similar before the close is fine too
        }
    }
}

#[tokio::test]
async fn a_thousand_connections_that_never_finish_their_headers_are_closed_and_others_are_still_served() {
    let s = TestServer::start_with(|config, _| {
        config.header_read_timeout = Duration::from_secs(3);
        config.max_connections = 1024;
        // All from loopback: this is about the header timeout, not the per-address cap.
        config.max_connections_per_address = 1024;
    })
    .await;
    let addr = s.url.trim_start_matches("http://").to_owned();
    let opened = Instant::now();
    let mut slow = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let mut conn = TcpStream::connect(&addr).await.expect("connect");
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.expect("partial headers");
        slow.push(conn);
    }
    let resp = s.http.get(format!("{}/healthz", s.url)).send().await.expect("a normal request");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        opened.elapsed() < Duration::from_secs(2),
        "the normal request was not served while they were open"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    for (i, conn) in slow.iter_mut().enumerate() {
        assert!(closed_by(conn, deadline).await, "slow connection {i} is still open");
    }
    // A fresh client: the pooled connection of the first request sat idle past the 3 s
    // keep-alive timeout while the slow ones were closed, and the server may be closing it.
    let fresh = crate::client(None, None);
    let resp = fresh.get(format!("{}/healthz", s.url)).send().await.expect("still serving");
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn beyond_the_connection_limit_a_new_connection_waits_for_a_free_slot_instead_of_failing() {
    let s = TestServer::start_with(|config, _| {
        config.header_read_timeout = Duration::from_secs(1);
        config.max_connections = 2;
    })
    .await;
    let addr = s.url.trim_start_matches("http://").to_owned();
    let _idle =
        [TcpStream::connect(&addr).await.expect("one"), TcpStream::connect(&addr).await.expect("two")];
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let resp = s.http.get(format!("{}/healthz", s.url)).send().await.expect("served once a slot frees");
    assert_eq!(resp.status(), StatusCode::OK);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(500), "served after {waited:?}: the limit did not hold");
}

#[tokio::test]
async fn shutdown_finishes_a_running_request_without_waiting_for_idle_keep_alive_connections() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = Router::new().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            "done"
        }),
    );
    let limits = Limits {
        max_connections: 16,
        max_connections_per_address: 16,
        loopback_is_one_source: true,
        header_read_timeout: Duration::from_secs(60),
        tls_handshake_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(30),
        shutdown_grace: Duration::from_secs(30),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(transport::serve(vec![listener], None, router, None, limits, async move {
        let _ = stop_rx.await;
    }));
    // An idle keep-alive connection: one request answered, then silence.
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    idle.write_all(b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("request");
    let mut buf = [0u8; 512];
    assert!(idle.read(&mut buf).await.expect("answer") > 0);
    let slow = tokio::spawn(async move {
        let http = crate::client(None, None);
        http.get(format!("http://{addr}/slow")).send().await.expect("send").text().await.expect("text")
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stopping = Instant::now();
    stop_tx.send(()).expect("stop");
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server stopped in time")
        .expect("join");
    assert!(stopping.elapsed() < Duration::from_secs(5));
    assert_eq!(slow.await.expect("join"), "done", "the running request was cut off");
    assert!(closed_by(&mut idle, Instant::now() + Duration::from_secs(1)).await, "idle connection left open");
}

#[tokio::test]
async fn a_body_that_trickles_in_gets_408_when_the_request_timeout_passes() {
    let s = TestServer::start_with(|config, _| config.request_timeout = Duration::from_secs(1)).await;
    let addr = s.url.trim_start_matches("http://").to_owned();
    let mut conn = TcpStream::connect(&addr).await.expect("connect");
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"command\"",
        s.token
    );
    conn.write_all(head.as_bytes()).await.expect("headers and the start of the body");
    let started = Instant::now();
    let mut answer = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut answer))
        .await
        .expect("an answer before the test gives up")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() >= Duration::from_millis(900), "answered after {:?}", started.elapsed());
}
