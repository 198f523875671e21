//! Findings over a window of samples.

use gantry_gpu::findings::{FindingKind, FindingsConfig, GpuWindow};
use gantry_gpu::{GpuSample, MIB, Throttle};
use std::time::Duration;

fn cfg() -> FindingsConfig {
    FindingsConfig {
        idle_window: Duration::from_secs(10),
        starved_window: Duration::from_secs(10),
        ..FindingsConfig::default()
    }
}

fn sample(util: f64, used_mib: u64) -> GpuSample {
    GpuSample {
        gpu_util_percent: Some(util),
        memory_used_bytes: used_mib * MIB,
        memory_reserved_bytes: 0,
        ..GpuSample::default()
    }
}

fn kinds(w: &GpuWindow, s: &GpuSample) -> Vec<FindingKind> {
    w.judge(&cfg(), s, 1000 * MIB).into_iter().map(|f| f.kind).collect()
}

fn fill(utils: impl Fn(u64) -> f64, has_process: bool, secs: u64) -> GpuWindow {
    let mut w = GpuWindow::default();
    for t in 0..=secs {
        w.push(&cfg(), Duration::from_secs(t), utils(t), has_process);
    }
    w
}

#[test]
fn an_allocated_gpu_idle_for_the_whole_window_is_flagged_and_not_before() {
    assert_eq!(kinds(&fill(|_| 1.0, true, 10), &sample(1.0, 10)), [FindingKind::IdleAllocated]);
    assert!(kinds(&fill(|_| 1.0, true, 9), &sample(1.0, 10)).is_empty(), "window not yet covered");
    assert!(kinds(&fill(|_| 1.0, false, 20), &sample(1.0, 0)).is_empty(), "nothing allocated");
    assert!(kinds(&fill(|t| if t == 5 { 50.0 } else { 1.0 }, true, 10), &sample(1.0, 10)).is_empty());
}

#[test]
fn memory_near_the_limit_is_flagged_from_the_threshold() {
    let w = GpuWindow::default();
    assert_eq!(kinds(&w, &sample(50.0, 950)), [FindingKind::MemoryNearLimit]);
    assert!(kinds(&w, &sample(50.0, 949)).is_empty());
}

#[test]
fn thermal_and_power_throttling_are_flagged() {
    let mut s = sample(90.0, 10);
    s.throttle = Throttle { power: true, thermal: true, hardware: false };
    assert_eq!(kinds(&GpuWindow::default(), &s), [FindingKind::ThermalThrottle, FindingKind::PowerThrottle]);
}

#[test]
fn utilisation_oscillating_low_while_a_process_lives_is_flagged_as_input_starved() {
    let bursty = |t: u64| if t % 4 < 1 { 90.0 } else { 5.0 };
    assert_eq!(kinds(&fill(bursty, true, 12), &sample(5.0, 10)), [FindingKind::InputStarved]);
    assert!(kinds(&fill(|_| 95.0, true, 12), &sample(95.0, 10)).is_empty(), "busy is not starved");
    assert!(kinds(&fill(bursty, false, 12), &sample(5.0, 10)).is_empty(), "no process, no job to starve");
}
