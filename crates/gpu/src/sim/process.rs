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
    /// Waits on its input for the first `share` of each period (0 %, reading and decoding), then
    /// computes at 95 % for the rest: a job whose data pipeline cannot keep up. Its input side
    /// is reported by [`UtilProfile::input_at`].
    InputStall {
        /// Share of each period spent waiting, 0–1.
        share: f64,
        /// Length of one cycle, seconds.
        period_s: f64,
    },
}

/// Read rate a simulated job reports while it waits on its input, bytes per second.
pub const SIM_STALL_READ_BYTES_PER_S: f64 = 400.0 * 1024.0 * 1024.0;

/// Length of one [`UtilProfile::InputStall`] cycle that `input_stall:SHARE` asks for, seconds.
pub const SIM_STALL_PERIOD_S: f64 = 10.0;

/// The job environment variable that picks a job's profile on a simulated fleet (`idle`,
/// `idle:SECONDS`, `steady`, `bursty`, `input_stall:SHARE`); NVML ignores it.
pub const SIM_PROFILE_VAR: &str = "GANTRY_SIM_PROFILE";

impl UtilProfile {
    /// The profile a job's environment asks for with [`SIM_PROFILE_VAR`]: `idle` (0 %),
    /// `idle:SECONDS` (0 % for that long, then 90 %), `bursty` (95 % for 10 s, then 0 % for
    /// 10 s), `input_stall:SHARE` (waits on its input for that share of every 10 s, e.g. `0.4`,
    /// then computes at 95 %), else `steady` (90 %).
    pub fn for_job(env: &std::collections::BTreeMap<String, String>) -> Self {
        let value = env.get(SIM_PROFILE_VAR).map(String::as_str);
        if let Some(seconds) = value.and_then(|v| v.strip_prefix("idle:")?.parse::<f64>().ok()) {
            return UtilProfile::IdleFor { seconds: seconds.max(0.0) };
        }
        if let Some(share) = value.and_then(|v| v.strip_prefix("input_stall:")?.parse::<f64>().ok())
            && share.is_finite()
        {
            return UtilProfile::InputStall { share: share.clamp(0.0, 1.0), period_s: SIM_STALL_PERIOD_S };
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
            UtilProfile::InputStall { .. } => {
                if self.waiting_at(elapsed) {
                    0.0
                } else {
                    95.0
                }
            }
        };
        p.clamp(0.0, 100.0)
    }

    /// Whether an [`UtilProfile::InputStall`] process waits on its input `elapsed` after its start.
    fn waiting_at(&self, elapsed: Duration) -> bool {
        match *self {
            UtilProfile::InputStall { share, period_s } if period_s > 0.0 => {
                (elapsed.as_secs_f64() / period_s).fract() < share
            }
            UtilProfile::InputStall { share, .. } => share >= 1.0,
            _ => false,
        }
    }

    /// What the process feeds its GPU with `elapsed` after its start, for a profile that models
    /// it (only [`UtilProfile::InputStall`]: reading at [`SIM_STALL_READ_BYTES_PER_S`] with 30 %
    /// of its CPU while it waits, 2 MiB/s and 20 % while it computes); `None`: the job's cgroup
    /// says.
    pub fn input_at(&self, elapsed: Duration) -> Option<crate::stall::InputActivity> {
        let UtilProfile::InputStall { .. } = self else { return None };
        let (read_bytes_per_s, cpu_busy) = if self.waiting_at(elapsed) {
            (SIM_STALL_READ_BYTES_PER_S, 0.3)
        } else {
            (2.0 * 1024.0 * 1024.0, 0.2)
        };
        Some(crate::stall::InputActivity { read_bytes_per_s, cpu_busy })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stall::{StallConfig, judge};

    #[test]
    fn input_stall_waits_its_share_of_each_period_and_reads_meanwhile() {
        let env = [(SIM_PROFILE_VAR.to_owned(), "input_stall:0.4".to_owned())].into();
        let p = UtilProfile::for_job(&env);
        assert_eq!(p, UtilProfile::InputStall { share: 0.4, period_s: 10.0 });
        let cfg = StallConfig::default();
        // A second in every tenth: 4 of the 10 samples of a period wait, and lose all of it.
        let lost: f64 = (0..100)
            .map(|t| {
                let at = Duration::from_millis(t * 1000 + 500);
                judge(&cfg, p.percent_at(at) / 100.0, p.input_at(at).expect("modelled")).lost
            })
            .sum();
        assert!((lost / 100.0 - 0.4).abs() < 1e-9, "{lost}");
        assert_eq!(UtilProfile::Steady { percent: 90.0 }.input_at(Duration::ZERO), None);
        let bad = [(SIM_PROFILE_VAR.to_owned(), "input_stall:x".to_owned())].into();
        assert_eq!(UtilProfile::for_job(&bad), UtilProfile::Steady { percent: 90.0 });
    }
}
