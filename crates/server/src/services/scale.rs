//! How many replicas a service wants: the core's policy (`autoscale.policy`: HPA, the default,
//! or Gantry's) on the gateway's figures every sync, scale to zero after `scale_to_zero_after`
//! without a request, and back from zero on the first held request. A value per service
//! carrying its window of samples; no clock (times are arguments), so the rules are tested
//! here without a server.
//!
//! The policy is built by `gantry_core::autoscale::Autoscaler::from_config`, the function the
//! serving simulator builds its `gantry` policy with, and decides on the same `Sample`s: one
//! per second at most (a tick within a second of the previous sample replaces the newest one),
//! `rps` being the arrivals at the gateway over the sample's interval (Gantry's sizing replays
//! them through its fluid queue), plus the other server replicas' requests per second.
//!
//! HPA itself never goes below one replica (Kubernetes' `minReplicas` is at least 1 unless a
//! feature gate says otherwise); zero is this layer's: the last replica stops only after the
//! service saw no request for `scale_to_zero_after`, and the gateway holds the next request
//! (reporting demand) while one starts.

use std::collections::VecDeque;

use gantry_core::autoscale::{
    AutoscaleConfig, Autoscaler, Bounds, Decision, Input, MetricKind, Policy, Sample,
};
use gantry_store::ServiceSpec;

/// Seconds of samples HPA's decision reads (its own recommendation history is kept apart).
const WINDOW_S: f64 = 600.0;
/// Seconds of samples Gantry's sizing may replay: its scale-down window, at most HPA's
/// longest stabilization window (3,600 s).
const GANTRY_WINDOW_S: f64 = 3_660.0;

/// The autoscaler of one service.
#[derive(Debug)]
pub struct Scaler {
    policy: Option<Autoscaler>,
    sync_s: f64,
    window_s: f64,
    /// Samples, oldest first, each with the gateway's arrival count when it was taken.
    window: VecDeque<(Sample, u64)>,
    last_sync_s: f64,
    last_request_s: f64,
    requests_seen: Option<u64>,
    min: u32,
    max: u32,
    idle_after_s: f64,
    /// The `prometheus` series the block names (scraped from the replicas).
    series: Vec<String>,
    /// Whether the block names `gpu_utilization` or `sm_active`.
    gpu_metrics: bool,
    /// Gantry's policy only: whether the replicas serve the `replica_rps` the block declares.
    rate: Option<super::rate::RateCheck>,
}

/// The `autoscale:` block read with the core's types; a sentence when it is not valid.
pub fn autoscale_config(spec: &ServiceSpec) -> Result<Option<AutoscaleConfig>, String> {
    let Some(block) = &spec.autoscale else { return Ok(None) };
    let config: AutoscaleConfig =
        serde_json::from_value(block.clone()).map_err(|e| format!("autoscale: {e}"))?;
    config.validate().map(Some).map_err(|e| e.to_string())
}

impl Scaler {
    /// The scaler of a checked file, at `now_s`.
    pub fn new(spec: &ServiceSpec, now_s: f64) -> Result<Self, String> {
        let r = spec.replicas;
        let config = autoscale_config(spec)?;
        let metrics = config.as_ref().map(|c| c.metrics.as_slice()).unwrap_or_default();
        let series = metrics.iter().filter_map(|m| m.series.clone()).collect();
        let gpu_metrics =
            metrics.iter().any(|m| matches!(m.kind, MetricKind::GpuUtilization | MetricKind::SmActive));
        let window_s = match config.as_ref().map(|c| c.policy) {
            Some(Policy::Gantry) => GANTRY_WINDOW_S,
            _ => WINDOW_S,
        };
        let sync_set = spec.autoscale.as_ref().is_some_and(|b| b.get("sync_s").is_some());
        let rate = config
            .as_ref()
            .filter(|c| c.policy == Policy::Gantry)
            .and_then(AutoscaleConfig::replica_rps)
            .map(super::rate::RateCheck::new);
        let bounds = Bounds { min: r.min.max(1), max: r.max };
        let policy = config.map(|c| Autoscaler::from_config(c, sync_set, bounds));
        let sync_s = policy.as_ref().map_or(15.0, Autoscaler::sync_s);
        Ok(Self {
            policy,
            sync_s,
            window_s,
            window: VecDeque::new(),
            last_sync_s: now_s,
            last_request_s: now_s,
            requests_seen: None,
            min: r.min,
            max: r.max,
            idle_after_s: spec.scale_to_zero_after_s() as f64,
            series,
            gpu_metrics,
            rate,
        })
    }

    /// Seconds between two decisions.
    pub fn sync_s(&self) -> f64 {
        self.sync_s
    }

    /// The series to scrape from the replicas' `/metrics` (none: no scrape).
    pub fn series(&self) -> &[String] {
        &self.series
    }

    /// Whether the block scales on GPU levels.
    pub fn gpu_metrics(&self) -> bool {
        self.gpu_metrics
    }

    /// How often the replicas are scraped: every sync, at most every 5 s.
    pub fn scrape_every_ms(&self) -> i64 {
        (self.sync_s.min(5.0) * 1000.0) as i64
    }

    /// Takes one sample; `requests_total` is the gateway's count of answered requests, so a
    /// change (or anything in flight or queued) is a request seen; `arrivals_total` its count
    /// of requests that arrived, from which the sample's `rps` is the rate over its interval
    /// (added to the `rps` the sample carries: the other server replicas').
    pub fn observe(&mut self, mut sample: Sample, requests_total: u64, arrivals_total: u64) {
        let busy = sample.in_flight > 0.0 || sample.queue_length > 0.0;
        let answered = self.requests_seen.is_some_and(|seen| seen != requests_total);
        if busy || answered {
            self.last_request_s = sample.at_s;
        }
        self.requests_seen = Some(requests_total);
        // The newest sample stays open (is replaced) until its interval reaches a second.
        let n = self.window.len();
        if n >= 2 && self.window[n - 1].0.at_s - self.window[n - 2].0.at_s < 1.0 {
            self.window.pop_back();
        }
        if let Some((prev, seen)) = self.window.back() {
            let dt = sample.at_s - prev.at_s;
            if dt > 0.0 {
                sample.rps += arrivals_total.saturating_sub(*seen) as f64 / dt;
            }
        }
        while self.window.front().is_some_and(|(s, _)| s.at_s < sample.at_s - self.window_s) {
            self.window.pop_front();
        }
        self.window.push_back((sample, arrivals_total));
    }

    /// Feeds the check of the declared replica rate (Gantry's policy; see [`super::rate`]): at
    /// `at_s`, `ready` replicas, `answered` requests answered by this gateway so far, and
    /// whether requests wait in its queue with no other gateway sending to the service. A
    /// sentence when the replicas serve a rate the block does not declare.
    pub fn check_rate(&mut self, at_s: f64, ready: u32, answered: u64, saturated: bool) -> Option<String> {
        let check = self.rate.as_mut()?;
        check.tick(at_s, ready, answered, saturated);
        check.note()
    }

    /// Counts a request seen elsewhere (another server replica's gateway) at `at_s`.
    pub fn saw_request_at(&mut self, at_s: f64) {
        self.last_request_s = self.last_request_s.max(at_s);
    }

    /// The decision at `now_s` for a service at `current` replicas (`ready` of them) with
    /// `held` requests waiting for a replica; `None` when the count stays.
    pub fn decide(&mut self, now_s: f64, current: u32, ready: u32, held: usize) -> Option<Decision> {
        let at_s = now_s;
        if current == 0 {
            self.last_sync_s = now_s;
            if held == 0 {
                return None;
            }
            self.last_request_s = now_s;
            let to = self.min.max(1);
            let reason = format!("scaled 0 → {to}: cold start, {held} request(s) held by the gateway");
            return Some(Decision { at_s, from: 0, to, reason });
        }
        if self.min == 0 && now_s - self.last_request_s >= self.idle_after_s {
            let idle = self.idle_after_s;
            let reason = format!("scaled {current} → 0: no request for {}", human(idle));
            return Some(Decision { at_s, from: current, to: 0, reason });
        }
        let policy = self.policy.as_mut()?;
        if now_s - self.last_sync_s < self.sync_s {
            return None;
        }
        self.last_sync_s = now_s;
        let window: Vec<Sample> = self.window.iter().map(|(s, _)| s.clone()).collect();
        let current = current.clamp(self.min.max(1), self.max);
        let d = policy.decide(&Input { now_s, current, ready, window: &window });
        d.changes().then_some(d)
    }
}

fn human(seconds: f64) -> String {
    let s = seconds.round() as u64;
    match s {
        s if s % 3600 == 0 && s > 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 && s > 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(replicas: &str, autoscale: serde_json::Value, idle: &str) -> ServiceSpec {
        serde_json::from_value(serde_json::json!({
            "name": "echo", "port": 8000, "command": ["x"], "replicas": replicas,
            "autoscale": autoscale, "scale_to_zero_after": idle,
        }))
        .expect("spec")
    }

    fn sample(at_s: f64, in_flight: f64) -> Sample {
        Sample { at_s, in_flight, ..Sample::default() }
    }

    #[test]
    fn the_autoscaler_follows_hpa_on_the_gateways_in_flight_every_sync_and_says_why() {
        let block = serde_json::json!({"sync_s": 1, "metrics": [{"type": "in_flight", "target": 2}]});
        let mut s = Scaler::new(&spec("1..4", block, "15m"), 0.0).expect("scaler");
        s.observe(sample(0.5, 7.0), 0, 0);
        assert_eq!(s.decide(0.5, 1, 1, 0), None, "before the first sync");
        s.observe(sample(1.0, 7.0), 0, 0);
        let d = s.decide(1.0, 1, 1, 0).expect("a decision");
        assert_eq!((d.from, d.to), (1, 4));
        assert!(d.reason.starts_with("scaled 1 → 4: in_flight"), "{}", d.reason);
    }

    #[test]
    fn a_service_that_may_scale_to_zero_stops_after_its_idle_time_and_comes_back_on_a_held_request() {
        let block = serde_json::json!({"sync_s": 1, "metrics": [{"type": "in_flight", "target": 2}]});
        let mut s = Scaler::new(&spec("0..2", block, "30s"), 0.0).expect("scaler");
        s.observe(sample(10.0, 1.0), 5, 5);
        s.observe(sample(20.0, 0.0), 6, 6);
        assert_eq!(s.decide(49.0, 1, 1, 0).map(|d| d.to), None, "29 s after the last request");
        s.observe(sample(50.0, 0.0), 6, 6);
        let d = s.decide(50.0, 1, 1, 0).expect("to zero");
        assert_eq!((d.from, d.to, d.reason.as_str()), (1, 0, "scaled 1 → 0: no request for 30s"));
        assert_eq!(s.decide(60.0, 0, 0, 0), None);
        let d = s.decide(61.0, 0, 0, 2).expect("cold start");
        assert_eq!((d.from, d.to), (0, 1));
        assert!(d.reason.contains("cold start, 2 request(s) held"), "{}", d.reason);
    }

    #[test]
    fn gantry_sizes_on_the_gateways_arrivals_each_second_and_says_why() {
        let block = serde_json::json!({"policy": "gantry", "replica_rps": 5, "cold_start_s": 30});
        let mut s = Scaler::new(&spec("1..16", block, "15m"), 0.0).expect("scaler");
        assert_eq!(s.sync_s(), 1.0, "Gantry's policy syncs every second unless the block says otherwise");
        let mut last = None;
        // 50 requests/s arrive; the tick samples every 250 ms; nothing is in flight (a
        // metric HPA would read), so only the arrivals can scale the service.
        for tick in 0..=40 {
            let at_s = f64::from(tick) * 0.25;
            s.observe(Sample { at_s, ..Sample::default() }, 0, (at_s * 50.0) as u64);
            if let Some(d) = s.decide(at_s, last.as_ref().map_or(1, |d: &Decision| d.to), 1, 0) {
                last = Some(d);
            }
        }
        assert!(s.window.len() <= 12, "one sample per second: {} kept", s.window.len());
        assert!(s.window.iter().skip(1).all(|(x, _)| (x.rps - 50.0).abs() < 1e-9), "{:?}", s.window);
        let d = last.expect("a scale-up");
        assert_eq!(d.to, 10, "50 req/s over replicas of 5 req/s: {}", d.reason);
        assert!(d.reason.contains("need 10 replicas of 5.0 req/s"), "{}", d.reason);
    }

    #[test]
    fn gantry_says_when_busy_replicas_serve_less_than_the_declared_rate_and_hpa_never_does() {
        let block = serde_json::json!({"policy": "gantry", "replica_rps": 5});
        let mut s = Scaler::new(&spec("1..8", block, "15m"), 0.0).expect("scaler");
        let mut said = Vec::new();
        // Two replicas answer 3 requests a second between them while requests queue.
        for tick in 0..=60u32 {
            said.extend(s.check_rate(f64::from(tick), 2, u64::from(tick) * 3, true));
        }
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("served 1.50 req/s each") && said[0].contains("replica_rps 5"),
            "{}",
            said[0]
        );
        let hpa = serde_json::json!({"metrics": [{"type": "rps", "target": 5}]});
        let mut h = Scaler::new(&spec("1..8", hpa, "15m"), 0.0).expect("scaler");
        assert!((0..=60u32).all(|t| h.check_rate(f64::from(t), 2, u64::from(t) * 3, true).is_none()));
    }

    #[test]
    fn a_bad_autoscale_block_is_refused_with_the_cores_sentence() {
        let bad = spec("1..4", serde_json::json!({"metrics": []}), "15m");
        let why = Scaler::new(&bad, 0.0).expect_err("refused");
        assert!(why.starts_with("autoscale.metrics needs at least one metric"), "{why}");
        let hpa_model = spec(
            "1..4",
            serde_json::json!({"metrics": [{"type": "rps", "target": 2}], "cold_start_s": 30}),
            "15m",
        );
        assert_eq!(
            Scaler::new(&hpa_model, 0.0).expect_err("refused"),
            "autoscale.cold_start_s: is read only with policy: gantry"
        );
        let typo = spec("1..4", serde_json::json!({"metric": []}), "15m");
        assert!(Scaler::new(&typo, 0.0).expect_err("refused").contains("unknown field `metric`"));
    }
}
