//! Simulated processes: memory held and a utilisation profile over time.

use serde::Deserialize;
use std::time::Duration;

/// How busy a simulated process keeps its GPU over time.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum UtilProfile {
    /// Holds memory, runs nothing (an allocated but idle GPU).
    Idle,
    /// Idle for `seconds` after its start, then 90 % (an owner that comes back).
    IdleFor {
        /// How long it stays idle.
        seconds: f64,
    },
    /// Constant utilisation, percent.
    Steady {
        /// Percent, 0–100.
        percent: f64,
    },
    /// `high` for the first half of each period, `low` for the second: a job waiting on its input.
    Bursty {
        /// Percent while waiting.
        low: f64,
        /// Percent while computing.
        high: f64,
        /// Length of one cycle, seconds.
        period_s: f64,
    },
}

/// The job environment variable that picks a job's profile on a simulated fleet (`idle`,
/// `idle:SECONDS`, `steady`, `bursty`); NVML ignores it.
pub const SIM_PROFILE_VAR: &str = "GANTRY_SIM_PROFILE";

impl UtilProfile {
    /// The profile a job's environment asks for with [`SIM_PROFILE_VAR`]: `idle` (0 %),
    /// `idle:SECONDS` (0 % for that long, then 90 %), `bursty` (95 % for 10 s, then 0 % for
    /// 10 s), else `steady` (90 %).
    pub fn for_job(env: &std::collections::BTreeMap<String, String>) -> Self {
        let value = env.get(SIM_PROFILE_VAR).map(String::as_str);
        if let Some(seconds) = value.and_then(|v| v.strip_prefix("idle:")?.parse::<f64>().ok()) {
            return UtilProfile::IdleFor { seconds: seconds.max(0.0) };
        }
        match value {
            Some("idle") => UtilProfile::Idle,
            Some("bursty") => UtilProfile::Bursty { low: 0.0, high: 95.0, period_s: 20.0 },
            _ => UtilProfile::Steady { percent: 90.0 },
        }
    }

    /// Utilisation in percent `elapsed` after the process started.
    pub fn percent_at(&self, elapsed: Duration) -> f64 {
        let p = match *self {
            UtilProfile::Idle => 0.0,
            UtilProfile::IdleFor { seconds } => {
                if elapsed.as_secs_f64() < seconds {
                    0.0
                } else {
                    90.0
                }
            }
            UtilProfile::Steady { percent } => percent,
            UtilProfile::Bursty { low, high, period_s } => {
                if period_s <= 0.0 {
                    return high.clamp(0.0, 100.0);
                }
                let phase = (elapsed.as_secs_f64() / period_s).fract();
                if phase < 0.5 { high } else { low }
            }
        };
        p.clamp(0.0, 100.0)
    }
}

/// A process placed on a simulated GPU.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SimProcess {
    pub gpu: u32,
    pub job_id: Option<String>,
    pub memory_bytes: u64,
    pub profile: UtilProfile,
    pub started_at: Duration,
}
