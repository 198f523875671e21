//! Data stalls: how much of a running job's GPU time is lost waiting for its input.
//!
//! Pure: the agent collects the numbers (the job's GPU activity from the GPU layer, its read
//! throughput and CPU use from its cgroup), this module judges them, and the store adds the
//! verdicts up. Nothing here reads a clock or a file.
//!
//! # The rule
//!
//! One **sample** is one GPU of one running job over one heartbeat interval, with:
//!
//! - `activity` (0–1): how busy the job kept the GPU — GPM's SM-active where the GPU has GPM
//!   and the job is alone on it, else the job's own per-process SM utilisation (NVML's process
//!   samples; the simulated fleet's profile), else the GPU's utilisation when the job is alone
//!   on it. No reading: no sample.
//! - `read_bytes_per_s`: bytes the job's cgroup read from block devices (`io.stat` `rbytes`,
//!   every device) over the interval, per second.
//! - `cpu_busy` (0–1): CPU time the job's cgroup used over the interval (`cpu.stat`
//!   `usage_usec`) divided by the CPU it may use in that time (its `cpu.max` quota, else every
//!   CPU of the node).
//!
//! A sample is **stalled** when the GPU is under-used, `activity < active_below` (default
//! 0.5), *and* the job is busy feeding it: it reads at least `reading_at_least` bytes per second
//! (default 1 MiB/s) *or* its CPU is saturated, `cpu_busy >= cpu_saturated_at` (default 0.9:
//! decoding, augmenting). A GPU that is idle while the job neither reads nor computes is not
//! stalled on input (it is idle: `idle_allocated` is that finding); a GPU that is busy is not
//! stalled whatever the job reads.
//!
//! A stalled sample **loses** the idle part of its GPU time, `1 − activity` of the interval
//! (a GPU at 10 % while the job reads lost 90 % of that interval to its input); a sample that
//! is not stalled loses nothing. A job's **stalled share** is the GPU time lost over the GPU
//! time judged (samples only; time without one is not counted either way), and its **stalled
//! GPU-hours** are the lost time times each allocation's share of its GPU.

use serde::{Deserialize, Serialize};

/// Thresholds of the rule (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StallConfig {
    /// Activity below this (0–1) is under-used.
    pub active_below: f64,
    /// Reads at least this fast (bytes per second) count as reading.
    pub reading_at_least: f64,
    /// CPU use at least this (0–1 of what the job may use) counts as saturated.
    pub cpu_saturated_at: f64,
}

impl Default for StallConfig {
    fn default() -> Self {
        Self { active_below: 0.5, reading_at_least: 1024.0 * 1024.0, cpu_saturated_at: 0.9 }
    }
}

/// What the job fed its GPUs with over one interval (the same for each of its GPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct InputActivity {
    /// Bytes read per second.
    pub read_bytes_per_s: f64,
    /// CPU used, 0–1 of what the job may use.
    pub cpu_busy: f64,
}

/// One sample's verdict, as the agent reports it beside the GPU's reading.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StallSample {
    /// The GPU activity judged, 0–1.
    pub activity: f64,
    /// Bytes read per second.
    pub read_bytes_per_s: f64,
    /// CPU used, 0–1.
    pub cpu_busy: f64,
    /// Share of the interval's GPU time lost to input, 0–1 (0: not stalled).
    pub lost: f64,
}

/// The activity a sample is judged on: SM-active where the GPU measures it (GPM) and the job
/// is alone on the GPU, else the job's own process utilisation (percent), else the GPU's
/// utilisation (percent) when the job is alone on it. `None`: nothing to judge.
pub fn activity(
    process_util_percent: Option<f64>,
    gpu_util_percent: Option<f64>,
    sm_active: Option<f64>,
    alone: bool,
) -> Option<f64> {
    let finite = |v: f64| v.is_finite().then_some(v);
    let sm = sm_active.and_then(finite).filter(|_| alone);
    let own = process_util_percent.and_then(finite).map(|p| p / 100.0);
    let gpu = gpu_util_percent.and_then(finite).filter(|_| alone).map(|p| p / 100.0);
    sm.or(own).or(gpu).map(|a| a.clamp(0.0, 1.0))
}

/// Whether a sample is stalled on input.
pub fn stalled(cfg: &StallConfig, activity: f64, input: InputActivity) -> bool {
    let reading = input.read_bytes_per_s.is_finite() && input.read_bytes_per_s >= cfg.reading_at_least;
    let saturated = input.cpu_busy.is_finite() && input.cpu_busy >= cfg.cpu_saturated_at;
    activity < cfg.active_below && (reading || saturated)
}

/// Judges one sample: the share of its GPU time lost to input.
pub fn judge(cfg: &StallConfig, activity: f64, input: InputActivity) -> StallSample {
    let activity = if activity.is_finite() { activity.clamp(0.0, 1.0) } else { 0.0 };
    let lost = if stalled(cfg, activity, input) { 1.0 - activity } else { 0.0 };
    StallSample { activity, read_bytes_per_s: input.read_bytes_per_s, cpu_busy: input.cpu_busy, lost }
}

/// CPU saturation over an interval: `used_usec` of CPU time in `interval_usec` of wall time,
/// for a job that may use `cpus` CPUs (its quota, else the node's). 0 for an empty interval.
pub fn cpu_busy(used_usec: u64, interval_usec: u64, cpus: f64) -> f64 {
    if interval_usec == 0 || !cpus.is_finite() || cpus <= 0.0 {
        return 0.0;
    }
    (used_usec as f64 / (interval_usec as f64 * cpus)).clamp(0.0, 1.0)
}

/// The sum of `rbytes` over every device of a cgroup v2 `io.stat`
/// (`8:0 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0` per line).
pub fn io_stat_read_bytes(text: &str) -> u64 {
    text.lines()
        .flat_map(|l| l.split_whitespace().skip(1))
        .filter_map(|kv| kv.strip_prefix("rbytes="))
        .filter_map(|v| v.parse::<u64>().ok())
        .fold(0u64, u64::saturating_add)
}

/// `usage_usec` of a cgroup v2 `cpu.stat`.
pub fn cpu_stat_usage_usec(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse().ok())
}

/// The CPUs a cgroup v2 `cpu.max` (`QUOTA PERIOD`, or `max PERIOD`) allows; `None`: no quota.
pub fn cpu_max_cpus(text: &str) -> Option<f64> {
    let mut parts = text.split_whitespace();
    let quota: f64 = parts.next()?.parse().ok()?;
    let period: f64 = parts.next()?.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    fn input(read_mib_s: f64, cpu: f64) -> InputActivity {
        InputActivity { read_bytes_per_s: read_mib_s * MIB, cpu_busy: cpu }
    }

    #[test]
    fn a_gpu_idle_while_its_job_reads_is_stalled_and_loses_its_idle_part() {
        let cfg = StallConfig::default();
        let s = judge(&cfg, 0.1, input(200.0, 0.2));
        assert!((s.lost - 0.9).abs() < 1e-9, "{s:?}");
        assert_eq!(judge(&cfg, 0.0, input(5.0, 0.0)).lost, 1.0);
    }

    #[test]
    fn a_gpu_idle_while_its_job_saturates_its_cpu_is_stalled() {
        let cfg = StallConfig::default();
        assert_eq!(judge(&cfg, 0.2, input(0.0, 0.95)).lost, 0.8);
        assert_eq!(judge(&cfg, 0.2, input(0.0, 0.85)).lost, 0.0, "0.85 of its CPU is not saturated");
    }

    #[test]
    fn a_busy_gpu_is_never_stalled_whatever_its_job_reads() {
        let cfg = StallConfig::default();
        assert_eq!(judge(&cfg, 0.5, input(900.0, 1.0)).lost, 0.0, "0.5 is the threshold, not under it");
        assert_eq!(judge(&cfg, 0.95, input(900.0, 1.0)).lost, 0.0);
    }

    #[test]
    fn a_gpu_idle_while_its_job_does_nothing_is_idle_not_stalled() {
        let cfg = StallConfig::default();
        assert_eq!(judge(&cfg, 0.0, input(0.5, 0.1)).lost, 0.0, "under 1 MiB/s is not reading");
        assert_eq!(judge(&cfg, 0.0, InputActivity::default()).lost, 0.0);
    }

    #[test]
    fn bad_numbers_do_not_make_a_stall_or_a_share_out_of_range() {
        let cfg = StallConfig::default();
        assert_eq!(judge(&cfg, f64::NAN, input(f64::NAN, f64::NAN)).lost, 0.0);
        let s = judge(&cfg, -3.0, input(10.0, 0.0));
        assert_eq!((s.activity, s.lost), (0.0, 1.0));
        assert_eq!(judge(&cfg, 7.0, input(10.0, 0.0)).lost, 0.0);
    }

    #[test]
    fn activity_prefers_sm_active_when_alone_then_the_process_then_the_gpu() {
        assert_eq!(activity(Some(90.0), Some(95.0), Some(0.4), true), Some(0.4));
        assert_eq!(activity(Some(90.0), Some(95.0), Some(0.4), false), Some(0.9), "SM-active is the GPU's");
        assert_eq!(activity(None, Some(30.0), None, true), Some(0.3));
        assert_eq!(
            activity(None, Some(30.0), None, false),
            None,
            "a shared GPU's utilisation is not the job's"
        );
        assert_eq!(activity(Some(f64::NAN), None, None, true), None);
        assert_eq!(activity(Some(250.0), None, None, true), Some(1.0));
    }

    #[test]
    fn cgroup_files_are_read_as_the_kernel_writes_them() {
        let io = "8:0 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n\
                  259:0 rbytes=100 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n";
        assert_eq!(io_stat_read_bytes(io), 1_459_300);
        assert_eq!(io_stat_read_bytes(""), 0);
        let cpu = "usage_usec 8273645\nuser_usec 6000000\nsystem_usec 2273645\nnr_periods 0\n";
        assert_eq!(cpu_stat_usage_usec(cpu), Some(8_273_645));
        assert_eq!(cpu_stat_usage_usec("nr_periods 0\n"), None);
        assert_eq!(cpu_max_cpus("200000 100000\n"), Some(2.0));
        assert_eq!(cpu_max_cpus("max 100000\n"), None);
    }

    #[test]
    fn cpu_busy_is_the_share_of_what_the_job_may_use() {
        assert_eq!(cpu_busy(1_000_000, 1_000_000, 2.0), 0.5);
        assert_eq!(cpu_busy(5_000_000, 1_000_000, 2.0), 1.0);
        assert_eq!(cpu_busy(1, 0, 2.0), 0.0);
        assert_eq!(cpu_busy(1, 10, 0.0), 0.0);
    }
}
