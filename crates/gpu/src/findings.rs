//! Findings: bottlenecks read from a window of samples (idle but allocated, memory nearly full,
//! throttling, a job starved of input).

use crate::GpuSample;
use serde::Serialize;
use std::collections::VecDeque;
use std::time::Duration;

/// Thresholds, with defaults that match common practice.
#[derive(Debug, Clone, PartialEq)]
pub struct FindingsConfig {
    /// Utilisation below this (percent) counts as idle.
    pub idle_below_percent: f64,
    /// How long an allocated GPU must stay idle to be flagged.
    pub idle_window: Duration,
    /// Memory used above this share of the usable framebuffer (percent) is "near the limit".
    pub memory_near_percent: f64,
    /// Window over which input starvation is judged.
    pub starved_window: Duration,
    /// Mean utilisation below this (percent) while busy bursts reach `starved_swing_percent` more.
    pub starved_mean_below_percent: f64,
    /// Difference between the highest and lowest utilisation in the window (percent points).
    pub starved_swing_percent: f64,
}

impl Default for FindingsConfig {
    fn default() -> Self {
        Self {
            idle_below_percent: 5.0,
            idle_window: Duration::from_secs(300),
            memory_near_percent: 95.0,
            starved_window: Duration::from_secs(60),
            starved_mean_below_percent: 70.0,
            starved_swing_percent: 40.0,
        }
    }
}

/// Kinds of finding (the `finding` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A process holds the GPU but it does no work.
    IdleAllocated,
    /// Framebuffer almost full.
    MemoryNearLimit,
    /// Clocks held down by temperature.
    ThermalThrottle,
    /// Clocks held down by the power cap.
    PowerThrottle,
    /// Utilisation swings between bursts and waits: the job likely waits on its input.
    InputStarved,
}

impl FindingKind {
    /// Every kind, in export order.
    pub const ALL: [FindingKind; 5] = [
        FindingKind::IdleAllocated,
        FindingKind::MemoryNearLimit,
        FindingKind::ThermalThrottle,
        FindingKind::PowerThrottle,
        FindingKind::InputStarved,
    ];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::IdleAllocated => "idle_allocated",
            FindingKind::MemoryNearLimit => "memory_near_limit",
            FindingKind::ThermalThrottle => "thermal_throttle",
            FindingKind::PowerThrottle => "power_throttle",
            FindingKind::InputStarved => "input_starved",
        }
    }
}

/// One finding on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// GPU index.
    pub gpu: u32,
    /// What.
    pub kind: FindingKind,
    /// Numbers behind it, in words.
    pub detail: String,
}

#[derive(Debug, Clone, Copy)]
struct Point {
    at: Duration,
    util: f64,
    busy: bool,
}

/// Sliding window of one GPU's utilisation, and the judgement over it.
#[derive(Debug, Clone, Default)]
pub struct GpuWindow {
    points: VecDeque<Point>,
}

impl GpuWindow {
    /// Adds a sample; `has_process` says whether a process held the GPU at the time.
    pub fn push(&mut self, cfg: &FindingsConfig, at: Duration, util: f64, has_process: bool) {
        self.points.push_back(Point { at, util, busy: has_process });
        let keep = cfg.idle_window.max(cfg.starved_window);
        while self.points.front().is_some_and(|p| at.saturating_sub(p.at) > keep) {
            self.points.pop_front();
        }
    }

    /// Points of the last `window`, if the history covers all of it and a process held the GPU
    /// throughout.
    fn allocated_span(&self, window: Duration) -> Option<Vec<f64>> {
        let last = self.points.back()?.at;
        let first = self.points.front()?.at;
        if last.saturating_sub(first) < window || window.is_zero() {
            return None;
        }
        let span: Vec<&Point> = self.points.iter().filter(|p| last - p.at <= window).collect();
        span.iter().all(|p| p.busy).then(|| span.iter().map(|p| p.util).collect())
    }

    /// Findings for the GPU whose latest sample is `s` with `total_bytes` of framebuffer.
    pub fn judge(&self, cfg: &FindingsConfig, s: &GpuSample, total_bytes: u64) -> Vec<Finding> {
        let mut out = Vec::new();
        let mut add = |kind, detail: String| out.push(Finding { gpu: s.index, kind, detail });
        if let Some(u) = self.allocated_span(cfg.idle_window) {
            let max = u.iter().copied().fold(0.0, f64::max);
            if max < cfg.idle_below_percent {
                add(
                    FindingKind::IdleAllocated,
                    format!("utilisation at most {max:.0}% for {}s", cfg.idle_window.as_secs()),
                );
            }
        }
        let usable = total_bytes.saturating_sub(s.memory_reserved_bytes).max(1);
        let used_pct = s.memory_used_bytes as f64 * 100.0 / usable as f64;
        if used_pct >= cfg.memory_near_percent {
            add(FindingKind::MemoryNearLimit, format!("{used_pct:.1}% of memory used"));
        }
        if s.throttle.thermal {
            add(
                FindingKind::ThermalThrottle,
                format!(
                    "{} °C, SM clock {} MHz",
                    shown(s.gpu_temp_celsius),
                    shown(s.sm_clock_mhz.map(f64::from))
                ),
            );
        }
        if s.throttle.power {
            add(FindingKind::PowerThrottle, format!("{} W at the power cap", shown(s.power_watts)));
        }
        if let Some(u) = self.allocated_span(cfg.starved_window) {
            let mean = u.iter().sum::<f64>() / u.len() as f64;
            let max = u.iter().copied().fold(0.0, f64::max);
            let min = u.iter().copied().fold(100.0, f64::min);
            let mid = (max + min) / 2.0;
            let swings = u.windows(2).filter(|w| (w[0] < mid) != (w[1] < mid)).count();
            // Two full burst/wait cycles at least: one spike is not a pattern.
            if mean < cfg.starved_mean_below_percent && max - min >= cfg.starved_swing_percent && swings >= 4
            {
                add(
                    FindingKind::InputStarved,
                    format!("utilisation swings {min:.0}–{max:.0}%, mean {mean:.0}%"),
                );
            }
        }
        out
    }
}

/// A reading for a message: whole units, or `?` where the GPU cannot say.
fn shown(v: Option<f64>) -> String {
    v.map_or_else(|| "?".to_owned(), |v| format!("{v:.0}"))
}
