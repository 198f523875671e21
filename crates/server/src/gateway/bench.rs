//! The gateway benchmark's engine (`gantry bench gateway`): a replica that answers after a
//! fixed delay, the gateway in front of it, and an open-loop load generator, all in this
//! process on loopback. Each rate runs first straight to the replica, then through the gateway.
//!
//! Open loop: each request has a scheduled send time (the rate spread evenly over the
//! connections), and its latency is counted from that time, not from when it was actually sent,
//! so a stall delays the requests behind it and shows in the percentiles instead of hiding
//! (coordinated omission, Tene). The two paths alternate in one-second slices (each after a
//! quarter second of warm-up that is not counted), so a busy moment of the machine falls on both
//! rather than on whichever path happened to run then.
//!
//! Three runtimes, as three processes would be: the load generator and the replica each run on a
//! single-threaded runtime of their own thread, the gateway on the caller's. Sharing one
//! work-stealing runtime, the client's timers and the replica's sleeps queued behind the
//! gateway's tasks and the gateway's behind theirs, and the tails measured that interference
//! (a 10 ms replica's direct p99 was 15 to 36 ms on an idle 2-core machine).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gantry_core::rng::SplitMix64;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::{Gateway, GatewayConfig, GatewayMetrics, NoTokens, ReplicaEndpoint, Route, ServiceKey};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchSettings {
    /// Client connections (each sends one request at a time, keep-alive).
    pub connections: u32,
    /// Request rates, requests per second.
    pub rates: Vec<u32>,
    /// Seconds per rate and path.
    pub seconds: f64,
    /// How long the replica takes to answer.
    pub replica_delay: Duration,
}

/// One rate's figures (milliseconds).
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchRow {
    /// Requests per second offered.
    pub rps: u32,
    /// p99 straight to the replica.
    pub direct_p99_ms: f64,
    /// p99 through the gateway.
    pub gateway_p99_ms: f64,
    /// The difference.
    pub added_p99_ms: f64,
    /// Failed requests (non-200 or transport errors), both paths.
    pub errors: u64,
    /// p50 straight to the replica.
    pub direct_p50_ms: f64,
    /// p50 through the gateway.
    pub gateway_p50_ms: f64,
    /// The difference.
    pub added_p50_ms: f64,
    /// Requests sent, both paths.
    pub requests: u64,
    /// Requests per second the gateway run achieved.
    pub achieved_rps: f64,
    /// Client connections.
    pub connections: u32,
    /// The replica's delay.
    pub replica_delay_ms: f64,
    /// This process's CPU time per request straight to the replica (client and replica), µs.
    pub direct_cpu_us_per_request: f64,
    /// The same through the gateway (client, gateway and replica), µs: the difference is what
    /// the gateway costs, whatever else the machine is doing.
    pub gateway_cpu_us_per_request: f64,
}

/// Runs every rate, direct then through the gateway.
pub async fn measure(settings: &BenchSettings) -> std::io::Result<Vec<BenchRow>> {
    let replica = start_replica(settings.replica_delay).await?;
    let gateway = start_gateway(replica).await?;
    let mut rows = Vec::new();
    for &rate in &settings.rates {
        let (mut direct, mut through) = (Run::default(), Run::default());
        for _ in 0..(settings.seconds / SLICE_S).ceil().max(1.0) as usize {
            direct.absorb(load_apart(replica, "/", rate, settings.connections).await?);
            through.absorb(load_apart(gateway, "/bench/echo/", rate, settings.connections).await?);
        }
        let (d99, g99) = (direct.percentile_ms(0.99), through.percentile_ms(0.99));
        let (d50, g50) = (direct.percentile_ms(0.50), through.percentile_ms(0.50));
        rows.push(BenchRow {
            rps: rate,
            direct_p99_ms: round(d99),
            gateway_p99_ms: round(g99),
            added_p99_ms: round(g99 - d99),
            errors: direct.errors + through.errors,
            direct_p50_ms: round(d50),
            gateway_p50_ms: round(g50),
            added_p50_ms: round(g50 - d50),
            requests: direct.sent + through.sent,
            achieved_rps: round(through.sent as f64 / through.wall.as_secs_f64().max(1e-9)),
            connections: settings.connections,
            replica_delay_ms: settings.replica_delay.as_secs_f64() * 1000.0,
            direct_cpu_us_per_request: round(direct.cpu_us_per_request()),
            gateway_cpu_us_per_request: round(through.cpu_us_per_request()),
        });
    }
    Ok(rows)
}

/// One run's latencies and failures.
#[derive(Debug, Default)]
struct Run {
    latencies: Vec<Duration>,
    errors: u64,
    sent: u64,
    wall: Duration,
    cpu: Duration,
}

impl Run {
    fn absorb(&mut self, other: Run) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        self.sent += other.sent;
        self.wall += other.wall;
        self.cpu += other.cpu;
    }

    fn cpu_us_per_request(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.sent.max(1) as f64
    }

    fn percentile_ms(&self, q: f64) -> f64 {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        if sorted.is_empty() {
            return 0.0;
        }
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1].as_secs_f64() * 1000.0
    }
}

fn round(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// A replica on loopback answering `ok` after `delay`, on a single-threaded runtime of its own
/// thread (the replica's process) for as long as this process runs.
async fn start_replica(delay: Duration) -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let replica = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("bench-replica".into()).spawn(move || {
        replica.block_on(async move {
            let Ok(listener) = TcpListener::from_std(listener) else { return };
            serve_replica(listener, delay).await;
        });
    })?;
    Ok(addr)
}

/// The replica's accept loop.
async fn serve_replica(listener: TcpListener, delay: Duration) {
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let service = hyper::service::service_fn(move |_req| async move {
            tokio::time::sleep(delay).await;
            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
        });
        tokio::spawn(
            hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
        );
    }
}

/// The gateway on loopback, routing the public service `bench/echo` to `replica`.
async fn start_gateway(replica: SocketAddr) -> std::io::Result<SocketAddr> {
    let config = GatewayConfig { max_connections_per_address: 10_000, ..GatewayConfig::default() };
    let gateway = Arc::new(Gateway::new(
        config,
        Box::new(NoTokens),
        GatewayMetrics::default(),
        Box::new(SplitMix64::new(1)),
    ));
    let mut route = Route::new(vec![ReplicaEndpoint::ready("r0", replica)]);
    route.public = true;
    gateway.set_routes(&[(ServiceKey::new("bench", "echo"), route)].into_iter().collect());
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(gateway.serve(vec![listener], None, std::future::pending()));
    Ok(addr)
}

/// Seconds of one measured slice.
const SLICE_S: f64 = 1.0;
/// Warm-up before each slice (fresh connections), not counted.
const WARM_UP: Duration = Duration::from_millis(250);

/// [`load`] on a single-threaded runtime of its own thread (the load generator's process).
async fn load_apart(
    addr: SocketAddr,
    path: &'static str,
    rate: u32,
    connections: u32,
) -> std::io::Result<Run> {
    let client = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let thread = std::thread::Builder::new()
        .name("bench-client".into())
        .spawn(move || client.block_on(load(addr, path, rate, connections)))?;
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .map_err(std::io::Error::other)?
        .map_err(|_| std::io::Error::other("the load generator panicked"))?
}

/// `rate` requests/s of `GET path` to `addr` over `connections` for one slice.
async fn load(addr: SocketAddr, path: &'static str, rate: u32, connections: u32) -> std::io::Result<Run> {
    let connections = connections.max(1);
    let interval = Duration::from_secs_f64(f64::from(connections) / f64::from(rate));
    let seconds = SLICE_S + WARM_UP.as_secs_f64();
    let per_connection = (seconds * f64::from(rate) / f64::from(connections)).ceil() as u64;
    let warm_up = WARM_UP;
    let start = Instant::now() + Duration::from_millis(200);
    let mut tasks = Vec::new();
    for c in 0..connections {
        let offset = interval.mul_f64(f64::from(c) / f64::from(connections));
        tasks.push(tokio::spawn(connection(
            addr,
            path,
            start + offset,
            interval,
            per_connection,
            start + warm_up,
        )));
    }
    let cpu_before = process_cpu();
    let mut run = Run::default();
    for t in tasks {
        let one = t.await.map_err(std::io::Error::other)?;
        run.latencies.extend(one.latencies);
        run.errors += one.errors;
        run.sent += one.sent;
    }
    run.wall = start.elapsed();
    run.cpu = process_cpu().saturating_sub(cpu_before);
    Ok(run)
}

/// One connection's share: requests at `first`, `first + interval`, …; latency from each
/// scheduled time. A failed connection is replaced (and its request counted as an error).
async fn connection(
    addr: SocketAddr,
    path: &'static str,
    first: Instant,
    interval: Duration,
    n: u64,
    counted_from: Instant,
) -> Run {
    let mut run = Run::default();
    let mut sender = None;
    for i in 0..n {
        let scheduled = first + interval.mul_f64(i as f64);
        tokio::time::sleep_until(scheduled).await;
        run.sent += 1;
        let ok = match sender.as_mut() {
            Some(s) => request(s, addr, path).await,
            None => match open(addr).await {
                Some(mut s) => {
                    let ok = request(&mut s, addr, path).await;
                    sender = Some(s);
                    ok
                }
                None => false,
            },
        };
        if !ok {
            sender = None;
            run.errors += 1;
        } else if scheduled >= counted_from {
            run.latencies.push(scheduled.elapsed());
        }
    }
    run
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn open(addr: SocketAddr) -> Option<Sender> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// One GET, its body read; true for a 200.
async fn request(sender: &mut Sender, addr: SocketAddr, path: &str) -> bool {
    if sender.ready().await.is_err() {
        return false;
    }
    let Ok(req) = hyper::Request::get(path).header("host", addr.to_string()).body(Full::new(Bytes::new()))
    else {
        return false;
    };
    let Ok(response) = sender.send_request(req).await else { return false };
    let ok = response.status() == hyper::StatusCode::OK;
    ok && response.into_body().collect().await.is_ok()
}

/// User and system CPU time of this process so far, from `/proc/self/stat` (in clock ticks of
/// 1/100 s, the Linux `USER_HZ`); zero where it cannot be read.
fn process_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return Duration::ZERO };
    // Fields after the command name (which may hold spaces) in parentheses: utime is the 14th
    // field of the line, stime the 15th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_request_is_answered_on_both_paths_and_none_faster_than_the_replica() {
        let settings = BenchSettings {
            connections: 4,
            rates: vec![200],
            seconds: 1.0,
            replica_delay: Duration::from_millis(3),
        };
        let rows = measure(&settings).await.expect("bench");
        let [row] = rows.as_slice() else { panic!("one row per rate: {rows:?}") };
        assert_eq!(row.errors, 0, "{row:?}");
        assert!(row.requests >= 400, "a slice each way at 200 requests/s: {row:?}");
        // The replica sleeps 3 ms before answering: no request is counted as faster.
        assert!(row.direct_p50_ms >= 3.0 && row.gateway_p50_ms >= 3.0, "{row:?}");
    }
}
