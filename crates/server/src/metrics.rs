//! The control plane's own Prometheus metrics, declared once here.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `team` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TeamLabel {
    /// Team name.
    pub team: String,
}

/// `state` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// Job state.
    pub state: String,
}

/// `node` and `team` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeTeamLabel {
    /// Node id.
    pub node: String,
    /// Team name.
    pub team: String,
}

/// Every metric the server exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Pending jobs per team.
    pub queue_length: Family<TeamLabel, Gauge>,
    /// Jobs per state.
    pub jobs: Family<StateLabel, Gauge>,
    /// Seconds from submission to placement.
    pub placement_latency: Histogram,
    /// Seconds one scheduling pass took.
    pub scheduling_pass: Histogram,
    /// Accepted submissions.
    pub submissions: Counter,
    /// Running jobs the scheduler asked to stop for another.
    pub preemptions: Counter,
    /// Bytes of datasets in each node's cache per team, as the agents last reported.
    pub cache_bytes: Family<NodeTeamLabel, Gauge>,
    /// Declared inputs found in a node's cache (no copy).
    pub cache_hits: Counter,
    /// Bytes of declared inputs copied into nodes' caches.
    pub stage_bytes: Counter,
    /// Seconds each declared input took to stage (copied ones and hits).
    pub stage_duration: Histogram,
    /// The serving gateway's families (`gantry_service_*`, declared in [`crate::gateway::stats`]).
    pub gateway: crate::gateway::GatewayMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("gantry");
        let queue_length = Family::<TeamLabel, Gauge>::default();
        let jobs = Family::<StateLabel, Gauge>::default();
        let placement_latency = Histogram::new(exponential_buckets(0.005, 2.0, 16));
        let scheduling_pass = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        let submissions = Counter::default();
        let preemptions = Counter::default();
        registry.register("queue_length", "Pending jobs per team", queue_length.clone());
        registry.register("jobs", "Jobs per state", jobs.clone());
        registry.register(
            "placement_latency_seconds",
            "Seconds from submission to placement",
            placement_latency.clone(),
        );
        registry.register(
            "scheduling_pass_seconds",
            "Seconds one scheduling pass took",
            scheduling_pass.clone(),
        );
        registry.register("submissions", "Accepted job submissions", submissions.clone());
        registry.register("preemptions", "Running jobs stopped for another job", preemptions.clone());
        let cache_bytes = Family::<NodeTeamLabel, Gauge>::default();
        let (cache_hits, stage_bytes) = (Counter::default(), Counter::default());
        let stage_duration = Histogram::new(exponential_buckets(0.01, 2.0, 20));
        registry.register("cache_bytes", "Bytes of datasets in a node's cache per team", cache_bytes.clone());
        registry.register("cache_hits", "Declared inputs found in a node's cache", cache_hits.clone());
        registry.register(
            "stage_bytes",
            "Bytes of declared inputs copied into nodes' caches",
            stage_bytes.clone(),
        );
        registry.register(
            "stage_duration_seconds",
            "Seconds each declared input took to stage",
            stage_duration.clone(),
        );
        let gateway = crate::gateway::GatewayMetrics::register(&mut registry);
        Self {
            registry,
            queue_length,
            jobs,
            placement_latency,
            scheduling_pass,
            submissions,
            preemptions,
            cache_bytes,
            cache_hits,
            stage_bytes,
            stage_duration,
            gateway,
        }
    }
}

impl Metrics {
    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
