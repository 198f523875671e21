//! The service autoscaler: how many replicas a service should have, as a pure decision.
//!
//! **Shape.** Every policy is a value that takes an [`Input`] (the time `now_s`, the current
//! and ready replica counts, and a window of metric [`Sample`]s, oldest first) and returns a
//! [`Decision`] `{from, to, reason}`. Nothing here reads a clock or does I/O: the server's
//! gateway and the serving simulator (`gantry_sim::serve`) fill the same plain [`Sample`]
//! struct and call the same function, so a decision in the simulator is the decision the server
//! would take on the same numbers. Policies keep their own history (past recommendations, past
//! scale events) because HPA's stabilization and rate limits are defined over it; that history
//! is part of the input, carried in the value between calls.
//!
//! **HPA** ([`hpa`]) is Kubernetes' algorithm as its documentation states it: per metric
//! `desired = ceil(current × value / target)`, nothing within the tolerance band, the largest
//! recommendation across metrics, then stabilization (scale up to the *smallest* recommendation
//! of the last `scale_up.stabilization_window_s`, down to the *largest* of the last
//! `scale_down.stabilization_window_s`), then the rate policies (`pods` or `percent` per
//! `period_s`, counted from the replica count at the start of the period, `select_policy`
//! picking the largest or smallest allowed change, or none), then `min..max`.
//!
//! **Baselines** ([`baselines`]): Knative's KPA (stable 60 s / panic 6 s windows on concurrency,
//! panic at 200 % of target), Ray Serve (target ongoing requests, 30 s upscale / 600 s downscale
//! delays) and a fixed count.
//!
//! **Gantry** ([`gantry`]) keeps every HPA field working and adds what HPA lacks for GPU
//! replicas whose cold start lasts minutes: a model of a replica's capacity, a panic mode that
//! answers a burst in one sync, a scale-down window tied to the cold start (keeping an idle
//! replica costs less than restarting it until the idle time exceeds the cold start), and
//! scale-from-zero on the first queued request.

pub mod baselines;
pub mod config;
pub mod fluid;
pub mod gantry;
pub mod hpa;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use baselines::{Fixed, Kpa, KpaConfig, RayServe, RayServeConfig};
pub use config::{
    AutoscaleConfig, Behavior, ConfigError, DEFAULT_COLD_START_S, DEFAULT_SLO_TTFT_S, MetricKind, MetricSpec,
    Policy, PolicyType, ScalingPolicy, ScalingRules, SelectPolicy,
};
pub use gantry::{GantryAutoscaler, ReplicaModel};
pub use hpa::Hpa;

/// One observation of a service, as the gateway measures it over a short interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// When it was taken, in seconds on the caller's clock.
    pub at_s: f64,
    /// Requests sent to replicas and not yet answered, summed over replicas.
    pub in_flight: f64,
    /// Requests waiting in the gateway's queue (every replica at its concurrency cap, or none ready).
    pub queue_length: f64,
    /// Requests per second arriving at the gateway over the interval.
    pub rps: f64,
    /// 95th percentile time to first token over the interval, when any request got one.
    pub ttft_p95_s: Option<f64>,
    /// Mean GPU utilisation of the ready replicas, 0..=1.
    pub gpu_utilization: Option<f64>,
    /// Mean SM activity of the ready replicas, 0..=1.
    pub sm_active: Option<f64>,
    /// Series scraped from the replicas' `/metrics`, summed over replicas.
    pub prometheus: BTreeMap<String, f64>,
}

impl Sample {
    /// The value of one metric in this sample: a total for per-replica metrics, a level otherwise.
    pub fn value(&self, spec: &MetricSpec) -> Option<f64> {
        match spec.kind {
            MetricKind::InFlight => Some(self.in_flight),
            MetricKind::Rps => Some(self.rps),
            MetricKind::QueueLength => Some(self.queue_length),
            MetricKind::TtftP95 => self.ttft_p95_s,
            MetricKind::GpuUtilization => self.gpu_utilization,
            MetricKind::SmActive => self.sm_active,
            MetricKind::Prometheus => spec.series.as_ref().and_then(|s| self.prometheus.get(s).copied()),
        }
    }

    /// Requests the service holds: in flight at replicas plus queued at the gateway.
    pub fn concurrency(&self) -> f64 {
        self.in_flight + self.queue_length
    }
}

/// What a policy decides on.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// Now, on the same clock as the samples.
    pub now_s: f64,
    /// Replicas the service has (starting or ready), i.e. the count the last decision set.
    pub current: u32,
    /// Of those, the ones ready for traffic.
    pub ready: u32,
    /// Recent samples, oldest first.
    pub window: &'a [Sample],
}

impl Input<'_> {
    /// Samples taken in the last `seconds` (at least the newest one, when there is any).
    pub fn last(&self, seconds: f64) -> &[Sample] {
        let from = self.now_s - seconds;
        let start = self.window.iter().position(|s| s.at_s > from).unwrap_or(self.window.len());
        let start = start.min(self.window.len().saturating_sub(1));
        &self.window[start..]
    }

    /// The mean of `f` over the samples of the last `seconds`, if any.
    pub fn mean(&self, seconds: f64, f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = self.last(seconds).iter().filter_map(f).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }
}

/// A decision: the count goes `from` → `to` (equal when nothing changes), and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The time of the input.
    pub at_s: f64,
    /// The count before.
    pub from: u32,
    /// The count decided.
    pub to: u32,
    /// A sentence, e.g. `in_flight 9.1 per replica over target 4`.
    pub reason: String,
}

impl Decision {
    /// Whether the count changes.
    pub fn changes(&self) -> bool {
        self.from != self.to
    }
}

/// The replica range `min..=max` of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The fewest replicas (0 allows scale to zero).
    pub min: u32,
    /// The most replicas.
    pub max: u32,
}

impl Bounds {
    /// `count` moved into `min..=max`.
    pub fn clamp(self, count: u32) -> u32 {
        count.clamp(self.min, self.max.max(self.min))
    }
}

/// Any of the policies behind one interface, for drivers that choose by name.
#[derive(Debug, Clone)]
pub enum Autoscaler {
    /// Kubernetes' HPA.
    Hpa(Hpa),
    /// Knative's KPA.
    Kpa(Kpa),
    /// Ray Serve's policy.
    RayServe(RayServe),
    /// A constant count.
    Fixed(Fixed),
    /// Gantry's policy.
    Gantry(GantryAutoscaler),
}

impl Autoscaler {
    /// The policy a validated `autoscale:` block names, for `bounds`; `sync_set` says whether
    /// the block named `sync_s` itself (Gantry's policy syncs every second otherwise). The
    /// server's services and the serving simulator's `gantry` both start here.
    pub fn from_config(config: AutoscaleConfig, sync_set: bool, bounds: Bounds) -> Self {
        match config.policy {
            Policy::Hpa => Self::Hpa(Hpa::new(config, bounds)),
            Policy::Gantry => {
                let model = ReplicaModel::of(&config);
                Self::Gantry(GantryAutoscaler::new(config, sync_set, bounds, model))
            }
        }
    }

    /// One decision.
    pub fn decide(&mut self, input: &Input<'_>) -> Decision {
        match self {
            Self::Hpa(p) => p.decide(input),
            Self::Kpa(p) => p.decide(input),
            Self::RayServe(p) => p.decide(input),
            Self::Fixed(p) => p.decide(input),
            Self::Gantry(p) => p.decide(input),
        }
    }

    /// Seconds between two decisions.
    pub fn sync_s(&self) -> f64 {
        match self {
            Self::Hpa(p) => p.config().sync_s,
            Self::Kpa(_) => 2.0,
            Self::RayServe(_) | Self::Fixed(_) => 1.0,
            Self::Gantry(p) => p.sync_s(),
        }
    }
}
