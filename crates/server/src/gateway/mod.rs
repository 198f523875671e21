//! The serving gateway: `http://HOST:PORT/<team>/<service>/<path>` reaches a ready replica of
//! that service, with `/<team>/<service>` stripped from the path.
//!
//! A request goes through four stages, each in its own file:
//! 1. **Who** ([`auth`]): a public service admits anyone; a private one admits the tokens the
//!    [`Authorizer`] accepts for it. A token that is refused gets the same 404 as a service that
//!    does not exist; a missing token gets 401 (see [`auth`] for why this leaks nothing).
//! 2. **Where** (`balance.rs`): least outstanding requests between two random choices among the
//!    ready replicas under their `max_concurrency`; when every one is full, a bounded FIFO queue
//!    (429 with `Retry-After` past its bound, 503 after [`GatewayConfig::queue_timeout`]). A
//!    service with no ready replica that may start one ([`Route::can_start`], scale from zero)
//!    holds the request for up to [`GatewayConfig::cold_start_timeout`] and reports
//!    [`Demand`] to the controller: the activator of Knative, without a separate component.
//! 3. **How** (`proxy.rs`, [`headers`]): the body is read whole within a size limit (413), the
//!    headers are rewritten (hop-by-hop, forwarding and `Authorization` are the gateway's, not
//!    the client's), and the request goes out on a pooled HTTP/1.1 connection; one that could not
//!    be sent at all (refused, or closed before a byte went out) is tried on another replica. The
//!    response is relayed frame by frame, unbuffered.
//! 4. **How well** (`stats.rs`): Prometheus families per service and replica, and a
//!    [`ServiceSnapshot`] per service for an autoscaler.
//!
//! The listener is the control plane's own ([`crate::transport`]): TLS, a cap on open connections,
//! a cap per peer address and a header-read timeout, so thousands of slow connections cannot
//! starve normal clients. The controller drives the gateway only through
//! [`Gateway::set_routes`] and [`Gateway::demand`]; the gateway keeps no state beyond
//! in-flight counts, queues, pooled connections and measurements.

pub mod auth;
mod balance;
pub mod bench;
mod handler;
pub mod headers;
pub mod histogram;
mod proxy;
pub mod routes;
pub mod stats;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use gantry_core::rng::RandomSource;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

pub use auth::{Authorizer, FnAuthorizer, NoTokens, TeamMembers};
pub use proxy::RelayError;
pub use routes::{Demand, ReplicaEndpoint, Route, RoutingTable, ServiceKey};
pub use stats::{GatewayMetrics, ServiceSnapshot};

use balance::Service;

/// The gateway's settings.
#[derive(Debug, Clone, Copy)]
pub struct GatewayConfig {
    /// Largest request body, bytes (larger: 413).
    pub body_limit: usize,
    /// Time allowed to read a request body (slower: 408).
    pub body_timeout: Duration,
    /// Time allowed to connect to a replica (then another is tried).
    pub connect_timeout: Duration,
    /// Time allowed for a replica's response headers (then 504).
    pub header_timeout: Duration,
    /// Time allowed for a whole response, streamed body included (then the stream is cut).
    pub total_timeout: Duration,
    /// Time a request may wait in the queue for a free replica (then 503).
    pub queue_timeout: Duration,
    /// Time a request may be held for a service with no ready replica (then 503).
    pub cold_start_timeout: Duration,
    /// Replicas tried for one request whose sends failed before a byte went out.
    pub max_attempts: usize,
    /// Seconds in the `Retry-After` of a 429.
    pub retry_after_s: u32,
    /// Whether clients reach the gateway over TLS (`X-Forwarded-Proto: https`).
    pub tls: bool,
    /// The listener's limits (connections, per address, header read, TLS handshake).
    pub max_connections: usize,
    /// Open connections from one peer address at most.
    pub max_connections_per_address: usize,
    /// Time allowed for a request's headers, and for an idle keep-alive connection.
    pub header_read_timeout: Duration,
    /// Time allowed for a TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Request bodies the gateway holds at once, bytes, over every service (each is read whole
    /// before a replica is chosen, and held through a cold start): past it a request gets 503
    /// at once instead of the server's memory growing with every client.
    pub body_budget: usize,
    /// The same, for one service.
    pub body_budget_per_service: usize,
}

impl Default for GatewayConfig {
    /// 16 MiB bodies, 30 s to read one, 2 s to connect, 5 min for response headers (a long
    /// prompt's prefill), 1 h for a whole stream, 30 s in the queue, 10 min held for a cold start,
    /// 3 attempts; 10,000 connections, 1,024 per address, 10 s for headers; 64 MiB of request
    /// bodies held at once, 32 MiB for one service.
    fn default() -> Self {
        Self {
            body_limit: 16 << 20,
            body_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
            header_timeout: Duration::from_secs(300),
            total_timeout: Duration::from_secs(3600),
            queue_timeout: Duration::from_secs(30),
            cold_start_timeout: Duration::from_secs(600),
            max_attempts: 3,
            retry_after_s: 1,
            tls: false,
            max_connections: 10_000,
            max_connections_per_address: 1024,
            header_read_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            body_budget: 64 << 20,
            body_budget_per_service: 32 << 20,
        }
    }
}

/// The gateway: a routing table, its services' state, and the settings.
#[derive(Debug)]
pub struct Gateway {
    config: GatewayConfig,
    services: RwLock<HashMap<ServiceKey, Arc<Service>>>,
    authorizer: Box<dyn Authorizer>,
    metrics: GatewayMetrics,
    rng: Mutex<Seeds>,
    demand_tx: mpsc::Sender<Demand>,
    demand_rx: Mutex<Option<mpsc::Receiver<Demand>>>,
    /// Refused bearer tokens per client address (as the API counts failed authentications).
    refusals: crate::auth::FailureLimiter,
    /// The bytes of request bodies held now, in KiB permits ([`GatewayConfig::body_budget`]).
    bodies: Arc<tokio::sync::Semaphore>,
}

/// The generator each new service's seed comes from.
struct Seeds(Box<dyn RandomSource + Send>);

impl std::fmt::Debug for Seeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seeds")
    }
}

/// Permits for `bytes`: one a KiB, rounded up (a semaphore counts at most `u32::MAX >> 3`).
pub(crate) fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024).min(tokio::sync::Semaphore::MAX_PERMITS)
}

/// Demand notices buffered for the controller; past it, newer ones are dropped (the controller
/// already knows).
const DEMAND_BUFFER: usize = 1024;

/// The longest a route may hold a request for a cold start (a service file's
/// `cold_start_timeout` is refused past it): the listener's own request timeout outlasts it.
pub(crate) const MAX_ROUTE_COLD_START: Duration =
    Duration::from_secs(gantry_api::service::MAX_COLD_START_TIMEOUT_S);

impl Gateway {
    /// A gateway with an empty table. `rng` seeds each service's replica choice (pass a seeded
    /// generator for reproducible tests).
    pub fn new(
        config: GatewayConfig,
        authorizer: Box<dyn Authorizer>,
        metrics: GatewayMetrics,
        rng: Box<dyn RandomSource + Send>,
    ) -> Self {
        let (demand_tx, demand_rx) = mpsc::channel(DEMAND_BUFFER);
        Self {
            config,
            services: RwLock::default(),
            authorizer,
            metrics,
            rng: Mutex::new(Seeds(rng)),
            demand_tx,
            demand_rx: Mutex::new(Some(demand_rx)),
            refusals: crate::auth::FailureLimiter::default(),
            bodies: Arc::new(tokio::sync::Semaphore::new(kib(config.body_budget))),
        }
    }

    /// The settings.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// Replaces the routing table. Services and replicas that stay keep their state; requests
    /// waiting for a service that left get 503; capacity that appeared goes to waiters at once.
    pub fn set_routes(&self, table: &RoutingTable) {
        let mut services = self.services.write().unwrap_or_else(PoisonError::into_inner);
        services.retain(|key, service| {
            let keep = table.contains_key(key);
            if !keep {
                service.remove();
            }
            keep
        });
        for (key, route) in table {
            match services.get(key) {
                Some(service) => service.update(route),
                None => {
                    let seed = self.rng.lock().unwrap_or_else(PoisonError::into_inner).0.next_u64();
                    services.insert(
                        key.clone(),
                        Service::new(
                            key.clone(),
                            route,
                            seed,
                            &self.metrics,
                            self.config.body_budget_per_service,
                        ),
                    );
                }
            }
        }
    }

    /// Drops one service's route now (the service was deleted: its path answers 404 from the
    /// moment the deletion is acknowledged, not from the controller's next table).
    pub fn remove(&self, key: &ServiceKey) {
        let mut services = self.services.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(service) = services.remove(key) {
            service.remove();
        }
    }

    /// The demand notices (once: the controller takes the receiver).
    pub fn demand(&self) -> Option<mpsc::Receiver<Demand>> {
        self.demand_rx.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// One service's serving signals now.
    pub fn snapshot(&self, key: &ServiceKey) -> Option<ServiceSnapshot> {
        let service = self.service(key)?;
        let (in_flight, queue_length, ready, replicas) = service.counts();
        let w = service.stats.window(tokio::time::Instant::now());
        Some(ServiceSnapshot {
            team: key.team.clone(),
            service: key.service.clone(),
            replicas,
            ready_replicas: ready,
            rps: w.rps,
            in_flight,
            in_flight_per_replica: in_flight as f64 / ready.max(1) as f64,
            queue_length,
            latency_p50_s: w.latency_p50_s,
            latency_p95_s: w.latency_p95_s,
            ttft_p50_s: w.ttft_p50_s,
            ttft_p95_s: w.ttft_p95_s,
            ttft_histogram: w.ttft_histogram,
            errors: w.errors,
            requests_total: w.requests_total,
            arrivals_total: service.stats.arrivals_total(),
        })
    }

    /// Requests in flight on one replica of a service now: a replica taken out of the table's
    /// ready set finishes these (the controller stops it once this is 0). `None`: unknown.
    pub fn replica_in_flight(&self, key: &ServiceKey, replica: &str) -> Option<usize> {
        self.service(key)?.replica_in_flight(replica)
    }

    /// Every service's snapshot, ordered by team and name.
    pub fn snapshots(&self) -> Vec<ServiceSnapshot> {
        let mut keys: Vec<ServiceKey> =
            self.services.read().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect();
        keys.sort();
        keys.iter().filter_map(|k| self.snapshot(k)).collect()
    }

    fn service(&self, key: &ServiceKey) -> Option<Arc<Service>> {
        self.services.read().unwrap_or_else(PoisonError::into_inner).get(key).cloned()
    }

    /// The gateway as an axum router (every path, every method).
    pub fn router(self: &Arc<Self>) -> axum::Router {
        let gateway = Arc::clone(self);
        axum::Router::new().fallback(move |req: axum::extract::Request| {
            let gateway = Arc::clone(&gateway);
            async move { handler::handle(&gateway, req).await }
        })
    }

    /// Serves on `listeners` (see [`crate::listen::bind`]) until `shutdown` resolves, with TLS
    /// when `tls` is given, through the control plane's listener and its limits.
    pub async fn serve(
        self: Arc<Self>,
        listeners: Vec<TcpListener>,
        tls: Option<Arc<rustls::ServerConfig>>,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        let c = self.config;
        // The gateway bounds each stage itself; the listener's own request timeout only has to
        // outlast all of them.
        let request_timeout = c.body_timeout
            + c.cold_start_timeout.max(c.queue_timeout).max(MAX_ROUTE_COLD_START)
            + c.header_timeout
            + c.connect_timeout * c.max_attempts as u32
            + Duration::from_secs(10);
        let limits = crate::transport::Limits {
            max_connections: c.max_connections,
            max_connections_per_address: c.max_connections_per_address,
            loopback_is_one_source: false,
            header_read_timeout: c.header_read_timeout,
            tls_handshake_timeout: c.tls_handshake_timeout,
            request_timeout,
            shutdown_grace: Duration::from_secs(30),
        };
        crate::transport::serve(listeners, None, self.router(), tls, limits, shutdown).await;
    }

    /// Binds `addr` (both loopback families for a loopback address) and serves.
    pub async fn bind_and_serve(
        self: Arc<Self>,
        addr: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), crate::listen::ListenError> {
        let bound = crate::listen::bind(addr).await?;
        self.serve(bound.listeners, tls, shutdown).await;
        Ok(())
    }
}
