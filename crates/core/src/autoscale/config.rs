//! The `autoscale:` block of a service file, as plain data.
//!
//! Field names are the service file's (issue 19): `sync_s`, `tolerance`, `metrics` and
//! `behavior.scale_up` / `behavior.scale_down` with `stabilization_window_s`, `select_policy` and
//! `policies` of `type: pods | percent`, `value`, `period_s`. Unknown fields are rejected, so a
//! typo is an error rather than a silently ignored setting. [`AutoscaleConfig::validate`] turns
//! the raw block into checked values with Kubernetes' defaults filled in ([`Behavior::resolved`]).

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The `autoscale:` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoscaleConfig {
    /// Seconds between two decisions (HPA's `--horizontal-pod-autoscaler-sync-period`), 1..=600.
    #[serde(default = "default_sync_s")]
    pub sync_s: f64,
    /// Relative band around 1.0 inside which a usage ratio changes nothing.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    /// The metrics; the largest recommendation across them wins (`policy: gantry` may have none:
    /// its sizing on the arrivals decides alone).
    #[serde(default)]
    pub metrics: Vec<MetricSpec>,
    /// How fast the count may move up and down.
    #[serde(default)]
    pub behavior: Behavior,
    /// Which policy reads the block.
    #[serde(default, skip_serializing_if = "Policy::is_hpa")]
    pub policy: Policy,
    /// `policy: gantry`: the time-to-first-token objective in seconds (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_ttft_s: Option<f64>,
    /// `policy: gantry`: seconds from a scale-up to a ready replica (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start_s: Option<f64>,
    /// `policy: gantry`: requests per second one busy replica serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_rps: Option<f64>,
}

/// `policy:` of an `autoscale:` block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Kubernetes' HPA on the metrics, exactly as documented there.
    #[default]
    Hpa,
    /// Gantry's policy: HPA's fields plus a sizing on the arrivals, a panic mode and a
    /// scale-down window tied to the cold start.
    Gantry,
}

impl Policy {
    fn is_hpa(&self) -> bool {
        *self == Self::Hpa
    }
}

/// The TTFT objective `policy: gantry` sizes for when the block names none.
pub const DEFAULT_SLO_TTFT_S: f64 = 2.0;
/// The cold start `policy: gantry` assumes when the block names none.
pub const DEFAULT_COLD_START_S: f64 = 60.0;

fn default_sync_s() -> f64 {
    15.0
}

fn default_tolerance() -> f64 {
    0.1
}

/// One metric with its target value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricSpec {
    /// Which signal.
    #[serde(rename = "type")]
    pub kind: MetricKind,
    /// The target: per replica for counts and rates, the value itself for latencies and ratios.
    pub target: f64,
    /// For `prometheus`: the series name scraped from each replica's `/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<String>,
}

/// The signals an autoscaler may follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricKind {
    /// Requests sent to replicas and not yet answered, per replica.
    InFlight,
    /// Requests per second, per replica.
    Rps,
    /// Requests waiting in the gateway's queue, per replica.
    QueueLength,
    /// 95th percentile time to first byte/token in seconds (above target scales up).
    TtftP95,
    /// Mean GPU utilisation of the replicas, 0..=1.
    GpuUtilization,
    /// Mean SM activity of the replicas, 0..=1.
    SmActive,
    /// A series scraped from the replicas, summed over them, per replica.
    Prometheus,
}

impl MetricKind {
    /// The name in the service file and in decision reasons.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InFlight => "in_flight",
            Self::Rps => "rps",
            Self::QueueLength => "queue_length",
            Self::TtftP95 => "ttft_p95",
            Self::GpuUtilization => "gpu_utilization",
            Self::SmActive => "sm_active",
            Self::Prometheus => "prometheus",
        }
    }

    /// Whether the observed value is a total over replicas (divided by the count before it is
    /// compared with a per-replica target) rather than a service-wide level.
    pub fn is_total(self) -> bool {
        matches!(self, Self::InFlight | Self::Rps | Self::QueueLength | Self::Prometheus)
    }
}

/// `behavior:` with both directions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Behavior {
    /// Rules for growing; default: no stabilization, 4 pods or 100 % per 15 s, the larger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up: Option<ScalingRules>,
    /// Rules for shrinking; default: 300 s stabilization, 100 % per 15 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down: Option<ScalingRules>,
}

/// `scale_up:` or `scale_down:`; absent fields take the direction's default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalingRules {
    /// Seconds of past recommendations the stabilizer considers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stabilization_window_s: Option<f64>,
    /// Which policy's limit applies when there are several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select_policy: Option<SelectPolicy>,
    /// Rate limits; absent means the direction's default policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<Vec<ScalingPolicy>>,
}

/// `select_policy:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectPolicy {
    /// The policy allowing the largest change.
    Max,
    /// The policy allowing the smallest change.
    Min,
    /// No change in this direction.
    Disabled,
}

/// One rate limit: at most `value` pods, or `value` percent, per `period_s`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalingPolicy {
    /// Pods or percent.
    #[serde(rename = "type")]
    pub kind: PolicyType,
    /// The amount per period.
    pub value: f64,
    /// The period in seconds.
    pub period_s: f64,
}

/// The unit of a [`ScalingPolicy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyType {
    /// A number of replicas.
    Pods,
    /// A percentage of the count at the start of the period.
    Percent,
}

/// Rules with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Stabilization window in seconds.
    pub window_s: f64,
    /// Policy selection.
    pub select: SelectPolicy,
    /// Rate limits (never empty unless `select` is `Disabled`).
    pub policies: Vec<ScalingPolicy>,
}

impl Behavior {
    /// Kubernetes' defaults where a field is absent: up (0 s, max of 4 pods / 100 % per 15 s),
    /// down (300 s, 100 % per 15 s).
    pub fn resolved(&self) -> (Resolved, Resolved) {
        let up = [
            ScalingPolicy { kind: PolicyType::Pods, value: 4.0, period_s: 15.0 },
            ScalingPolicy { kind: PolicyType::Percent, value: 100.0, period_s: 15.0 },
        ];
        let down = [ScalingPolicy { kind: PolicyType::Percent, value: 100.0, period_s: 15.0 }];
        (resolve(self.scale_up.as_ref(), 0.0, &up), resolve(self.scale_down.as_ref(), 300.0, &down))
    }
}

fn resolve(rules: Option<&ScalingRules>, window_s: f64, policies: &[ScalingPolicy]) -> Resolved {
    let rules = rules.cloned().unwrap_or_default();
    Resolved {
        window_s: rules.stabilization_window_s.unwrap_or(window_s),
        select: rules.select_policy.unwrap_or(SelectPolicy::Max),
        policies: rules.policies.unwrap_or_else(|| policies.to_vec()),
    }
}

/// Why an `autoscale:` block was refused.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// `sync_s` outside 1..=600 seconds.
    #[error("autoscale.sync_s must be between 1 and 600 seconds, got {0}")]
    Sync(f64),
    /// `tolerance` outside 0..1.
    #[error("autoscale.tolerance must be at least 0 and below 1, got {0}")]
    Tolerance(f64),
    /// No metric.
    #[error("autoscale.metrics needs at least one metric (policy: gantry may size on replica_rps alone)")]
    NoMetric,
    /// A target that is not a positive number.
    #[error("autoscale metric {0} needs a positive target, got {1}")]
    Target(&'static str, f64),
    /// A `prometheus` metric without its series, or a series on another type.
    #[error("autoscale metric {0}: `series` is required for prometheus and allowed only there")]
    Series(&'static str),
    /// A window or policy that is negative, zero where it must be positive, or not a number.
    #[error("autoscale.behavior.{0}: {1}")]
    Behavior(&'static str, String),
    /// A model field of `policy: gantry` that is not a positive number, or set under `hpa`.
    #[error("autoscale.{0}: {1}")]
    Model(&'static str, String),
}

impl AutoscaleConfig {
    /// Checks ranges and cross-field rules; returns the block unchanged when it is valid.
    pub fn validate(self) -> Result<Self, ConfigError> {
        if !(1.0..=600.0).contains(&self.sync_s) {
            return Err(ConfigError::Sync(self.sync_s));
        }
        if !(0.0..1.0).contains(&self.tolerance) {
            return Err(ConfigError::Tolerance(self.tolerance));
        }
        if self.metrics.is_empty() && self.policy == Policy::Hpa {
            return Err(ConfigError::NoMetric);
        }
        self.check_model()?;
        for m in &self.metrics {
            if !(m.target.is_finite() && m.target > 0.0) {
                return Err(ConfigError::Target(m.kind.as_str(), m.target));
            }
            if (m.kind == MetricKind::Prometheus) != m.series.is_some() {
                return Err(ConfigError::Series(m.kind.as_str()));
            }
        }
        let (up, down) = self.behavior.resolved();
        check_rules("scale_up", &up)?;
        check_rules("scale_down", &down)?;
        Ok(self)
    }
}

impl AutoscaleConfig {
    /// `replica_rps`, or the target of an `rps` metric.
    pub fn replica_rps(&self) -> Option<f64> {
        self.replica_rps.or_else(|| self.metrics.iter().find(|m| m.kind == MetricKind::Rps).map(|m| m.target))
    }

    fn check_model(&self) -> Result<(), ConfigError> {
        let fields = [
            ("slo_ttft_s", self.slo_ttft_s),
            ("cold_start_s", self.cold_start_s),
            ("replica_rps", self.replica_rps),
        ];
        for (name, value) in fields {
            let Some(v) = value else { continue };
            if self.policy == Policy::Hpa {
                return Err(ConfigError::Model(name, "is read only with policy: gantry".into()));
            }
            if !(v.is_finite() && v > 0.0) {
                return Err(ConfigError::Model(name, format!("must be a positive number, got {v}")));
            }
        }
        if self.cold_start_s.is_some_and(|c| c > 3600.0) {
            return Err(ConfigError::Model("cold_start_s", "must be at most 3600 s".into()));
        }
        if self.policy == Policy::Gantry && self.replica_rps().is_none() {
            return Err(ConfigError::Model(
                "replica_rps",
                "policy: gantry needs the requests per second one busy replica serves (replica_rps, or an rps metric's target)".into(),
            ));
        }
        Ok(())
    }
}

fn check_rules(direction: &'static str, r: &Resolved) -> Result<(), ConfigError> {
    if !(r.window_s.is_finite() && (0.0..=3600.0).contains(&r.window_s)) {
        return Err(ConfigError::Behavior(
            direction,
            format!("stabilization_window_s must be 0..=3600, got {}", r.window_s),
        ));
    }
    if r.select != SelectPolicy::Disabled && r.policies.is_empty() {
        return Err(ConfigError::Behavior(
            direction,
            "policies may be empty only with select_policy: disabled".into(),
        ));
    }
    for p in &r.policies {
        if !(p.value.is_finite()
            && p.value > 0.0
            && p.period_s.is_finite()
            && p.period_s > 0.0
            && p.period_s <= 1800.0)
        {
            return Err(ConfigError::Behavior(
                direction,
                format!(
                    "a policy needs value > 0 and period_s in (0, 1800], got {} per {} s",
                    p.value, p.period_s
                ),
            ));
        }
    }
    Ok(())
}
