//! The published autoscalers Gantry is measured against, each as its project documents it.
//!
//! - **Knative KPA** (`autoscaler.go` of `knative/serving`): concurrency (requests at the pods
//!   plus those held by the activator) averaged over a 60 s stable and a 6 s panic window;
//!   `desired = ceil(average / (target × 0.7))` per window; panic starts when the panic window's
//!   per-ready-pod concurrency reaches 200 % of the target and lasts until a stable window has
//!   passed without it; in panic the count never falls; each tick moves at most ×1000 up and
//!   ÷2 down. Ticks every 2 s.
//! - **Ray Serve** (`autoscaling_policy.py`): ongoing requests per replica (running + queued)
//!   averaged over a 30 s look-back, `desired = ceil(total / target)`; a change happens only
//!   after it has been wanted continuously for `upscale_delay_s` (30 s) or `downscale_delay_s`
//!   (600 s); from zero it scales at once.
//! - **Fixed**: a constant count (the simulator's oracle picks the smallest that meets the SLO).

use super::{Bounds, Decision, Input};

/// Knative's settings (defaults as in `config-autoscaler`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KpaConfig {
    /// `container-concurrency-target-default`, requests per pod.
    pub target: f64,
    /// `container-concurrency-target-percentage` as a fraction (0.7).
    pub target_utilization: f64,
    /// `stable-window` seconds (60).
    pub stable_s: f64,
    /// Panic window seconds (10 % of the stable window: 6).
    pub panic_s: f64,
    /// `panic-threshold-percentage` as a ratio (2.0).
    pub panic_threshold: f64,
    /// `max-scale-up-rate` (1000).
    pub max_scale_up_rate: f64,
    /// `max-scale-down-rate` (2).
    pub max_scale_down_rate: f64,
}

impl KpaConfig {
    /// Knative's defaults with a concurrency target.
    pub fn with_target(target: f64) -> Self {
        Self {
            target,
            target_utilization: 0.7,
            stable_s: 60.0,
            panic_s: 6.0,
            panic_threshold: 2.0,
            max_scale_up_rate: 1000.0,
            max_scale_down_rate: 2.0,
        }
    }
}

/// The KPA with its panic state.
#[derive(Debug, Clone)]
pub struct Kpa {
    config: KpaConfig,
    bounds: Bounds,
    panic_since: Option<f64>,
    max_panic: u32,
}

impl Kpa {
    /// A KPA for a replica range.
    pub fn new(config: KpaConfig, bounds: Bounds) -> Self {
        Self { config, bounds, panic_since: None, max_panic: 0 }
    }

    /// One tick.
    pub fn decide(&mut self, input: &Input<'_>) -> Decision {
        let c = self.config;
        let per_pod = (c.target * c.target_utilization).max(f64::MIN_POSITIVE);
        let stable = input.mean(c.stable_s, |s| Some(s.concurrency())).unwrap_or(0.0);
        let panic = input.mean(c.panic_s, |s| Some(s.concurrency())).unwrap_or(0.0);
        let ready = f64::from(input.ready.max(1));
        let up_cap = (c.max_scale_up_rate * ready).ceil();
        let down_cap = (ready / c.max_scale_down_rate).floor();
        let want_stable = (stable / per_pod).ceil().clamp(down_cap, up_cap) as u32;
        let want_panic = (panic / per_pod).ceil().clamp(down_cap, up_cap) as u32;
        let over = panic / ready / per_pod >= c.panic_threshold;
        if over {
            self.panic_since = Some(input.now_s);
        } else if self.panic_since.is_some_and(|t| input.now_s > t + c.stable_s) {
            self.panic_since = None;
            self.max_panic = 0;
        }
        let (raw, why) = if self.panic_since.is_some() {
            self.max_panic = self.max_panic.max(want_panic).max(input.current);
            (
                self.max_panic,
                format!(
                    "panic: concurrency {panic:.1} over {c_s:.0} s, target {} per pod",
                    c.target,
                    c_s = c.panic_s
                ),
            )
        } else {
            (
                want_stable,
                format!("concurrency {stable:.1} over {:.0} s, target {} per pod", c.stable_s, c.target),
            )
        };
        let to = if input.current == 0 && stable == 0.0 { 0 } else { raw };
        let to = self.bounds.clamp(to);
        Decision {
            at_s: input.now_s,
            from: input.current,
            to,
            reason: super::hpa::explain(input.current, raw, to, &why),
        }
    }
}

/// Ray Serve's settings (`AutoscalingConfig` defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RayServeConfig {
    /// `target_ongoing_requests` per replica (2).
    pub target: f64,
    /// `upscale_delay_s` (30).
    pub upscale_delay_s: f64,
    /// `downscale_delay_s` (600).
    pub downscale_delay_s: f64,
    /// `look_back_period_s` (30).
    pub look_back_s: f64,
}

impl RayServeConfig {
    /// Ray Serve's defaults with a target.
    pub fn with_target(target: f64) -> Self {
        Self { target, upscale_delay_s: 30.0, downscale_delay_s: 600.0, look_back_s: 30.0 }
    }
}

/// Ray Serve's policy with its delay counter (seconds wanted up, or down when negative).
#[derive(Debug, Clone)]
pub struct RayServe {
    config: RayServeConfig,
    bounds: Bounds,
    wanted_s: f64,
    last_s: Option<f64>,
}

impl RayServe {
    /// A Ray Serve policy for a replica range.
    pub fn new(config: RayServeConfig, bounds: Bounds) -> Self {
        Self { config, bounds, wanted_s: 0.0, last_s: None }
    }

    /// One control-loop step.
    pub fn decide(&mut self, input: &Input<'_>) -> Decision {
        let c = self.config;
        let dt = self.last_s.map_or(0.0, |t| (input.now_s - t).max(0.0));
        self.last_s = Some(input.now_s);
        let ongoing = input.mean(c.look_back_s, |s| Some(s.concurrency())).unwrap_or(0.0);
        let raw = self.bounds.clamp((ongoing / c.target).ceil() as u32);
        let why = format!("ongoing requests {ongoing:.1}, target {} per replica", c.target);
        let now_ongoing = input.window.last().map_or(0.0, |s| s.concurrency());
        let to = if input.current == 0 && now_ongoing > 0.0 {
            self.wanted_s = 0.0;
            self.bounds.clamp(raw.max(1))
        } else if raw > input.current {
            self.wanted_s = self.wanted_s.max(0.0) + dt;
            self.fire(self.wanted_s >= c.upscale_delay_s, raw, input.current)
        } else if raw < input.current {
            self.wanted_s = self.wanted_s.min(0.0) - dt;
            self.fire(-self.wanted_s >= c.downscale_delay_s, raw, input.current)
        } else {
            self.wanted_s = 0.0;
            input.current
        };
        Decision {
            at_s: input.now_s,
            from: input.current,
            to,
            reason: super::hpa::explain(input.current, raw, to, &why),
        }
    }

    fn fire(&mut self, due: bool, raw: u32, current: u32) -> u32 {
        if due {
            self.wanted_s = 0.0;
            raw
        } else {
            current
        }
    }
}

/// A constant replica count.
#[derive(Debug, Clone, Copy)]
pub struct Fixed {
    /// The count.
    pub count: u32,
}

impl Fixed {
    /// Always `count`.
    pub fn decide(&mut self, input: &Input<'_>) -> Decision {
        Decision {
            at_s: input.now_s,
            from: input.current,
            to: self.count,
            reason: format!("fixed at {}", self.count),
        }
    }
}
