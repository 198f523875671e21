//! Gantry's autoscaler: HPA's fields, plus what HPA lacks for GPU replicas.
//!
//! HPA was built for stateless pods that start in seconds. An LLM replica takes one to several
//! minutes to become ready, serves requests in continuous batches, and its GPU utilisation is
//! near 100 % whenever it has work. Four additions, each answering one of these facts; none is a
//! per-trace knob:
//!
//! 1. **Sizing on the recent arrivals** ([`super::fluid`]): the count recommended is the fewest
//!    replicas that would have served the arrivals of the last cold start in time, replayed
//!    through a fluid queue of replicas each serving [`ReplicaModel::rate`] requests per
//!    second, a request being late when it would wait longer than [`ReplicaModel::wait_s`];
//!    at most 0.5 % of them may be (half the 1 % a 99 % SLO allows). Bursts recur: the
//!    scale-down window (item 3) keeps the count a burst needed until it has not recurred for
//!    three cold starts. The rate and the wait come from the profile's service times by
//!    queueing arithmetic ([`ReplicaModel::from_service_times`]): a busy replica prefills one
//!    typical prompt at a time (decode runs inside the prefill iterations), and a request may
//!    wait half the TTFT SLO less its own prefill (the other half covers what a fluid queue of
//!    one-second samples does not see: arrivals bunched within a second, uneven prompts, the
//!    balancer's imbalance). The capacity in concurrent requests (Little's law at the
//!    utilisation whose mean wait is a quarter of the SLO) is kept as the HPA target a driver
//!    may use.
//! 2. **Panic mode**: when requests wait in the gateway queue, or the sizing of item 1 on the
//!    last 6 s alone asks for twice the ready replicas, the scale-up applies in this sync,
//!    whatever the up window.
//! 3. **A scale-down window tied to the cold start**: a replica released now and needed again
//!    costs one cold start of GPU time (the ski-rental break-even is to keep an idle replica for
//!    one cold start) but also a whole cold start of requests queued behind too few replicas.
//!    The default window is therefore three cold starts, and never shorter than HPA's 300 s.
//!    (A first version used one cold start; on the Azure code trace, whose bursts last seconds
//!    and recur within minutes, it released replicas between bursts and missed the SLO.)
//! 4. **Scale to zero and back**: with `min = 0`, after `scale_to_zero_after_s` without a
//!    request the count goes to zero (that idle time is its own window); the first request seen
//!    at zero scales up at once.
//!
//! Every HPA field keeps its meaning: the configured metrics recommend exactly as in [`super::hpa`]
//! (the larger of both recommendations wins), and an explicitly set stabilization window,
//! policy list or `select_policy` is applied as HPA applies it. Only where the block is silent
//! do Gantry's defaults differ: scale-up unlimited by rate (the cold start already is the
//! limit), scale-down window three cold starts (at least 300 s), and a 1 s sync.

use super::config::{
    AutoscaleConfig, DEFAULT_COLD_START_S, DEFAULT_SLO_TTFT_S, PolicyType, Resolved, ScalingPolicy,
    SelectPolicy,
};
use super::fluid::replicas_for;
use super::hpa::{History, explain, recommend};

/// The share of requests the sizing lets wait beyond [`ReplicaModel::wait_s`]: a quarter of the 1 % a
/// 99 % SLO allows.
pub const LATE_SHARE: f64 = 0.0025;
use super::{Bounds, Decision, Input};

/// What one replica can hold and how long a new one takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplicaModel {
    /// Concurrent requests a replica holds within the TTFT SLO.
    pub capacity: f64,
    /// Requests per second a busy replica serves.
    pub rate: f64,
    /// Seconds a request may wait for a replica before its prefill.
    pub wait_s: f64,
    /// Seconds from a scale-up decision to a ready replica.
    pub cold_start_s: f64,
}

impl ReplicaModel {
    /// The capacity of a replica whose typical request needs `prefill_s` of exclusive prefill
    /// and then `decode_s` of batched decoding, for a TTFT SLO of `slo_ttft_s` (see item 1).
    pub fn from_service_times(prefill_s: f64, decode_s: f64, slo_ttft_s: f64, cold_start_s: f64) -> Self {
        let wait = slo_ttft_s / 4.0;
        let rho = (1.0 - prefill_s / wait.max(f64::MIN_POSITIVE)).clamp(0.05, 0.95);
        let capacity = (rho / prefill_s.max(1e-6) * (wait + decode_s)).max(1.0);
        let rate = 1.0 / prefill_s.max(1e-6);
        let wait_s = (slo_ttft_s - prefill_s).max(slo_ttft_s / 10.0);
        Self { capacity, rate, wait_s, cold_start_s }
    }

    /// The model a service file declares (`policy: gantry`): a busy replica serves
    /// `replica_rps` requests per second, so a typical request's prefill takes `1 / replica_rps`
    /// (its decode runs batched inside later prefills and adds no exclusive time). Rate, wait
    /// and cold start equal those of [`Self::from_service_times`] for that prefill, which is
    /// what the simulator derives from a profile.
    pub fn declared(replica_rps: f64, slo_ttft_s: f64, cold_start_s: f64) -> Self {
        let rate = replica_rps.max(1e-6);
        let derived = Self::from_service_times(1.0 / rate, 0.0, slo_ttft_s, cold_start_s);
        Self { rate, ..derived }
    }

    /// The model of a validated block with `policy: gantry`, defaults filled in.
    pub fn of(config: &AutoscaleConfig) -> Self {
        Self::declared(
            config.replica_rps().unwrap_or(1.0),
            config.slo_ttft_s.unwrap_or(DEFAULT_SLO_TTFT_S),
            config.cold_start_s.unwrap_or(DEFAULT_COLD_START_S),
        )
    }
}

/// Gantry's policy and its history.
#[derive(Debug, Clone)]
pub struct GantryAutoscaler {
    config: AutoscaleConfig,
    bounds: Bounds,
    model: ReplicaModel,
    up: Resolved,
    down: Resolved,
    sync_set: bool,
    scale_to_zero_after_s: f64,
    last_request_s: f64,
    history: History,
}

impl GantryAutoscaler {
    /// A policy for a validated block; `sync_set` says whether the block named `sync_s` itself.
    pub fn new(config: AutoscaleConfig, sync_set: bool, bounds: Bounds, model: ReplicaModel) -> Self {
        let (mut up, mut down) = config.behavior.resolved();
        let up_rules = config.behavior.scale_up.clone().unwrap_or_default();
        if up_rules.policies.is_none() {
            up.policies =
                vec![ScalingPolicy { kind: PolicyType::Pods, value: f64::from(u32::MAX), period_s: 1.0 }];
            up.select = up_rules.select_policy.unwrap_or(SelectPolicy::Max);
        }
        let down_rules = config.behavior.scale_down.clone().unwrap_or_default();
        if down_rules.stabilization_window_s.is_none() {
            down.window_s = (3.0 * model.cold_start_s).max(300.0);
        }
        Self {
            config,
            bounds,
            model,
            up,
            down,
            sync_set,
            scale_to_zero_after_s: 900.0,
            last_request_s: 0.0,
            history: History::default(),
        }
    }

    /// Seconds without a request before a service with `min = 0` goes to zero (default 15 min).
    pub fn with_scale_to_zero_after(mut self, seconds: f64) -> Self {
        self.scale_to_zero_after_s = seconds;
        self
    }

    /// Seconds between decisions: the block's `sync_s` when it set one, else 1 s.
    pub fn sync_s(&self) -> f64 {
        if self.sync_set { self.config.sync_s } else { 1.0 }
    }

    /// One sync.
    pub fn decide(&mut self, input: &Input<'_>) -> Decision {
        // With no metric the sizing decides alone (HPA's "no data" would hold the count).
        let metricless = self.config.metrics.is_empty();
        let (hpa, hpa_why) = if metricless { (0, String::new()) } else { recommend(&self.config, input) };
        let recent = input.last(self.sync_s());
        let peak = recent.iter().map(|s| s.concurrency()).fold(0.0, f64::max);
        if recent.iter().any(|s| s.concurrency() > 0.0 || s.rps > 0.0) {
            self.last_request_s = input.now_s;
        }
        let m = self.model;
        let sized =
            |seconds: f64| replicas_for(input.last(seconds), m.rate, m.wait_s, LATE_SHARE, self.bounds.max);
        let horizon = self.down.window_s.max(m.cold_start_s).max(self.sync_s());
        let by_arrivals = sized(horizon);
        let queued = recent.last().is_some_and(|s| s.queue_length > 0.0);
        let panic = queued || sized(6.0) >= 2 * input.ready.max(1);
        let (mut raw, mut why) = if by_arrivals > hpa || metricless {
            let rps = input.mean(horizon, |s| Some(s.rps)).unwrap_or(0.0);
            (
                by_arrivals,
                format!(
                    "arrivals of the last {:.0} s (mean {rps:.1} req/s) need {by_arrivals} replicas of {:.1} req/s each",
                    horizon, m.rate
                ),
            )
        } else {
            (hpa, hpa_why)
        };
        let idle = self.bounds.min == 0 && input.now_s - self.last_request_s >= self.scale_to_zero_after_s;
        if idle {
            (raw, why) = (0, format!("no request for {:.0} s", input.now_s - self.last_request_s));
        } else if input.current == 0 && peak > 0.0 {
            raw = raw.max(1);
            why = format!("cold start: {peak:.0} requests waiting with no replica");
        }
        let to = if panic && raw > input.current {
            why = format!("panic: {why}");
            let up = Resolved { window_s: 0.0, ..self.up.clone() };
            self.history.settle(input, raw, self.bounds, &up, &self.down)
        } else if idle {
            let down = Resolved { window_s: 0.0, ..self.down.clone() };
            self.history.settle(input, raw, self.bounds, &self.up, &down)
        } else {
            self.history.settle(input, raw, self.bounds, &self.up, &self.down)
        };
        Decision { at_s: input.now_s, from: input.current, to, reason: explain(input.current, raw, to, &why) }
    }
}
