//! Services: long-running replicas behind the gateway, declared in a file.
//!
//! A service file (`gantry service apply -f svc.yaml`) is a replica template (command, GPUs or a
//! GPU-memory slice, CPU, memory, environment, labels), a `port`, a readiness probe, a replica
//! range `MIN..MAX` (or one number), a per-replica `max_concurrency`, `scale_to_zero_after` and
//! an `autoscale` block. The block is carried here as JSON and read by the server with the
//! core's `AutoscaleConfig` (this crate depends on no other Gantry crate), so a field the block
//! does not know is refused there with the core's sentence.
//!
//! The file travels as it is, as JSON ([`ServiceSpec`]); the server checks it
//! ([`ServiceSpec::check`] here for what needs no cluster, the rest there) and keeps it, with
//! its digest, as the service's current generation. [`ServiceView`] is what `gantry service get`
//! shows.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `replicas: 1..4` (both ends included), `replicas: 0..4` (scale to zero) or `replicas: 2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaRange {
    /// Fewest replicas (0: the service may scale to zero).
    pub min: u32,
    /// Most replicas.
    pub max: u32,
}

/// Most replicas one service may have.
pub const MAX_REPLICAS: u32 = 256;

impl ReplicaRange {
    /// Parses `N` or `MIN..MAX`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let number = |s: &str| {
            s.trim().parse::<u32>().map_err(|_| {
                format!(
                    "replicas: `{text}` is not a replica count: give a number (2) or a range MIN..MAX (1..4)"
                )
            })
        };
        let range = match t.split_once("..") {
            None => {
                let n = number(t)?;
                Self { min: n, max: n }
            }
            Some((lo, hi)) => Self { min: number(lo)?, max: number(hi.strip_prefix('=').unwrap_or(hi))? },
        };
        range.check().map(|()| range)
    }

    /// At least one replica at most, the minimum no larger than the maximum, at most
    /// [`MAX_REPLICAS`].
    pub fn check(&self) -> Result<(), String> {
        if self.max == 0 {
            return Err("replicas: a service needs at least 1 replica at most (e.g. 0..2 or 1)".into());
        }
        if self.min > self.max {
            return Err(format!(
                "replicas: the range {}..{} is empty: the minimum must not exceed the maximum",
                self.min, self.max
            ));
        }
        if self.max > MAX_REPLICAS {
            return Err(format!("replicas: at most {MAX_REPLICAS} replicas, got {}", self.max));
        }
        Ok(())
    }
}

impl Default for ReplicaRange {
    fn default() -> Self {
        Self { min: 1, max: 1 }
    }
}

impl fmt::Display for ReplicaRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max { write!(f, "{}", self.min) } else { write!(f, "{}..{}", self.min, self.max) }
    }
}

impl Serialize for ReplicaRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.min == self.max { s.serialize_u32(self.min) } else { s.serialize_str(&self.to_string()) }
    }
}

impl<'de> Deserialize<'de> for ReplicaRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Count(u32),
            Text(String),
        }
        let range = match Raw::deserialize(d)? {
            Raw::Count(n) => Self { min: n, max: n },
            Raw::Text(t) => return Self::parse(&t).map_err(serde::de::Error::custom),
        };
        range.check().map(|()| range).map_err(serde::de::Error::custom)
    }
}

/// The readiness probe: `GET path` on the replica's port every `interval_s`; a replica is ready
/// after one answer in 200..400 within `timeout_s`, and unready after `failure_threshold`
/// failures in a row. A replica that was ready and then fails `failure_threshold` probes in a
/// row is restarted (liveness).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Readiness {
    /// The path probed (`/health`).
    #[serde(default = "default_path")]
    pub path: String,
    /// Seconds between probes.
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// Seconds a probe may take.
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    /// Seconds after the replica starts before the first probe.
    #[serde(default)]
    pub initial_delay_s: f64,
    /// Failures in a row that make a replica unready (and restart one that was ready).
    #[serde(default = "default_threshold")]
    pub failure_threshold: u32,
}

fn default_path() -> String {
    "/".into()
}
fn default_interval() -> f64 {
    2.0
}
fn default_timeout() -> f64 {
    1.0
}
fn default_threshold() -> u32 {
    3
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            path: default_path(),
            interval_s: default_interval(),
            timeout_s: default_timeout(),
            initial_delay_s: 0.0,
            failure_threshold: default_threshold(),
        }
    }
}

impl Readiness {
    /// Ranges: interval 0.1..=300 s, timeout 0.1..=60 s, initial delay 0..=3600 s, threshold
    /// 1..=100, a path that starts with `/`.
    pub fn check(&self) -> Result<(), String> {
        if !self.path.starts_with('/') || self.path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("readiness.path: `{}` must start with / and hold no spaces", self.path));
        }
        let within = |v: f64, lo: f64, hi: f64| v.is_finite() && (lo..=hi).contains(&v);
        if !within(self.interval_s, 0.1, 300.0) {
            return Err(format!("readiness.interval_s: must be 0.1 to 300 seconds, got {}", self.interval_s));
        }
        if !within(self.timeout_s, 0.1, 60.0) {
            return Err(format!("readiness.timeout_s: must be 0.1 to 60 seconds, got {}", self.timeout_s));
        }
        if !within(self.initial_delay_s, 0.0, 3600.0) {
            return Err(format!(
                "readiness.initial_delay_s: must be 0 to 3600 seconds, got {}",
                self.initial_delay_s
            ));
        }
        if !(1..=100).contains(&self.failure_threshold) {
            return Err(format!(
                "readiness.failure_threshold: must be 1 to 100, got {}",
                self.failure_threshold
            ));
        }
        Ok(())
    }
}

/// A service file, and the body of `POST /v1/services` (as JSON). Sizes: `gpu_memory` and
/// `memory` in MiB, `cpu` in cores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// The service's name: its identity in its team and its gateway path `/<team>/<name>/`.
    pub name: String,
    /// The owning team (default: the caller's only team).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// `MIN..MAX` or a number.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "1..4"))]
    pub replicas: ReplicaRange,
    /// Whole GPUs per replica.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpus: u32,
    /// A slice of one GPU per replica, MiB (instead of `gpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory: Option<u64>,
    /// CPU cores per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    /// Host memory per replica, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// The port the service speaks HTTP on. Gantry gives each replica a port of its own in
    /// `$PORT` (replicas may share a node); the replica listens there.
    pub port: u16,
    /// argv of a replica (a `script:` in the file is resolved by the CLI into this).
    pub command: Vec<String>,
    /// Environment of each replica (`PORT` is Gantry's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Labels of each replica job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Priority of each replica job.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    /// The readiness (and liveness) probe; default `GET /` every 2 s.
    #[serde(default)]
    pub readiness: Readiness,
    /// Requests one replica may have in flight at once (none: no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// With `replicas: 0..N`, how long without a request before the last replica stops
    /// (`15m`, `90s`, or seconds; default 15 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "15m"))]
    pub scale_to_zero_after: Option<Duration>,
    /// How long the gateway holds a request while a replica starts for it (scale from zero)
    /// before it answers 503 (`10m`, `90s`, or seconds; default 10 minutes, at most 1 hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "10m"))]
    pub cold_start_timeout: Option<Duration>,
    /// The autoscaler (HPA's fields, and `policy: gantry` with `replica_rps`, `slo_ttft_s` and
    /// `cold_start_s`; see `gantry_core::autoscale::AutoscaleConfig`); none: the count stays at
    /// the minimum (or at the number given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub autoscale: Option<serde_json::Value>,
    /// Anyone may call it through the gateway without a token.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub public: bool,
    /// During a rolling update, how many replicas above the count may run (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<u32>,
    /// During a rolling update, how many of the count may be unready (default 0: a new replica
    /// is ready before an old one leaves). Not both 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<u32>,
    /// Seconds a generation may take to be all ready before its rollout is reported stuck
    /// (default 600); the older generation keeps serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_s: Option<u64>,
    /// Seconds a retired replica (rolled, scaled down or to zero) may take to answer its
    /// in-flight requests and streams, out of the gateway's table, before it is stopped
    /// (default 30, at most 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout_s: Option<u64>,
    /// The directory beside the service file, uploaded as `gantry submit` uploads its working
    /// directory (`service apply` sends it unless the file says `upload: false`): each replica
    /// starts in a private copy of it, so `command: [python3, server.py]` finds `server.py`. The
    /// server checks the team holds it; an unchanged directory has the same digest, so applying
    /// the file again is no new generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<crate::upload::Upload>,
    /// The container image each replica runs in (as a job's `--image`); a new image is a new
    /// generation, rolled out as any change is. With an image the command may be left out: the
    /// image's entrypoint and command serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The team secret the image's registry is logged in to with (`username`, `password`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_secret: Option<String>,
    /// Volumes of the team each replica mounts (`NAME:/PATH[:ro]`, see `gantry volumes`); a
    /// node-local one holds the replicas to its node.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::volumes::text_or_objects"
    )]
    pub volumes: Vec<crate::volumes::VolumeMount>,
}

/// Default of `progress_deadline_s`: 10 minutes.
pub const DEFAULT_PROGRESS_DEADLINE_S: u32 = 600;

fn is_zero(n: &u32) -> bool {
    *n == 0
}
fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

/// Default of `scale_to_zero_after`: 15 minutes.
pub const DEFAULT_SCALE_TO_ZERO_AFTER_S: u64 = 900;

/// Default of `cold_start_timeout`: 10 minutes.
pub const DEFAULT_COLD_START_TIMEOUT_S: u64 = 600;

/// The longest `cold_start_timeout`: 1 hour (a client's own timeout is shorter anyway).
pub const MAX_COLD_START_TIMEOUT_S: u64 = 3600;

impl ServiceSpec {
    /// What needs no cluster to check: the name, the range, GPUs or a slice (not both), the
    /// port, a command, the probe, the concurrency cap, the environment's `PORT`.
    pub fn check(&self) -> Result<(), String> {
        let first = self.name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
        let rest = self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
        if !first || !rest || self.name.len() > 63 {
            return Err(format!(
                "name: `{}` must be 1 to 63 letters, digits, '-', '_' or '.', starting with a letter or digit (it is a path of the gateway)",
                self.name
            ));
        }
        crate::workflow::check_labels(&self.labels)?;
        crate::volumes::check_mounts(&self.volumes)?;
        self.replicas.check()?;
        if self.gpus > 0 && self.gpu_memory.is_some() {
            return Err("gpus and gpu_memory: ask for whole GPUs or a slice of one, not both".into());
        }
        if self.gpu_memory == Some(0) {
            return Err("gpu_memory: a slice needs some memory (MiB), e.g. 20000".into());
        }
        if self.port == 0 {
            return Err("port: must be 1 to 65535".into());
        }
        let no_command = self.command.is_empty() || self.command[0].is_empty();
        if no_command && self.image.is_none() {
            return Err(
                "command: a service needs a command (or a script, or an image) that serves HTTP on $PORT"
                    .into(),
            );
        }
        if self.registry_secret.is_some() && self.image.is_none() {
            return Err("registry_secret: names the login of an image's registry; give an image".into());
        }
        if self.env.contains_key("PORT") {
            return Err("env: PORT is set by Gantry for each replica; do not set it".into());
        }
        if self.max_concurrency == Some(0) {
            return Err("max_concurrency: must be at least 1 (leave it out for no cap)".into());
        }
        if let Some(Duration(s)) = self.cold_start_timeout
            && !(1..=MAX_COLD_START_TIMEOUT_S).contains(&s)
        {
            return Err(format!(
                "cold_start_timeout: must be 1 s to 1 h (how long a request is held while a replica starts), got {s} s"
            ));
        }
        if let Some(cpu) = self.cpu
            && !(cpu.is_finite() && cpu > 0.0)
        {
            return Err(format!("cpu: must be a positive number of cores, got {cpu}"));
        }
        if self.max_surge == Some(0) && self.max_unavailable == Some(0) {
            return Err(
                "max_surge and max_unavailable: not both 0, or a rolling update could neither add nor remove a replica"
                    .into(),
            );
        }
        if self.max_surge.is_some_and(|n| n > 256) || self.max_unavailable.is_some_and(|n| n > 256) {
            return Err("max_surge and max_unavailable: at most 256".into());
        }
        if let Some(s) = self.progress_deadline_s
            && !(1..=86_400).contains(&s)
        {
            return Err(format!("progress_deadline_s: must be 1 to 86400 seconds, got {s}"));
        }
        if let Some(s) = self.drain_timeout_s
            && !(1..=3_600).contains(&s)
        {
            return Err(format!("drain_timeout_s: must be 1 to 3600 seconds, got {s}"));
        }
        self.readiness.check()
    }

    /// The rolling update's bounds: (`max_surge`, `max_unavailable`), defaults 1 and 0.
    pub fn rollout_bounds(&self) -> (u32, u32) {
        match (self.max_surge, self.max_unavailable) {
            (None, None) => (1, 0),
            (Some(s), None) => (s, u32::from(s == 0)),
            (None, Some(u)) => (u32::from(u == 0), u),
            (Some(s), Some(u)) => (s, u),
        }
    }

    /// Milliseconds a retired replica may drain (`drain_timeout_s`, default 30 s).
    pub fn drain_timeout_ms(&self) -> i64 {
        i64::try_from(self.drain_timeout_s.unwrap_or(30)).unwrap_or(3_600) * 1000
    }

    /// Seconds a generation may take to be all ready (`progress_deadline_s`).
    pub fn progress_deadline_s(&self) -> u64 {
        self.progress_deadline_s.unwrap_or(u64::from(DEFAULT_PROGRESS_DEADLINE_S))
    }

    /// Seconds the gateway holds a request for a cold start before 503.
    pub fn cold_start_timeout_s(&self) -> u64 {
        self.cold_start_timeout.map_or(DEFAULT_COLD_START_TIMEOUT_S, |d| d.0)
    }

    /// Seconds without a request before a `0..N` service stops its last replica.
    pub fn scale_to_zero_after_s(&self) -> u64 {
        self.scale_to_zero_after.map_or(DEFAULT_SCALE_TO_ZERO_AFTER_S, |d| d.0)
    }
}

/// A duration written `15m`, `90s`, `2h`, `1d` or as seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Duration(pub u64);

impl Duration {
    /// Parses `N`, `Ns`, `Nm`, `Nh` or `Nd`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
            Some((i, _)) => t.split_at(i),
            None => (t, "s"),
        };
        let n: u64 = digits.parse().map_err(|_| format!("`{text}` is not a duration (15m, 90s, 2h)"))?;
        let scale = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(format!("`{text}` is not a duration: the unit must be s, m, h or d")),
        };
        Ok(Self(n.saturating_mul(scale)))
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}s", self.0))
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Seconds(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Seconds(n) => Ok(Self(n)),
            Raw::Text(t) => Self::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// What applying a service file did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServiceApplied {
    /// The service.
    pub name: String,
    /// Its team.
    pub team: String,
    /// `created`, `unchanged` (the same file again) or `configured` (a new generation: its
    /// replicas are replaced one at a time).
    pub action: String,
    /// The generation the file is now (1 for a new service).
    pub generation: u64,
}

/// One autoscaler (or controller) decision, as `gantry service get` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServiceDecision {
    /// ms since the epoch.
    pub at: i64,
    /// Replicas before.
    pub from: u32,
    /// Replicas decided.
    pub to: u32,
    /// Why, e.g. `scaled 2 → 4: in_flight 9.1 per replica over target 4`.
    pub reason: String,
}

/// Replica counts of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplicaCounts {
    /// What the controller keeps now (the autoscaler's last decision within `min..max`).
    pub desired: u32,
    /// Replicas passing their readiness probe.
    pub ready: u32,
    /// The range's minimum.
    pub min: u32,
    /// The range's maximum.
    pub max: u32,
}

/// One replica of a service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplicaView {
    /// Its job (`gantry logs JOB`).
    pub job: i64,
    /// The job's state.
    pub state: crate::model::JobState,
    /// The generation of the file it runs.
    pub generation: u64,
    /// Its node, once placed.
    pub node: Option<String>,
    /// Its GPUs, once placed.
    pub gpus: Vec<String>,
    /// Where the gateway reaches it (`ADDR:PORT`), once placed.
    pub address: Option<String>,
    /// Whether its readiness probe passes.
    pub ready: bool,
    /// Why it is not ready, or why it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The gateway's figures for a service over the last minute.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServiceTraffic {
    /// Requests per second.
    pub rps: f64,
    /// Requests at replicas now.
    pub in_flight: u64,
    /// Requests waiting in the gateway now.
    pub queue_length: u64,
    /// Latency percentiles, seconds.
    pub latency_p50_s: f64,
    /// Latency 95th percentile, seconds.
    pub latency_p95_s: f64,
    /// Time to first byte, median, seconds.
    pub ttfb_p50_s: f64,
    /// Time to first byte, 95th percentile, seconds.
    pub ttfb_p95_s: f64,
    /// Answers that were errors (5xx) in the window.
    pub errors: u64,
}

/// A service as `gantry service get` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServiceView {
    /// Name.
    pub name: String,
    /// Team.
    pub team: String,
    /// The gateway path that reaches it: `/<team>/<name>/`.
    pub endpoint: String,
    /// Public (no token needed).
    pub public: bool,
    /// The file's current generation (each changed apply adds one).
    pub generation: u64,
    /// Counts.
    pub replicas: ReplicaCounts,
    /// Why the count is not what was decided, when it is not (a quota, no room).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why its rolling update is stuck, when it is: `rollout stuck: generation 3 failed
    /// readiness 5 times: <the replica's reason and last line of output>` (the older generation
    /// keeps serving).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
    /// Each replica.
    pub replica_list: Vec<ReplicaView>,
    /// The gateway's figures.
    pub traffic: ServiceTraffic,
    /// The last decisions, newest first.
    pub decisions: Vec<ServiceDecision>,
    /// The file as applied.
    pub spec: ServiceSpec,
    /// When it was created, ms since the epoch.
    pub created_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_range_reads_as_a_number_or_min_dot_dot_max_and_refuses_empty_ranges() {
        assert_eq!(ReplicaRange::parse("1..4"), Ok(ReplicaRange { min: 1, max: 4 }));
        assert_eq!(ReplicaRange::parse("0..2"), Ok(ReplicaRange { min: 0, max: 2 }));
        assert_eq!(ReplicaRange::parse("3"), Ok(ReplicaRange { min: 3, max: 3 }));
        assert!(ReplicaRange::parse("4..1").expect_err("refused").contains("empty"));
        assert!(ReplicaRange::parse("0").expect_err("refused").contains("at least 1"));
        assert!(ReplicaRange::parse("x").expect_err("refused").contains("not a replica count"));
        let json: ReplicaRange = serde_json::from_str("\"1..8\"").expect("range");
        assert_eq!(json, ReplicaRange { min: 1, max: 8 });
        let json: ReplicaRange = serde_json::from_str("2").expect("count");
        assert_eq!(json, ReplicaRange { min: 2, max: 2 });
    }

    #[test]
    fn durations_read_with_units_or_as_seconds() {
        assert_eq!(Duration::parse("15m"), Ok(Duration(900)));
        assert_eq!(Duration::parse("90s"), Ok(Duration(90)));
        assert_eq!(Duration::parse("2h"), Ok(Duration(7200)));
        assert_eq!(Duration::parse("30"), Ok(Duration(30)));
        assert!(Duration::parse("5 weeks").is_err());
    }

    fn spec() -> ServiceSpec {
        serde_json::from_value(serde_json::json!({
            "name": "echo", "port": 8000, "command": ["python3", "server.py"]
        }))
        .expect("spec")
    }

    #[test]
    fn a_service_file_with_an_unknown_field_or_bad_values_is_refused_with_a_sentence() {
        let unknown = serde_json::from_value::<ServiceSpec>(serde_json::json!({
            "name": "echo", "port": 8000, "command": ["x"], "replica": 2
        }));
        assert!(unknown.expect_err("refused").to_string().contains("unknown field `replica`"));
        assert_eq!(spec().check(), Ok(()));
        let both = ServiceSpec { gpus: 1, gpu_memory: Some(1000), ..spec() };
        assert!(both.check().expect_err("refused").contains("not both"));
        let no_command = ServiceSpec { command: vec![], ..spec() };
        assert!(no_command.check().expect_err("refused").contains("command"));
        let port = ServiceSpec { env: [("PORT".into(), "1".into())].into(), ..spec() };
        assert!(port.check().expect_err("refused").contains("PORT is set by Gantry"));
        let probe =
            ServiceSpec { readiness: Readiness { path: "health".into(), ..Readiness::default() }, ..spec() };
        assert!(probe.check().expect_err("refused").contains("readiness.path"));
        let name = ServiceSpec { name: "a/b".into(), ..spec() };
        assert!(name.check().is_err());
    }

    #[test]
    fn a_rollout_needs_room_to_move_and_a_deadline_within_a_day() {
        assert_eq!(spec().rollout_bounds(), (1, 0), "a new replica ready before an old one leaves");
        let frozen = ServiceSpec { max_surge: Some(0), max_unavailable: Some(0), ..spec() };
        assert!(frozen.check().expect_err("refused").contains("not both 0"));
        let down = ServiceSpec { max_surge: Some(0), max_unavailable: Some(1), ..spec() };
        assert_eq!((down.check(), down.rollout_bounds()), (Ok(()), (0, 1)));
        assert_eq!(ServiceSpec { max_surge: Some(0), ..spec() }.rollout_bounds(), (0, 1));
        let late = ServiceSpec { progress_deadline_s: Some(0), ..spec() };
        assert!(late.check().expect_err("refused").contains("progress_deadline_s"));
        assert_eq!(spec().progress_deadline_s(), 600);
    }

    #[test]
    fn cold_start_timeout_defaults_to_ten_minutes_and_is_refused_outside_one_second_to_an_hour() {
        assert_eq!(spec().cold_start_timeout_s(), 600);
        let file: ServiceSpec = serde_json::from_value(serde_json::json!({
            "name": "echo", "port": 8000, "command": ["x"], "cold_start_timeout": "90s"
        }))
        .expect("spec");
        assert_eq!((file.check(), file.cold_start_timeout_s()), (Ok(()), 90));
        for bad in [0, 7200] {
            let s = ServiceSpec { cold_start_timeout: Some(Duration(bad)), ..spec() };
            assert!(
                s.check().expect_err("refused").contains("cold_start_timeout: must be 1 s to 1 h"),
                "{bad}"
            );
        }
    }
}
