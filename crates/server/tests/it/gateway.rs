//! The serving gateway against real loopback replicas (small hyper servers in the test).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gantry_core::rng::SplitMix64;
use gantry_server::gateway::{
    FnAuthorizer, Gateway, GatewayConfig, GatewayMetrics, ReplicaEndpoint, Route, RoutingTable, ServiceKey,
};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type ReplicaBody = BoxBody<Bytes, Infallible>;
type ReplicaResponse = hyper::Response<ReplicaBody>;

/// A loopback replica; dropping (or [`TestReplica::kill`]) closes it and every open connection.
struct TestReplica {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TestReplica {
    fn endpoint(&self, id: &str) -> ReplicaEndpoint {
        ReplicaEndpoint::ready(id, self.addr)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Stops accepting and resets every connection, like a process that was killed.
    fn kill(&self) {
        self.task.abort();
    }
}

impl Drop for TestReplica {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn text(body: impl Into<Bytes>) -> ReplicaResponse {
    hyper::Response::new(Full::new(body.into()).boxed())
}

async fn replica<F, Fut>(handler: F) -> TestReplica
where
    F: Fn(hyper::Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ReplicaResponse> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let hits = Arc::new(AtomicUsize::new(0));
    let handler = Arc::new(handler);
    let counted = Arc::clone(&hits);
    let task = tokio::spawn(async move {
        // Aborting this task drops the set, which aborts (and so closes) every connection.
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let (handler, hits) = (Arc::clone(&handler), Arc::clone(&counted));
            let service = hyper::service::service_fn(move |req| {
                hits.fetch_add(1, Ordering::SeqCst);
                let answer = handler(req);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            connections.spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    TestReplica { addr, hits, task }
}

/// A replica that answers after `delay` with its own name.
async fn sleeper(name: &'static str, delay: Duration) -> TestReplica {
    replica(move |_| async move {
        tokio::time::sleep(delay).await;
        text(name)
    })
    .await
}

struct Fixture {
    gateway: Arc<Gateway>,
    url: String,
    addr: SocketAddr,
    http: reqwest::Client,
    registry: Arc<prometheus_client::registry::Registry>,
}

const TOKEN: &str = "tok-ml";

impl Fixture {
    async fn start(config: GatewayConfig) -> Self {
        let mut registry = prometheus_client::registry::Registry::with_prefix("gantry");
        let metrics = GatewayMetrics::register(&mut registry);
        // A team's token is `tok-<team>`.
        let authorizer = FnAuthorizer(|token: &str, key: &ServiceKey| token == format!("tok-{}", key.team));
        let gateway =
            Arc::new(Gateway::new(config, Box::new(authorizer), metrics, Box::new(SplitMix64::new(7))));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(Arc::clone(&gateway).serve(vec![listener], None, std::future::pending()));
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().expect("client");
        Self { gateway, url: format!("http://{addr}"), addr, http, registry: Arc::new(registry) }
    }

    fn route(&self, service: &str, route: Route) {
        let table: RoutingTable = [(ServiceKey::new("ml", service), route)].into_iter().collect();
        self.gateway.set_routes(&table);
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(format!("{}{path}", self.url)).bearer_auth(TOKEN)
    }

    fn metrics(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encode");
        out
    }
}

#[tokio::test]
async fn a_request_reaches_a_replica_with_the_prefix_stripped_and_forwarding_headers_set_by_the_gateway() {
    let echo = replica(|req| async move {
        let h = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = json!({
            "target": req.uri().to_string(),
            "host": h("host"), "xff": h("x-forwarded-for"), "xfp": h("x-forwarded-proto"),
            "forwarded": h("forwarded"), "authorization": h("authorization"), "private": h("x-private"),
            "kept": h("x-kept"),
        });
        text(body.to_string())
    })
    .await;
    let f = Fixture::start(GatewayConfig::default()).await;
    f.route("echo", Route::new(vec![echo.endpoint("r0")]));
    let answer = f
        .get("/ml/echo/v1/chat?stream=1")
        .header("x-forwarded-for", "6.6.6.6")
        .header("forwarded", "for=6.6.6.6")
        .header("connection", "x-private")
        .header("x-private", "hop")
        .header("x-kept", "yes")
        .send()
        .await
        .expect("send");
    assert_eq!(answer.status(), StatusCode::OK);
    let seen: Value = answer.json().await.expect("json");
    assert_eq!(seen["target"], "/v1/chat?stream=1");
    assert_eq!(seen["host"], echo.addr.to_string());
    assert_eq!(seen["xff"], "127.0.0.1");
    assert_eq!(seen["xfp"], "http");
    assert!(seen["forwarded"].as_str().expect("forwarded").starts_with("for=127.0.0.1;proto=http"), "{seen}");
    assert_eq!(seen["authorization"], Value::Null, "the caller's token reached the replica");
    assert_eq!(seen["private"], Value::Null, "a header named in Connection reached the replica");
    assert_eq!(seen["kept"], "yes");
}

#[tokio::test]
async fn another_teams_token_gets_the_same_404_as_a_service_that_does_not_exist() {
    let echo = sleeper("echo", Duration::ZERO).await;
    let f = Fixture::start(GatewayConfig::default()).await;
    f.route("echo", Route::new(vec![echo.endpoint("r0")]));
    let other =
        f.http.get(format!("{}/ml/echo/", f.url)).bearer_auth("tok-other").send().await.expect("send");
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    let missing = f.get("/ml/nothing/").send().await.expect("send");
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let none = f.http.get(format!("{}/ml/echo/", f.url)).send().await.expect("send");
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED, "a request without a token is told to send one");
    let none_missing = f.http.get(format!("{}/ml/nothing/", f.url)).send().await.expect("send");
    assert_eq!(none_missing.status(), StatusCode::UNAUTHORIZED, "whether or not the service exists");
    assert_eq!(echo.hits(), 0);
    assert_eq!(f.get("/ml/echo/").send().await.expect("send").status(), StatusCode::OK);
    let mut public = Route::new(vec![echo.endpoint("r0")]);
    public.public = true;
    f.route("echo", public);
    let anyone = f.http.get(format!("{}/ml/echo/", f.url)).send().await.expect("send");
    assert_eq!(anyone.status(), StatusCode::OK, "a public service needs no token");
}

#[tokio::test]
async fn least_outstanding_requests_sends_less_to_a_slow_replica_and_spreads_the_rest() {
    let slow = sleeper("slow", Duration::from_millis(150)).await;
    let fast_a = sleeper("a", Duration::from_millis(5)).await;
    let fast_b = sleeper("b", Duration::from_millis(5)).await;
    let f = Fixture::start(GatewayConfig::default()).await;
    f.route("lm", Route::new(vec![slow.endpoint("slow"), fast_a.endpoint("a"), fast_b.endpoint("b")]));
    let total = 240;
    let next = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..6 {
        let (http, url, next) = (f.http.clone(), f.url.clone(), Arc::clone(&next));
        clients.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::SeqCst) < total {
                let r = http.get(format!("{url}/ml/lm/")).bearer_auth(TOKEN).send().await.expect("send");
                assert_eq!(r.status(), StatusCode::OK);
            }
        }));
    }
    for c in clients {
        c.await.expect("client");
    }
    let (s, a, b) = (slow.hits(), fast_a.hits(), fast_b.hits());
    assert_eq!(s + a + b, total);
    // Round robin or a plain random choice would give the slow replica a third (80).
    assert!(s < total / 10, "slow {s}, a {a}, b {b}");
    assert!(a > total / 4 && b > total / 4, "slow {s}, a {a}, b {b}");
    let snapshot = f.gateway.snapshot(&ServiceKey::new("ml", "lm")).expect("snapshot");
    assert_eq!(snapshot.requests_total, total as u64);
    assert!(snapshot.rps > 0.0 && snapshot.latency_p95_s >= snapshot.latency_p50_s, "{snapshot:?}");
    let metrics = f.metrics();
    for name in [
        "gantry_service_requests_total{service=\"lm\",team=\"ml\",replica=\"a\",code=\"200\"}",
        "gantry_service_in_flight{",
        "gantry_service_queue_length{",
        "gantry_service_request_duration_seconds_count{service=\"lm\",team=\"ml\"} 240",
        "gantry_service_time_to_first_byte_seconds_count{service=\"lm\",team=\"ml\"} 240",
        "gantry_service_cold_start_seconds",
        "gantry_service_replicas{service=\"lm\",team=\"ml\",state=\"ready\"} 3",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
}

/// A replica whose answers wait for permits; records the order requests arrived in and the
/// most it ever had in flight.
struct Gated {
    replica: TestReplica,
    gate: Arc<tokio::sync::Semaphore>,
    order: Arc<Mutex<Vec<String>>>,
    peak: Arc<AtomicUsize>,
}

async fn gated() -> Gated {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (peak, now) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (g, o, p) = (Arc::clone(&gate), Arc::clone(&order), Arc::clone(&peak));
    let replica = replica(move |req| {
        let (gate, order, peak, now) = (Arc::clone(&g), Arc::clone(&o), Arc::clone(&p), Arc::clone(&now));
        async move {
            order.lock().expect("lock").push(req.uri().path().to_owned());
            peak.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            gate.acquire().await.expect("gate").forget();
            now.fetch_sub(1, Ordering::SeqCst);
            text("done")
        }
    })
    .await;
    Gated { replica, gate, order, peak }
}

#[tokio::test]
async fn a_full_replica_queues_requests_in_order_and_a_full_queue_gets_429_with_retry_after() {
    let g = gated().await;
    let f = Fixture::start(GatewayConfig::default()).await;
    let mut route =
        Route::new(vec![ReplicaEndpoint { max_concurrency: Some(1), ..g.replica.endpoint("r0") }]);
    route.queue_limit = 2;
    f.route("q", route);
    let mut sent = Vec::new();
    for name in ["first", "second", "third"] {
        let request = f.get(&format!("/ml/q/{name}")).send();
        sent.push(tokio::spawn(request));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let over = f.get("/ml/q/fourth").send().await.expect("send");
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(over.headers()["retry-after"], "1");
    let snapshot = f.gateway.snapshot(&ServiceKey::new("ml", "q")).expect("snapshot");
    assert_eq!((snapshot.in_flight, snapshot.queue_length), (1, 2));
    g.gate.add_permits(3);
    for s in sent {
        assert_eq!(s.await.expect("task").expect("send").status(), StatusCode::OK);
    }
    assert_eq!(g.peak.load(Ordering::SeqCst), 1, "the cap of one request in flight was exceeded");
    assert_eq!(*g.order.lock().expect("lock"), ["/first", "/second", "/third"]);
}

#[tokio::test]
async fn a_request_that_could_not_be_sent_is_retried_on_another_replica() {
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let good = sleeper("good", Duration::ZERO).await;
    let f = Fixture::start(GatewayConfig::default()).await;
    f.route("r", Route::new(vec![ReplicaEndpoint::ready("gone", refused), good.endpoint("good")]));
    for _ in 0..20 {
        let r = f.get("/ml/r/").send().await.expect("send");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.expect("text"), "good");
    }
    assert_eq!(good.hits(), 20);
}

#[tokio::test]
async fn killing_a_replica_fails_only_the_requests_in_flight_on_it() {
    let doomed = sleeper("doomed", Duration::from_millis(800)).await;
    let healthy = sleeper("healthy", Duration::from_millis(800)).await;
    let f = Fixture::start(GatewayConfig::default()).await;
    let capped = |r: &TestReplica, id: &str| ReplicaEndpoint { max_concurrency: Some(4), ..r.endpoint(id) };
    f.route("k", Route::new(vec![capped(&doomed, "doomed"), capped(&healthy, "healthy")]));
    let burst: Vec<_> = (0..8).map(|_| tokio::spawn(f.get("/ml/k/").send())).collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while doomed.hits() + healthy.hits() < 8 {
        assert!(Instant::now() < deadline, "the burst did not reach the replicas");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    doomed.kill();
    let mut codes = Vec::new();
    for b in burst {
        codes.push(b.await.expect("task").expect("send").status());
    }
    assert_eq!(codes.iter().filter(|c| **c == StatusCode::OK).count(), 4, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == StatusCode::BAD_GATEWAY).count(), 4, "{codes:?}");
    // The table still lists the dead replica (the controller has not noticed): every new request
    // is refused there before a byte is sent, and goes to the healthy one.
    let after: Vec<_> = (0..8).map(|_| tokio::spawn(f.get("/ml/k/").send())).collect();
    for a in after {
        assert_eq!(a.await.expect("task").expect("send").status(), StatusCode::OK);
    }
}

#[tokio::test]
async fn a_streamed_response_reaches_the_client_before_the_replica_finishes() {
    let release = Arc::new(tokio::sync::Notify::new());
    let r = Arc::clone(&release);
    let streamer = replica(move |_| {
        let release = Arc::clone(&r);
        async move {
            let (mut tx, body) = http_body_util::channel::Channel::<Bytes, Infallible>::new(4);
            tokio::spawn(async move {
                let _ = tx.send_data(Bytes::from_static(b"data: first\n\n")).await;
                release.notified().await;
                let _ = tx.send_data(Bytes::from_static(b"data: last\n\n")).await;
            });
            let mut answer = hyper::Response::new(body.boxed());
            answer.headers_mut().insert("content-type", "text/event-stream".parse().expect("value"));
            answer
        }
    })
    .await;
    let f = Fixture::start(GatewayConfig::default()).await;
    f.route("s", Route::new(vec![streamer.endpoint("r0")]));
    let mut answer = f.get("/ml/s/").send().await.expect("send");
    assert_eq!(answer.headers()["content-type"], "text/event-stream");
    let first = tokio::time::timeout(Duration::from_secs(3), answer.chunk()).await;
    let first = first.expect("the first event was held back until the stream ended").expect("chunk");
    assert_eq!(first.as_deref(), Some(&b"data: first\n\n"[..]));
    release.notify_one();
    let rest = answer.bytes().await.expect("rest");
    assert_eq!(&rest[..], b"data: last\n\n");
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413_declared_or_chunked() {
    let echo = sleeper("echo", Duration::ZERO).await;
    let f = Fixture::start(GatewayConfig { body_limit: 1024, ..GatewayConfig::default() }).await;
    f.route("b", Route::new(vec![echo.endpoint("r0")]));
    let big = f.http.post(format!("{}/ml/b/", f.url)).bearer_auth(TOKEN).body(vec![b'x'; 4096]);
    assert_eq!(big.send().await.expect("send").status(), StatusCode::PAYLOAD_TOO_LARGE);
    let mut conn = TcpStream::connect(f.addr).await.expect("connect");
    let chunk = "y".repeat(2000);
    let raw = format!(
        "POST /ml/b/ HTTP/1.1\r\nhost: g\r\nauthorization: Bearer {TOKEN}\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    conn.write_all(raw.as_bytes()).await.expect("write");
    let mut head = vec![0u8; 64];
    let n = conn.read(&mut head).await.expect("read");
    assert!(
        String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&head[..n])
    );
    assert_eq!(echo.hits(), 0);
    let small = f.http.post(format!("{}/ml/b/", f.url)).bearer_auth(TOKEN).body(vec![b'x'; 1000]);
    assert_eq!(small.send().await.expect("send").status(), StatusCode::OK);
}

#[tokio::test]
async fn a_replica_that_sends_no_headers_in_time_gets_504() {
    let stuck = sleeper("stuck", Duration::from_secs(30)).await;
    let f = Fixture::start(GatewayConfig {
        header_timeout: Duration::from_millis(300),
        ..GatewayConfig::default()
    })
    .await;
    f.route("t", Route::new(vec![stuck.endpoint("r0")]));
    assert_eq!(f.get("/ml/t/").send().await.expect("send").status(), StatusCode::GATEWAY_TIMEOUT);
}

#[tokio::test]
async fn hundreds_of_slow_connections_do_not_stop_a_normal_client() {
    let echo = sleeper("echo", Duration::ZERO).await;
    let config = GatewayConfig {
        header_read_timeout: Duration::from_secs(3),
        max_connections: 2000,
        max_connections_per_address: 128,
        ..GatewayConfig::default()
    };
    let f = Fixture::start(config).await;
    f.route("e", Route::new(vec![echo.endpoint("r0")]));
    // 400 connections from four other loopback addresses, each sending half a request's headers
    // and then nothing, and 200 from a fifth, whose 72 past its cap are closed at once.
    let mut slow = Vec::new();
    for i in 0..600 {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        let host = if i < 400 { 2 + i % 4 } else { 6 };
        let from: SocketAddr = format!("127.0.0.{host}:0").parse().expect("addr");
        socket.bind(from).expect("bind a loopback source");
        let mut conn = socket.connect(f.addr).await.expect("connect");
        let _ = conn.write_all(b"GET /ml/e/ HTTP/1.1\r\nhost: g\r\n").await;
        slow.push(conn);
    }
    let started = Instant::now();
    let answer = f.get("/ml/e/").send().await.expect("send");
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(started.elapsed() < Duration::from_secs(1), "a normal client waited {:?}", started.elapsed());
    assert_eq!(echo.hits(), 1);
}

#[tokio::test]
async fn a_held_request_is_released_when_a_ready_replica_is_added_and_the_cold_start_is_measured() {
    let f = Fixture::start(GatewayConfig::default()).await;
    let mut demand = f.gateway.demand().expect("the demand receiver");
    let mut cold = Route::new(Vec::new());
    cold.can_start = true;
    f.route("z", cold.clone());
    let request = tokio::spawn(f.get("/ml/z/hello").send());
    let wanted =
        tokio::time::timeout(Duration::from_secs(3), demand.recv()).await.expect("demand").expect("open");
    assert_eq!((wanted.service, wanted.held), (ServiceKey::new("ml", "z"), 1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!request.is_finished(), "the request was answered with no replica ready");
    let started = sleeper("warm", Duration::ZERO).await;
    f.route(
        "z",
        Route { replicas: vec![ReplicaEndpoint { ready: false, ..started.endpoint("r0") }], ..cold.clone() },
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!request.is_finished(), "a replica that is not ready got the request");
    f.route("z", Route { replicas: vec![started.endpoint("r0")], ..cold });
    let answer =
        tokio::time::timeout(Duration::from_secs(3), request).await.expect("released").expect("task");
    let answer = answer.expect("send");
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.text().await.expect("text"), "warm");
    assert!(f.metrics().contains("gantry_service_cold_start_seconds_count{service=\"z\",team=\"ml\"} 1"));
}

#[tokio::test]
async fn a_held_request_times_out_with_503_and_a_sentence() {
    let f = Fixture::start(GatewayConfig {
        cold_start_timeout: Duration::from_millis(300),
        ..GatewayConfig::default()
    })
    .await;
    let mut cold = Route::new(Vec::new());
    cold.can_start = true;
    f.route("z", cold);
    let answer = f.get("/ml/z/").send().await.expect("send");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = answer.json().await.expect("json");
    assert!(body["error"].as_str().expect("error").contains("no ready replica"), "{body}");
    let mut fixed = Route::new(Vec::new());
    fixed.can_start = false;
    f.route("fixed", fixed);
    let started = Instant::now();
    assert_eq!(f.get("/ml/fixed/").send().await.expect("send").status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "a service that cannot start a replica held the request"
    );
}

#[tokio::test]
async fn a_routes_own_cold_start_timeout_replaces_the_gateways_and_answers_503_with_a_sentence() {
    // The gateway would hold for 10 minutes; the service's file says 0.4 s.
    let f = Fixture::start(GatewayConfig::default()).await;
    let mut cold = Route::new(Vec::new());
    cold.can_start = true;
    cold.cold_start_timeout = Some(Duration::from_millis(400));
    f.route("z", cold);
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(5), f.get("/ml/z/").send())
        .await
        .expect("answered within the route's timeout, not the gateway's")
        .expect("send");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() >= Duration::from_millis(400), "held for the route's 0.4 s");
    let body: Value = answer.json().await.expect("json");
    let error = body["error"].as_str().expect("error");
    assert!(error.contains("the request was held 0.4 s while one started, and none became ready"), "{body}");
}

#[tokio::test]
async fn the_servers_gateway_speaks_tls_off_loopback_and_admits_only_a_member_of_the_team() {
    use gantry_store::{Role, Store, User};
    let dir = tempfile::tempdir().expect("dir");
    let store: Arc<dyn Store> = Arc::new(gantry_store::SqliteStore::open(dir.path()).expect("store"));
    let sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let pki = gantry_server::tls::Pki::load_or_create(&dir.path().join("tls"), &sans).expect("pki");
    let ca = pki.ca_pem().to_owned();
    let mut config = gantry_server::ServerConfig::local(dir.path().join("logs"));
    config.listen = ([127, 0, 0, 1], 0).into();
    config.pki = Some(Arc::new(pki));
    // The wildcard is reachable from other machines: TLS.
    config.gateway_listen = Some(([0, 0, 0, 0], 0).into());
    // This test hands the gateway its own table.
    config.service_controller = false;
    let server = gantry_server::Server::bind(config, Arc::clone(&store)).await.expect("bind");
    assert!(server.gateway_is_tls());
    let port = server.gateway_addrs()[0].port();
    let app = server.app();
    tokio::spawn(server.serve(std::future::pending()));
    let user =
        |name: &str, team: &str| User { name: name.into(), role: Role::Member, teams: vec![team.into()] };
    let ttl = Duration::from_secs(600);
    let member = gantry_server::create_user_token(&*store, &user("ana", "ml"), ttl).expect("token");
    let outsider = gantry_server::create_user_token(&*store, &user("bo", "cv"), ttl).expect("token");
    let echo = replica(|req| async move {
        text(
            req.headers().get("x-forwarded-proto").map_or("none", |v| v.to_str().unwrap_or("bad")).to_owned(),
        )
    })
    .await;
    let table: RoutingTable =
        [(ServiceKey::new("ml", "echo"), Route::new(vec![echo.endpoint("r0")]))].into_iter().collect();
    app.gateway.set_routes(&table);
    let https = crate::client(Some(&ca), None);
    let url = format!("https://127.0.0.1:{port}/ml/echo/");
    let ok = https.get(&url).bearer_auth(&member).send().await.expect("send");
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.text().await.expect("text"), "https");
    let refused = https.get(&url).bearer_auth(&outsider).send().await.expect("send");
    assert_eq!(refused.status(), StatusCode::NOT_FOUND, "another team's member reached the service");
    let plain = reqwest::Client::builder().no_proxy().build().expect("client");
    let answer = plain.get(format!("http://127.0.0.1:{port}/ml/echo/")).send().await.expect("send");
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "plain HTTP off loopback is refused");
    assert_eq!(echo.hits(), 1);
}

#[tokio::test]
async fn an_address_that_keeps_sending_refused_tokens_gets_429_and_a_members_token_still_passes() {
    let echo = sleeper("echo", Duration::ZERO).await;
    let f = Fixture::start(GatewayConfig::default()).await;
    f.route("echo", Route::new(vec![echo.endpoint("r0")]));
    for i in 0..gantry_server::auth::FAILURE_LIMIT {
        let r = f
            .http
            .get(format!("{}/ml/echo/", f.url))
            .bearer_auth(format!("guess-{i}"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "refusal {i}");
    }
    let slowed =
        f.http.get(format!("{}/ml/echo/", f.url)).bearer_auth("guess-more").send().await.expect("send");
    assert_eq!(slowed.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(slowed.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("60"));
    assert_eq!(
        f.get("/ml/echo/").send().await.expect("send").status(),
        StatusCode::OK,
        "a member still passes"
    );
    assert_eq!(echo.hits(), 1);
}

#[tokio::test]
async fn a_service_whose_replicas_keep_failing_answers_503_at_once_with_their_error_and_releases_held_requests()
 {
    let f = Fixture::start(GatewayConfig::default()).await;
    let mut cold = Route::new(Vec::new());
    cold.can_start = true;
    f.route("z", cold.clone());
    // Held while a replica starts (the default hold is 10 minutes)…
    let held = tokio::spawn(f.get("/ml/z/hello").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "held while a replica may start");
    // …until the controller says its replicas keep failing: answered at once, with why.
    let failing = "its replicas keep failing (3 in a row): exited with code 1: CUDA out of memory";
    f.route("z", Route { failing: Some(failing.into()), ..cold.clone() });
    let answer =
        tokio::time::timeout(Duration::from_secs(2), held).await.expect("answered at once").expect("task");
    let answer = answer.expect("send");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.text().await.expect("text").contains("CUDA out of memory"));
    let started = Instant::now();
    let next = f.get("/ml/z/hello").send().await.expect("send");
    assert_eq!(next.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert!(next.text().await.expect("text").contains("has no ready replica: its replicas keep failing"));
    // A ready replica serves whatever the sentence says.
    let up = sleeper("up", Duration::ZERO).await;
    f.route("z", Route { replicas: vec![up.endpoint("r0")], failing: Some(failing.into()), ..cold });
    let answer = f.get("/ml/z/hello").send().await.expect("send");
    assert_eq!(answer.status(), StatusCode::OK);
}

#[tokio::test]
async fn request_bodies_held_past_the_gateways_budget_get_503_at_once_and_the_budget_returns() {
    let f = Fixture::start(GatewayConfig {
        body_budget: 2 << 20,
        body_budget_per_service: 1 << 20,
        ..GatewayConfig::default()
    })
    .await;
    // Held: a service with no ready replica that may start one.
    let mut cold = Route::new(Vec::new());
    cold.can_start = true;
    let both = |z: Route, y: Route| {
        let table: RoutingTable =
            [(ServiceKey::new("ml", "z"), z), (ServiceKey::new("ml", "y"), y)].into_iter().collect();
        f.gateway.set_routes(&table);
    };
    both(cold.clone(), cold.clone());
    let post = |service: &str, bytes: usize| {
        f.http.post(format!("{}/ml/{service}/gen", f.url)).bearer_auth(TOKEN).body(vec![b'x'; bytes]).send()
    };
    // Two 400 KiB bodies of one service are held; a third is past its 1 MiB.
    let held: Vec<_> = (0..2).map(|_| tokio::spawn(post("z", 400 << 10))).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(held.iter().all(|h| !h.is_finished()), "held while a replica may start");
    let started = Instant::now();
    let refused = post("z", 400 << 10).await.expect("send");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(refused.headers().contains_key("retry-after"));
    let said = refused.text().await.expect("text");
    assert!(said.contains("as many request bodies as it may") && said.contains("ml/z"), "{said}");
    // Another service has its own share, within the gateway's 2 MiB.
    let other: Vec<_> = (0..2).map(|_| tokio::spawn(post("y", 400 << 10))).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(other.iter().all(|h| !h.is_finished()), "the other service's bodies are held too");
    // A chunked body (no declared length) is charged as it arrives.
    let mut conn = tokio::net::TcpStream::connect(f.addr).await.expect("connect");
    let head = format!(
        "POST /ml/z/gen HTTP/1.1\r\nhost: g\r\nauthorization: Bearer {TOKEN}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.expect("head");
    let chunk = vec![b'y'; 128 << 10];
    for _ in 0..8 {
        let framed =
            [format!("{:x}\r\n", chunk.len()).into_bytes(), chunk.clone(), b"\r\n".to_vec()].concat();
        if conn.write_all(&framed).await.is_err() {
            break;
        }
    }
    let _ = conn.write_all(b"0\r\n\r\n").await;
    let mut answer = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut answer))
        .await
        .expect("answered")
        .expect("read");
    let status = String::from_utf8_lossy(&answer[..n]).lines().next().unwrap_or_default().to_owned();
    assert!(status.contains(" 503 "), "{status}");
    // Once the held requests are answered, the budget is back.
    let up = sleeper("up", Duration::ZERO).await;
    both(
        Route { replicas: vec![up.endpoint("r0")], ..cold.clone() },
        Route { replicas: vec![up.endpoint("r1")], ..cold },
    );
    for h in held.into_iter().chain(other) {
        let answer = tokio::time::timeout(Duration::from_secs(5), h).await.expect("answered").expect("task");
        assert_eq!(answer.expect("send").status(), StatusCode::OK);
    }
    assert_eq!(post("z", 900 << 10).await.expect("send").status(), StatusCode::OK);
}
