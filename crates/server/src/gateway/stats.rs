//! What the gateway measures: Prometheus families (declared once here, registered into the
//! server's registry by [`crate::metrics::Metrics`]) and a sliding window per service from which
//! [`ServiceSnapshot`] is computed for an autoscaler.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use super::routes::ServiceKey;

/// `service`, `team` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    /// Service name.
    pub service: String,
    /// Owning team.
    pub team: String,
}

/// `service`, `team`, `replica` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaLabels {
    /// Service name.
    pub service: String,
    /// Owning team.
    pub team: String,
    /// Replica id.
    pub replica: String,
}

/// `service`, `team`, `replica`, `code` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Service name.
    pub service: String,
    /// Owning team.
    pub team: String,
    /// Replica id (`none` when the gateway answered itself).
    pub replica: String,
    /// HTTP status code.
    pub code: String,
}

/// `service`, `team`, `state` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaStateLabels {
    /// Service name.
    pub service: String,
    /// Owning team.
    pub team: String,
    /// `ready` or `not_ready`.
    pub state: String,
}

type Histograms = Family<ServiceLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 20))
}

fn cold_start_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 12))
}

/// The gateway's Prometheus families (cheap to clone: each is shared).
#[derive(Debug, Clone)]
pub struct GatewayMetrics {
    requests: Family<RequestLabels, Counter>,
    in_flight: Family<ReplicaLabels, Gauge>,
    queue_length: Family<ServiceLabels, Gauge>,
    duration: Histograms,
    ttfb: Histograms,
    cold_start: Histograms,
    replicas: Family<ReplicaStateLabels, Gauge>,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            in_flight: Family::default(),
            queue_length: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            ttfb: Family::new_with_constructor(latency_histogram),
            cold_start: Family::new_with_constructor(cold_start_histogram),
            replicas: Family::default(),
        }
    }
}

fn service_labels(key: &ServiceKey) -> ServiceLabels {
    ServiceLabels { service: key.service.clone(), team: key.team.clone() }
}

fn replica_labels(key: &ServiceKey, replica: &str) -> ReplicaLabels {
    ReplicaLabels { service: key.service.clone(), team: key.team.clone(), replica: replica.to_owned() }
}

impl GatewayMetrics {
    /// Fresh families, registered into `registry` (whose prefix is `gantry`).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("service_requests", "Requests through the gateway", m.requests.clone());
        registry.register("service_in_flight", "Requests in flight per replica", m.in_flight.clone());
        registry.register("service_queue_length", "Requests waiting for a replica", m.queue_length.clone());
        registry.register(
            "service_request_duration_seconds",
            "Seconds from a request's arrival to its response's last byte",
            m.duration.clone(),
        );
        registry.register(
            "service_time_to_first_byte_seconds",
            "Seconds from a request's arrival to its response's first body byte",
            m.ttfb.clone(),
        );
        registry.register(
            "service_cold_start_seconds",
            "Seconds from a request held with no ready replica to the first ready replica",
            m.cold_start.clone(),
        );
        registry.register("service_replicas", "Replicas per service and readiness", m.replicas.clone());
        m
    }

    pub(crate) fn in_flight_gauge(&self, key: &ServiceKey, replica: &str) -> Gauge {
        self.in_flight.get_or_create(&replica_labels(key, replica)).clone()
    }

    pub(crate) fn queue_gauge(&self, key: &ServiceKey) -> Gauge {
        self.queue_length.get_or_create(&service_labels(key)).clone()
    }

    pub(crate) fn forget_replica(&self, key: &ServiceKey, replica: &str) {
        self.in_flight.remove(&replica_labels(key, replica));
    }

    pub(crate) fn forget_service(&self, key: &ServiceKey) {
        self.queue_length.remove(&service_labels(key));
        for state in ["ready", "not_ready"] {
            let labels = ReplicaStateLabels {
                service: key.service.clone(),
                team: key.team.clone(),
                state: state.into(),
            };
            self.replicas.remove(&labels);
        }
    }

    pub(crate) fn set_replicas(&self, key: &ServiceKey, ready: usize, not_ready: usize) {
        for (state, n) in [("ready", ready), ("not_ready", not_ready)] {
            let labels = ReplicaStateLabels {
                service: key.service.clone(),
                team: key.team.clone(),
                state: state.into(),
            };
            self.replicas.get_or_create(&labels).set(n as i64);
        }
    }

    /// The request counters of one replica (`None`: the gateway's own answers, `replica="none"`),
    /// resolved once per status code rather than looked up by label on every request.
    pub(crate) fn request_counters(&self, key: &ServiceKey, replica: Option<&str>) -> RequestCounters {
        RequestCounters {
            family: self.requests.clone(),
            key: key.clone(),
            replica: replica.unwrap_or("none").to_owned(),
            by_code: Mutex::default(),
        }
    }
}

fn request_labels(key: &ServiceKey, replica: &str, code: u16) -> RequestLabels {
    RequestLabels {
        service: key.service.clone(),
        team: key.team.clone(),
        replica: replica.to_owned(),
        code: code.to_string(),
    }
}

/// `gantry_service_requests_total` of one replica, one counter per status code seen so far: the
/// family's label lookup (four strings built and hashed under its lock) happens once per code,
/// not once per request. A code's series appears on its first request, as before.
#[derive(Debug)]
pub(crate) struct RequestCounters {
    family: Family<RequestLabels, Counter>,
    key: ServiceKey,
    replica: String,
    by_code: Mutex<Vec<(u16, Counter)>>,
}

impl RequestCounters {
    /// One more request answered with `code`.
    pub(crate) fn count(&self, code: u16) {
        let mut by_code = self.by_code.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, counter)) = by_code.iter().find(|(c, _)| *c == code) {
            counter.inc();
            return;
        }
        let counter = self.family.get_or_create(&request_labels(&self.key, &self.replica, code)).clone();
        counter.inc();
        by_code.push((code, counter));
    }
}

/// Window over which [`ServiceSnapshot`] is computed.
pub const SNAPSHOT_WINDOW: Duration = Duration::from_secs(60);
/// Samples kept per service at most (the oldest go first at high rates).
const SAMPLES_MAX: usize = 8192;

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    duration_s: f64,
    ttfb_s: f64,
    error: bool,
}

/// One service's histograms and recent samples.
#[derive(Debug)]
pub(crate) struct ServiceStats {
    duration: Histogram,
    ttfb: Histogram,
    cold_start: Histogram,
    window: Mutex<(VecDeque<Sample>, u64)>,
    /// Requests that reached the service (counted once each, before any queueing or retry).
    arrivals: AtomicU64,
}

impl ServiceStats {
    pub(crate) fn new(key: &ServiceKey, metrics: &GatewayMetrics) -> Self {
        let labels = service_labels(key);
        Self {
            duration: metrics.duration.get_or_create(&labels).clone(),
            ttfb: metrics.ttfb.get_or_create(&labels).clone(),
            cold_start: metrics.cold_start.get_or_create(&labels).clone(),
            window: Mutex::default(),
            arrivals: AtomicU64::new(0),
        }
    }

    /// One more request reached the service (the autoscaler's arrival rate counts these).
    pub(crate) fn arrived(&self) {
        self.arrivals.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests that reached the service so far.
    pub(crate) fn arrivals_total(&self) -> u64 {
        self.arrivals.load(Ordering::Relaxed)
    }

    pub(crate) fn cold_start(&self, took: Duration) {
        self.cold_start.observe(took.as_secs_f64());
    }

    /// A finished request: `ttfb` is the time to its first body byte (its whole duration when
    /// the body was empty); `error` for a 5xx or an aborted body.
    pub(crate) fn finished(&self, duration: Duration, ttfb: Duration, error: bool) {
        let (duration_s, ttfb_s) = (duration.as_secs_f64(), ttfb.as_secs_f64());
        self.duration.observe(duration_s);
        self.ttfb.observe(ttfb_s);
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        if window.0.len() >= SAMPLES_MAX {
            window.0.pop_front();
        }
        window.0.push_back(Sample { at: Instant::now(), duration_s, ttfb_s, error });
        window.1 += 1;
    }

    /// Rate and percentiles over the last [`SNAPSHOT_WINDOW`] (or since the first request).
    pub(crate) fn window(&self, now: Instant) -> WindowFigures {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        while window.0.front().is_some_and(|s| now.duration_since(s.at) > SNAPSHOT_WINDOW) {
            window.0.pop_front();
        }
        let samples = &window.0;
        let span =
            samples.front().map_or(SNAPSHOT_WINDOW, |s| now.duration_since(s.at)).max(Duration::from_secs(1));
        let mut durations: Vec<f64> = samples.iter().map(|s| s.duration_s).collect();
        let mut ttfbs: Vec<f64> = samples.iter().map(|s| s.ttfb_s).collect();
        durations.sort_by(f64::total_cmp);
        ttfbs.sort_by(f64::total_cmp);
        WindowFigures {
            rps: samples.len() as f64 / span.min(SNAPSHOT_WINDOW).as_secs_f64(),
            latency_p50_s: percentile(&durations, 0.50),
            latency_p95_s: percentile(&durations, 0.95),
            ttft_p50_s: percentile(&ttfbs, 0.50),
            ttft_p95_s: percentile(&ttfbs, 0.95),
            ttft_histogram: super::histogram::Histogram::of(ttfbs.iter().copied()),
            errors: samples.iter().filter(|s| s.error).count() as u64,
            requests_total: window.1,
        }
    }
}

/// Nearest-rank percentile of sorted values (0 for none).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[derive(Debug, Clone)]
pub(crate) struct WindowFigures {
    pub(crate) rps: f64,
    pub(crate) latency_p50_s: f64,
    pub(crate) latency_p95_s: f64,
    pub(crate) ttft_p50_s: f64,
    pub(crate) ttft_p95_s: f64,
    pub(crate) ttft_histogram: super::histogram::Histogram,
    pub(crate) errors: u64,
    pub(crate) requests_total: u64,
}

/// One service's serving signals now, as an autoscaler reads them: plain numbers, per service,
/// over the last [`SNAPSHOT_WINDOW`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ServiceSnapshot {
    /// The service.
    pub team: String,
    /// The service's name.
    pub service: String,
    /// Replicas in the table.
    pub replicas: usize,
    /// Ready replicas.
    pub ready_replicas: usize,
    /// Requests per second finished over the window.
    pub rps: f64,
    /// Requests in flight on replicas now.
    pub in_flight: usize,
    /// `in_flight` per ready replica (all of it when none is ready).
    pub in_flight_per_replica: f64,
    /// Requests waiting for a replica now (held ones included).
    pub queue_length: usize,
    /// Median seconds from arrival to last byte.
    pub latency_p50_s: f64,
    /// 95th percentile of the same.
    pub latency_p95_s: f64,
    /// Median seconds from arrival to first body byte (first token, for a streaming LLM).
    pub ttft_p50_s: f64,
    /// 95th percentile of the same.
    pub ttft_p95_s: f64,
    /// The same times as a histogram, which adds up across server replicas' gateways.
    #[serde(skip)]
    pub ttft_histogram: super::histogram::Histogram,
    /// Requests over the window that ended in a 5xx or an aborted body.
    pub errors: u64,
    /// Requests finished since the gateway first saw the service.
    pub requests_total: u64,
    /// Requests that arrived since the gateway first saw the service (held, queued and
    /// refused ones included).
    pub arrivals_total: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::{Gateway, GatewayConfig, NoTokens, ReplicaEndpoint, Route};

    #[test]
    fn every_gateway_family_is_exported_on_the_servers_metrics_once_a_service_exists() {
        let metrics = crate::metrics::Metrics::default();
        let gateway = Gateway::new(
            GatewayConfig::default(),
            Box::new(NoTokens),
            metrics.gateway.clone(),
            Box::new(gantry_core::rng::SplitMix64::new(1)),
        );
        let key = ServiceKey::new("ml", "echo");
        let route = Route::new(vec![ReplicaEndpoint::ready("r0", "127.0.0.1:1".parse().expect("addr"))]);
        gateway.set_routes(&[(key.clone(), route)].into_iter().collect());
        metrics.gateway.request_counters(&key, Some("r0")).count(200);
        let text = metrics.encode().expect("encode");
        for name in [
            "gantry_service_requests_total{service=\"echo\",team=\"ml\",replica=\"r0\",code=\"200\"} 1",
            "gantry_service_in_flight{service=\"echo\",team=\"ml\",replica=\"r0\"} 0",
            "gantry_service_queue_length{service=\"echo\",team=\"ml\"} 0",
            "gantry_service_request_duration_seconds_count{service=\"echo\",team=\"ml\"} 0",
            "gantry_service_time_to_first_byte_seconds_count{service=\"echo\",team=\"ml\"} 0",
            "gantry_service_cold_start_seconds_count{service=\"echo\",team=\"ml\"} 0",
            "gantry_service_replicas{service=\"echo\",team=\"ml\",state=\"ready\"} 1",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let sorted = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&sorted, 0.5), 2.0);
        assert_eq!(percentile(&sorted, 0.95), 4.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
