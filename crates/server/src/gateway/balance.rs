//! Choosing a replica: least outstanding requests between two random choices, a per-replica
//! cap, and one FIFO queue per service for requests that find every replica full (or none
//! ready).
//!
//! Two random choices (Mitzenmacher's "power of two choices") keep the maximum load within
//! `O(log log n)` of the mean, like a full least-loaded scan, without the herd a full scan causes
//! when several requests see the same idle replica at once; Envoy's and Linkerd's default
//! balancers do the same. Every count is changed under the service's one lock, so a cap is never
//! exceeded and a freed slot goes to the oldest waiter (handed over directly: a newcomer cannot
//! overtake the queue).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::http::HeaderValue;
use gantry_core::rng::{RandomSource, SplitMix64};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::proxy::Pool;
use super::routes::{Demand, ReplicaEndpoint, Route, ServiceKey};
use super::stats::{GatewayMetrics, RequestCounters, ServiceStats};

/// One replica as the gateway tracks it.
#[derive(Debug)]
pub(crate) struct Replica {
    pub(crate) id: String,
    pub(crate) addr: std::net::SocketAddr,
    /// Requests sent to it and not yet answered in full (changed under the service lock).
    in_flight: AtomicUsize,
    /// Idle keep-alive connections to it.
    pub(crate) pool: Pool,
    in_flight_gauge: Gauge,
    /// Its `gantry_service_requests_total` series.
    pub(crate) requests: RequestCounters,
    /// `Host` as it gets it: its own address.
    pub(crate) host: HeaderValue,
}

impl Replica {
    fn new(endpoint: &ReplicaEndpoint, key: &ServiceKey, metrics: &GatewayMetrics) -> Self {
        Self {
            id: endpoint.id.clone(),
            addr: endpoint.addr,
            in_flight: AtomicUsize::new(0),
            pool: Pool::default(),
            in_flight_gauge: metrics.in_flight_gauge(key, &endpoint.id),
            requests: metrics.request_counters(key, Some(&endpoint.id)),
            host: super::headers::host_value(endpoint.addr),
        }
    }

    fn load(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    fn add(&self, n: isize) {
        if n > 0 {
            self.in_flight.fetch_add(1, Ordering::Relaxed);
        } else {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
        self.in_flight_gauge.inc_by(n as i64);
    }
}

/// A replica and whether it may get requests, as of the last table.
#[derive(Debug)]
struct Member {
    replica: Arc<Replica>,
    ready: bool,
    cap: usize,
}

/// Why no replica was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The queue is full: 429.
    QueueFull,
    /// Waited `queue_timeout` for a free replica.
    QueueTimeout(Duration),
    /// Held `cold_start_timeout` for a ready replica.
    ColdStartTimeout(Duration),
    /// No ready replica and none may be started.
    NoReplica,
    /// The service left the table while the request waited.
    Gone,
    /// No ready replica, and its replicas keep failing ([`Service::failing`] says how).
    Failing,
}

/// A waiting request; gets its replica through the channel.
#[derive(Debug)]
struct Waiter {
    tx: oneshot::Sender<Lease>,
    /// Replicas it is not to be given (a retry's failed ones).
    avoid: Vec<String>,
}

#[derive(Debug)]
struct Inner {
    members: Vec<Member>,
    queue: VecDeque<Waiter>,
    can_start: bool,
    queue_limit: usize,
    /// The route's own hold limit (`None`: the gateway's `cold_start_timeout`).
    cold_start_timeout: Option<Duration>,
    rng: SplitMix64,
    /// When the first request was held with no replica ready (a cold start in progress).
    cold_since: Option<Instant>,
    removed: bool,
    /// The route's `failing`.
    failing: Option<String>,
}

/// One service's replicas, queue and measurements.
#[derive(Debug)]
pub(crate) struct Service {
    pub(crate) key: ServiceKey,
    inner: Mutex<Inner>,
    pub(crate) stats: ServiceStats,
    pub(crate) metrics: GatewayMetrics,
    /// `gantry_service_requests_total{replica="none"}`: what the gateway answered itself.
    pub(crate) own_requests: RequestCounters,
    queue_gauge: Gauge,
    /// The route's `public`, readable without the lock (every request asks).
    public: AtomicBool,
    /// The bytes of this service's request bodies held now, in KiB permits.
    pub(crate) bodies: Arc<tokio::sync::Semaphore>,
}

/// The right to one request's slot on a replica; dropping it frees the slot (and hands it to
/// the oldest waiter).
#[derive(Debug)]
pub(crate) struct Lease {
    service: Arc<Service>,
    pub(crate) replica: Arc<Replica>,
    armed: bool,
}

impl Lease {
    /// The service it is a slot of.
    pub(crate) fn service(&self) -> &Arc<Service> {
        &self.service
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.armed {
            self.service.release(&self.replica);
        }
    }
}

impl Service {
    pub(crate) fn new(
        key: ServiceKey,
        route: &Route,
        seed: u64,
        metrics: &GatewayMetrics,
        body_budget: usize,
    ) -> Arc<Self> {
        let inner = Inner {
            members: Vec::new(),
            queue: VecDeque::new(),
            can_start: false,
            queue_limit: 0,
            cold_start_timeout: None,
            rng: SplitMix64::new(seed),
            cold_since: None,
            removed: false,
            failing: None,
        };
        let service = Arc::new(Self {
            stats: ServiceStats::new(&key, metrics),
            queue_gauge: metrics.queue_gauge(&key),
            own_requests: metrics.request_counters(&key, None),
            public: AtomicBool::new(false),
            bodies: Arc::new(tokio::sync::Semaphore::new(super::kib(body_budget))),
            metrics: metrics.clone(),
            inner: Mutex::new(inner),
            key,
        });
        service.update(route);
        service
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether anyone may call it without a token.
    pub(crate) fn is_public(&self) -> bool {
        self.public.load(Ordering::Acquire)
    }

    /// `(in flight, queued, ready replicas, replicas)` now.
    pub(crate) fn counts(&self) -> (usize, usize, usize, usize) {
        let inner = self.lock();
        let in_flight = inner.members.iter().map(|m| m.replica.load()).sum();
        let ready = inner.members.iter().filter(|m| m.ready).count();
        (in_flight, inner.queue.len(), ready, inner.members.len())
    }

    /// Requests in flight on one replica now (`None`: no such replica in the table).
    pub(crate) fn replica_in_flight(&self, id: &str) -> Option<usize> {
        let inner = self.lock();
        inner.members.iter().find(|m| m.replica.id == id).map(|m| m.replica.load())
    }

    /// Takes a new table entry: replicas keep their state when id and address match; newly
    /// free capacity goes to waiters; the end of a cold start is measured.
    pub(crate) fn update(self: &Arc<Self>, route: &Route) {
        let mut inner = self.lock();
        let mut old = std::mem::take(&mut inner.members);
        for endpoint in &route.replicas {
            let kept =
                old.iter().position(|m| m.replica.id == endpoint.id && m.replica.addr == endpoint.addr);
            let replica = match kept {
                Some(i) => old.swap_remove(i).replica,
                None => Arc::new(Replica::new(endpoint, &self.key, &self.metrics)),
            };
            let cap = endpoint.max_concurrency.unwrap_or(usize::MAX).max(1);
            inner.members.push(Member { replica, ready: endpoint.ready, cap });
        }
        for gone in old {
            self.metrics.forget_replica(&self.key, &gone.replica.id);
        }
        inner.can_start = route.can_start;
        inner.failing = route.failing.clone();
        inner.queue_limit = route.queue_limit;
        inner.cold_start_timeout = route.cold_start_timeout.map(|d| d.min(super::MAX_ROUTE_COLD_START));
        self.public.store(route.public, Ordering::Release);
        let ready = inner.members.iter().filter(|m| m.ready).count();
        self.metrics.set_replicas(&self.key, ready, inner.members.len() - ready);
        if ready > 0
            && let Some(since) = inner.cold_since.take()
        {
            self.stats.cold_start(since.elapsed());
        }
        // A new table is a new start: what a retry avoided may be fine now.
        inner.queue.iter_mut().for_each(|w| w.avoid.clear());
        if ready == 0 && (!inner.can_start || inner.failing.is_some()) {
            // Nothing will free these waiters; answer them now rather than at their timeout.
            inner.queue.clear();
        }
        self.drain(&mut inner);
    }

    /// Why its replicas keep failing, when the route says so.
    pub(crate) fn failing(&self) -> Option<String> {
        self.lock().failing.clone()
    }

    /// The service left the table: its waiters are answered (their channels close).
    pub(crate) fn remove(&self) {
        let mut inner = self.lock();
        inner.removed = true;
        inner.queue.clear();
        for m in &inner.members {
            self.metrics.forget_replica(&self.key, &m.replica.id);
        }
        self.metrics.forget_service(&self.key);
    }

    /// A replica for one request: at once if one has room (and nobody queues), else after
    /// waiting in the FIFO queue. `avoid` are replicas a retry should not go back to (they are
    /// used only when no other has room).
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        avoid: &[String],
        queue_timeout: Duration,
        cold_start_timeout: Duration,
        demand: &mpsc::Sender<Demand>,
    ) -> Result<Lease, Refusal> {
        let (rx, held, cold_start_timeout) = {
            let mut inner = self.lock();
            if inner.removed {
                return Err(Refusal::Gone);
            }
            // A retry goes back to a replica it failed on only when every ready one is such.
            let all_avoided = inner.members.iter().filter(|m| m.ready).all(|m| avoid.contains(&m.replica.id));
            let avoid = if all_avoided { Vec::new() } else { avoid.to_vec() };
            if inner.queue.is_empty()
                && let Some(replica) = pick(&mut inner, &avoid)
            {
                return Ok(self.grant(replica));
            }
            let held = !inner.members.iter().any(|m| m.ready);
            if held && inner.failing.is_some() {
                return Err(Refusal::Failing);
            }
            if held && !inner.can_start {
                return Err(Refusal::NoReplica);
            }
            inner.queue.retain(|w| !w.tx.is_closed());
            if inner.queue.len() >= inner.queue_limit {
                return Err(Refusal::QueueFull);
            }
            let (tx, rx) = oneshot::channel();
            inner.queue.push_back(Waiter { tx, avoid });
            self.queue_gauge.set(inner.queue.len() as i64);
            if held {
                inner.cold_since.get_or_insert_with(Instant::now);
                let waiting = Demand { service: self.key.clone(), held: inner.queue.len() };
                // A full channel already tells the controller there is demand.
                let _ = demand.try_send(waiting);
            }
            (rx, held, inner.cold_start_timeout.unwrap_or(cold_start_timeout))
        };
        let limit = if held { cold_start_timeout } else { queue_timeout };
        let outcome = tokio::time::timeout(limit, rx).await;
        match outcome {
            Ok(Ok(lease)) => Ok(lease),
            // The queue was cleared: the service left the table, or lost its last ready
            // replica with none allowed to start.
            Ok(Err(_)) => {
                let inner = self.lock();
                Err(if inner.removed {
                    Refusal::Gone
                } else if inner.failing.is_some() {
                    Refusal::Failing
                } else {
                    Refusal::NoReplica
                })
            }
            Err(_) => {
                let mut inner = self.lock();
                inner.queue.retain(|w| !w.tx.is_closed());
                self.queue_gauge.set(inner.queue.len() as i64);
                Err(if held { Refusal::ColdStartTimeout(limit) } else { Refusal::QueueTimeout(limit) })
            }
        }
    }

    /// Counts a request on `replica` (under the lock) and wraps it in a lease.
    fn grant(self: &Arc<Self>, replica: Arc<Replica>) -> Lease {
        replica.add(1);
        Lease { service: Arc::clone(self), replica, armed: true }
    }

    fn release(self: &Arc<Self>, replica: &Arc<Replica>) {
        let mut inner = self.lock();
        replica.add(-1);
        self.drain(&mut inner);
    }

    /// Gives free slots to waiters, oldest first.
    fn drain(self: &Arc<Self>, inner: &mut Inner) {
        while let Some(front) = inner.queue.front() {
            if front.tx.is_closed() {
                inner.queue.pop_front();
                continue;
            }
            let avoid = std::mem::take(&mut inner.queue[0].avoid);
            let Some(replica) = pick(inner, &avoid) else {
                inner.queue[0].avoid = avoid;
                break;
            };
            let Some(waiter) = inner.queue.pop_front() else { break };
            if let Err(mut lease) = waiter.tx.send(self.grant(replica)) {
                // The waiter gave up in between: undo here, under the lock already held.
                lease.armed = false;
                lease.replica.add(-1);
            }
        }
        self.queue_gauge.set(inner.queue.len() as i64);
    }
}

/// Two random choices among the ready replicas with room (not in `avoid`): the one with fewer
/// requests in flight.
fn pick(inner: &mut Inner, avoid: &[String]) -> Option<Arc<Replica>> {
    // Counted, then indexed, rather than collected: no allocation per request.
    let is_open = |m: &Member| m.ready && m.replica.load() < m.cap && !avoid.contains(&m.replica.id);
    let nth_open = |members: &[Member], k: usize| {
        members.iter().enumerate().filter(|(_, m)| is_open(m)).nth(k).map_or(0, |(i, _)| i)
    };
    let chosen = match inner.members.iter().filter(|m| is_open(m)).count() {
        0 => return None,
        1 => nth_open(&inner.members, 0),
        n => {
            let ka = inner.rng.index(n);
            let mut kb = inner.rng.index(n - 1);
            if kb == ka {
                kb = n - 1;
            }
            let (a, b) = (nth_open(&inner.members, ka), nth_open(&inner.members, kb));
            let (la, lb) = (inner.members[a].replica.load(), inner.members[b].replica.load());
            if lb < la { b } else { a }
        }
    };
    Some(Arc::clone(&inner.members[chosen].replica))
}
