//! Kubernetes' Horizontal Pod Autoscaler, step by step as its documentation describes it.
//!
//! 1. **Recommend** ([`recommend`]): for each metric, the usage ratio `value / target` (a total
//!    such as `in_flight` is first divided by the current count, so `value` is per replica);
//!    within `tolerance` of 1.0 the metric recommends the current count, otherwise
//!    `ceil(current × ratio)`. The largest recommendation across metrics wins. The metric value
//!    is the mean of the samples of the last sync period (metrics-server's window).
//! 2. **Stabilize** ([`History::stabilize`]): the recommendation is compared with those of the
//!    last `scale_up.stabilization_window_s` (the count rises at most to their minimum) and of
//!    the last `scale_down.stabilization_window_s` (it falls at most to their maximum).
//! 3. **Rate-limit** ([`History::limit`]): each policy allows, from the count at the start of its
//!    period (the current count minus the changes made within the period), `+value` pods or
//!    `×(1 + value/100)` up, `−value` pods or `×(1 − value/100)` down; `select_policy: max` takes
//!    the policy allowing the largest change, `min` the smallest, `disabled` forbids the direction.
//! 4. **Bound** to `min..=max`.
//!
//! Simplification, stated: Kubernetes recomputes the ratio counting not-yet-ready pods as idle
//! on a scale-up; dividing the total by the current count (ready or not) is that same rule.

use super::config::{AutoscaleConfig, PolicyType, Resolved, SelectPolicy};
use super::{Bounds, Decision, Input};

/// HPA with its history of recommendations and scale events.
#[derive(Debug, Clone)]
pub struct Hpa {
    config: AutoscaleConfig,
    bounds: Bounds,
    up: Resolved,
    down: Resolved,
    history: History,
}

impl Hpa {
    /// An HPA for a validated block and a replica range.
    pub fn new(config: AutoscaleConfig, bounds: Bounds) -> Self {
        let (up, down) = config.behavior.resolved();
        Self { config, bounds, up, down, history: History::default() }
    }

    /// The block it follows.
    pub fn config(&self) -> &AutoscaleConfig {
        &self.config
    }

    /// One sync: recommend, stabilize, rate-limit, bound.
    pub fn decide(&mut self, input: &Input<'_>) -> Decision {
        let (raw, why) = recommend(&self.config, input);
        let to = self.history.settle(input, raw, self.bounds, &self.up, &self.down);
        let reason = explain(input.current, raw, to, &why);
        Decision { at_s: input.now_s, from: input.current, to, reason }
    }
}

/// The sentence for a decision whose metric step recommended `raw` because of `why`.
pub(crate) fn explain(from: u32, raw: u32, to: u32, why: &str) -> String {
    if to == from {
        if raw == from {
            format!("steady at {from}: {why}")
        } else {
            format!("held at {from} (recommended {raw}): {why}")
        }
    } else if to == raw {
        format!("scaled {from} → {to}: {why}")
    } else {
        format!("scaled {from} → {to} (recommended {raw}, limited by behavior or bounds): {why}")
    }
}

/// Step 1: the recommendation before stabilization, and which metric made it.
pub fn recommend(config: &AutoscaleConfig, input: &Input<'_>) -> (u32, String) {
    let mut best: Option<(u32, String)> = None;
    for spec in &config.metrics {
        let Some(value) = input.mean(config.sync_s, |s| s.value(spec)) else { continue };
        let current = f64::from(input.current);
        let (per, ratio) = if spec.kind.is_total() {
            if input.current == 0 {
                let want = (value / spec.target).ceil().max(0.0) as u32;
                let why = format!(
                    "{} {value:.1} with no replica, target {} per replica",
                    spec.kind.as_str(),
                    spec.target
                );
                best = best.filter(|b| b.0 >= want).or(Some((want, why)));
                continue;
            }
            (value / current, value / current / spec.target)
        } else {
            (value, value / spec.target)
        };
        let (want, rel) = if (ratio - 1.0).abs() <= config.tolerance {
            (input.current, "within tolerance of")
        } else {
            ((current * ratio).ceil().max(0.0) as u32, if ratio > 1.0 { "over" } else { "under" })
        };
        let unit = if spec.kind.is_total() { " per replica" } else { "" };
        let name = match &spec.series {
            Some(series) => format!("{} {series}", spec.kind.as_str()),
            None => spec.kind.as_str().to_owned(),
        };
        let why = format!("{name} {per:.2}{unit} {rel} target {}", spec.target);
        if best.as_ref().is_none_or(|b| want > b.0) {
            best = Some((want, why));
        }
    }
    best.unwrap_or_else(|| (input.current, "no metric has data".to_string()))
}

/// Past recommendations and scale events, pruned to the longest window or period in use.
#[derive(Debug, Clone, Default)]
pub struct History {
    recommendations: Vec<(f64, u32)>,
    events: Vec<(f64, i64)>,
}

impl History {
    /// Steps 2–4 for a raw recommendation; records the recommendation and the change.
    pub fn settle(
        &mut self,
        input: &Input<'_>,
        raw: u32,
        bounds: Bounds,
        up: &Resolved,
        down: &Resolved,
    ) -> u32 {
        let now = input.now_s;
        let stabilized = self.stabilize(now, raw, input.current, up.window_s, down.window_s);
        let limited = self.limit(now, input.current, stabilized, bounds, up, down);
        let to = bounds.clamp(limited);
        self.record(now, raw, input.current, to, up, down);
        to
    }

    /// Step 2: the count moves towards `raw` no further than the windows' recommendations allow.
    pub fn stabilize(&self, now: f64, raw: u32, current: u32, up_window: f64, down_window: f64) -> u32 {
        let mut up_rec = raw;
        let mut down_rec = raw;
        for &(at, rec) in &self.recommendations {
            if at > now - up_window {
                up_rec = up_rec.min(rec);
            }
            if at > now - down_window {
                down_rec = down_rec.max(rec);
            }
        }
        current.max(up_rec).min(down_rec)
    }

    /// Step 3 and the upper/lower bound of step 4, as Kubernetes applies them together.
    pub fn limit(
        &self,
        now: f64,
        current: u32,
        desired: u32,
        bounds: Bounds,
        up: &Resolved,
        down: &Resolved,
    ) -> u32 {
        if desired > current {
            if up.select == SelectPolicy::Disabled {
                return current;
            }
            let allowed = self.up_limit(now, current, up).max(current).min(bounds.max);
            desired.min(allowed)
        } else if desired < current {
            if down.select == SelectPolicy::Disabled {
                return current;
            }
            let allowed = self.down_limit(now, current, down).min(current).max(bounds.min);
            desired.max(allowed)
        } else {
            desired
        }
    }

    fn changed_within(&self, now: f64, period: f64) -> (i64, i64) {
        let mut added = 0;
        let mut removed = 0;
        for &(at, delta) in &self.events {
            if at > now - period {
                if delta > 0 { added += delta } else { removed -= delta }
            }
        }
        (added, removed)
    }

    fn up_limit(&self, now: f64, current: u32, rules: &Resolved) -> u32 {
        let limits = rules.policies.iter().map(|p| {
            let (added, removed) = self.changed_within(now, p.period_s);
            let start = (i64::from(current) - added + removed).max(0) as f64;
            match p.kind {
                PolicyType::Pods => start + p.value,
                PolicyType::Percent => (start * (1.0 + p.value / 100.0)).ceil(),
            }
        });
        let pick = if rules.select == SelectPolicy::Min {
            limits.fold(f64::INFINITY, f64::min)
        } else {
            limits.fold(0.0, f64::max)
        };
        pick.min(f64::from(u32::MAX)) as u32
    }

    fn down_limit(&self, now: f64, current: u32, rules: &Resolved) -> u32 {
        let limits = rules.policies.iter().map(|p| {
            let (added, removed) = self.changed_within(now, p.period_s);
            let start = (i64::from(current) + removed - added).max(0) as f64;
            match p.kind {
                PolicyType::Pods => (start - p.value).max(0.0),
                PolicyType::Percent => (start * (1.0 - p.value / 100.0)).max(0.0).trunc(),
            }
        });
        let pick = if rules.select == SelectPolicy::Min {
            limits.fold(0.0, f64::max)
        } else {
            limits.fold(f64::INFINITY, f64::min)
        };
        pick.min(f64::from(u32::MAX)) as u32
    }

    fn record(&mut self, now: f64, raw: u32, from: u32, to: u32, up: &Resolved, down: &Resolved) {
        self.recommendations.push((now, raw));
        if to != from {
            self.events.push((now, i64::from(to) - i64::from(from)));
        }
        let keep = up.window_s.max(down.window_s);
        self.recommendations.retain(|r| r.0 > now - keep);
        let period = up.policies.iter().chain(&down.policies).map(|p| p.period_s).fold(0.0, f64::max);
        self.events.retain(|e| e.0 > now - period);
    }
}
