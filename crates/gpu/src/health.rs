//! Per-GPU health: healthy → suspect → unhealthy → recovering → healthy.
//!
//! Unlike NVIDIA's device plugin, which marks a GPU unhealthy until restart, an unhealthy GPU
//! here is re-probed on a back-off and returns to healthy once a probe passes and no critical
//! event arrived for the quiet period. The machine is pure: events, probe results and `now` go
//! in, transitions (with a reason) come out. The caller runs the probes.

use crate::GpuEventKind;
use serde::Serialize;
use std::time::Duration;

/// XIDs caused by applications, not the GPU (NVIDIA device plugin's list): counted, not acted on.
pub const APPLICATION_XIDS: [u32; 6] = [13, 31, 43, 45, 68, 109];

/// Health of one GPU. The numbers are the `gantry_gpu_health_state` metric values, ordered by
/// severity so that `max()` across GPUs means "worst".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// Serving.
    Healthy = 0,
    /// A warning (corrected ECC error, a failed read) arrived; still serving.
    Suspect = 1,
    /// The last probe passed; waiting out the quiet period.
    Recovering = 2,
    /// A critical event arrived; not to be given work.
    Unhealthy = 3,
}

impl HealthState {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::Suspect => "suspect",
            HealthState::Recovering => "recovering",
            HealthState::Unhealthy => "unhealthy",
        }
    }
}

/// Tunables of the state machine.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthConfig {
    /// Time without critical events (unhealthy/recovering) or warnings (suspect) before healthy.
    pub quiet_period: Duration,
    /// Delay before the first probe of an unhealthy GPU.
    pub probe_backoff_initial: Duration,
    /// Longest delay between probes.
    pub probe_backoff_max: Duration,
    /// XIDs that are counted but do not make a GPU unhealthy.
    pub application_xids: Vec<u32>,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            quiet_period: Duration::from_secs(300),
            probe_backoff_initial: Duration::from_secs(10),
            probe_backoff_max: Duration::from_secs(600),
            application_xids: APPLICATION_XIDS.to_vec(),
        }
    }
}

/// Something the health machine reacts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// An event from the backend.
    Event(GpuEventKind),
    /// A read of the GPU failed with something other than "lost".
    ReadFailed,
}

/// How bad a signal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Severity {
    Ignored,
    Warning,
    Critical,
}

/// A change of state, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transition {
    /// GPU index.
    pub gpu: u32,
    /// State before.
    pub from: HealthState,
    /// State after.
    pub to: HealthState,
    /// Why, in words.
    pub reason: String,
    /// When (caller's clock).
    #[serde(serialize_with = "crate::serde_secs")]
    pub at: Duration,
}

/// The state machine of one GPU.
#[derive(Debug, Clone)]
pub struct GpuHealth {
    gpu: u32,
    state: HealthState,
    last_bad: Duration,
    next_probe: Duration,
    backoff: Duration,
}

impl GpuHealth {
    /// A healthy GPU.
    pub fn new(gpu: u32) -> Self {
        Self {
            gpu,
            state: HealthState::Healthy,
            last_bad: Duration::ZERO,
            next_probe: Duration::ZERO,
            backoff: Duration::ZERO,
        }
    }

    /// Current state.
    pub fn state(&self) -> HealthState {
        self.state
    }

    fn severity(cfg: &HealthConfig, s: Signal) -> Severity {
        match s {
            Signal::Event(GpuEventKind::Xid(n)) if cfg.application_xids.contains(&n) => Severity::Ignored,
            Signal::Event(GpuEventKind::SingleBitEcc) | Signal::ReadFailed => Severity::Warning,
            Signal::Event(_) => Severity::Critical,
        }
    }

    fn go(&mut self, to: HealthState, reason: String, at: Duration) -> Option<Transition> {
        let from = std::mem::replace(&mut self.state, to);
        (from != to).then_some(Transition { gpu: self.gpu, from, to, reason, at })
    }

    /// Feeds one signal.
    pub fn on_signal(&mut self, cfg: &HealthConfig, s: Signal, now: Duration) -> Option<Transition> {
        match Self::severity(cfg, s) {
            Severity::Ignored => None,
            Severity::Warning if self.state == HealthState::Healthy || self.state == HealthState::Suspect => {
                self.last_bad = now;
                self.go(HealthState::Suspect, describe(s), now)
            }
            Severity::Warning => None,
            Severity::Critical => {
                self.last_bad = now;
                self.backoff = match self.state {
                    HealthState::Unhealthy | HealthState::Recovering => {
                        (self.backoff * 2).clamp(cfg.probe_backoff_initial, cfg.probe_backoff_max)
                    }
                    _ => cfg.probe_backoff_initial,
                };
                self.next_probe = now + self.backoff;
                self.go(HealthState::Unhealthy, describe(s), now)
            }
        }
    }

    /// Whether the caller should probe now.
    pub fn probe_due(&self, now: Duration) -> bool {
        self.state == HealthState::Unhealthy && now >= self.next_probe
    }

    /// Feeds a probe result (only acted on when unhealthy).
    pub fn on_probe(&mut self, cfg: &HealthConfig, passed: bool, now: Duration) -> Option<Transition> {
        if self.state != HealthState::Unhealthy {
            return None;
        }
        if passed {
            return self.go(HealthState::Recovering, "probe passed".to_owned(), now);
        }
        self.backoff = (self.backoff * 2).clamp(cfg.probe_backoff_initial, cfg.probe_backoff_max);
        self.next_probe = now + self.backoff;
        None
    }

    /// Lets time pass: suspect and recovering GPUs become healthy after a quiet period.
    pub fn on_tick(&mut self, cfg: &HealthConfig, now: Duration) -> Option<Transition> {
        let quiet = now.saturating_sub(self.last_bad) >= cfg.quiet_period;
        match self.state {
            HealthState::Suspect | HealthState::Recovering if quiet => {
                let reason = format!("quiet for {}s", cfg.quiet_period.as_secs_f64());
                self.go(HealthState::Healthy, reason, now)
            }
            _ => None,
        }
    }
}

fn describe(s: Signal) -> String {
    match s {
        Signal::Event(GpuEventKind::Xid(n)) => format!("xid {n}"),
        Signal::Event(GpuEventKind::SingleBitEcc) => "single-bit ECC error".to_owned(),
        Signal::Event(GpuEventKind::DoubleBitEcc) => "double-bit ECC error".to_owned(),
        Signal::Event(GpuEventKind::RowRemapFailure) => "row remap failure".to_owned(),
        Signal::Event(GpuEventKind::Lost) => "GPU lost".to_owned(),
        Signal::ReadFailed => "read failed".to_owned(),
    }
}
