//! Every transition of the health state machine.

use gantry_gpu::GpuEventKind::{DoubleBitEcc, Lost, RowRemapFailure, SingleBitEcc, Xid};
use gantry_gpu::health::{APPLICATION_XIDS, GpuHealth, HealthConfig, HealthState, Signal};
use std::time::Duration;

fn cfg() -> HealthConfig {
    HealthConfig {
        quiet_period: Duration::from_secs(30),
        probe_backoff_initial: Duration::from_secs(5),
        probe_backoff_max: Duration::from_secs(40),
        ..HealthConfig::default()
    }
}

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn unhealthy_at(t: u64) -> GpuHealth {
    let mut h = GpuHealth::new(0);
    h.on_signal(&cfg(), Signal::Event(Xid(79)), s(t));
    h
}

#[test]
fn application_xids_are_counted_elsewhere_but_leave_a_healthy_gpu_healthy() {
    let mut h = GpuHealth::new(0);
    for xid in APPLICATION_XIDS {
        assert_eq!(h.on_signal(&cfg(), Signal::Event(Xid(xid)), s(1)), None);
    }
    assert_eq!(h.state(), HealthState::Healthy);
}

#[test]
fn critical_events_turn_a_healthy_gpu_unhealthy_with_the_reason() {
    for (kind, reason) in [
        (Xid(79), "xid 79"),
        (Xid(48), "xid 48"),
        (DoubleBitEcc, "double-bit ECC error"),
        (RowRemapFailure, "row remap failure"),
        (Lost, "GPU lost"),
    ] {
        let mut h = GpuHealth::new(3);
        let t = h.on_signal(&cfg(), Signal::Event(kind), s(7)).expect("a transition");
        assert_eq!(
            (t.gpu, t.from, t.to, t.reason.as_str(), t.at),
            (3, HealthState::Healthy, HealthState::Unhealthy, reason, s(7))
        );
    }
}

#[test]
fn a_warning_makes_a_healthy_gpu_suspect() {
    let mut h = GpuHealth::new(0);
    let t = h.on_signal(&cfg(), Signal::Event(SingleBitEcc), s(1)).expect("a transition");
    assert_eq!((t.from, t.to), (HealthState::Healthy, HealthState::Suspect));
    let t = GpuHealth::new(0).on_signal(&cfg(), Signal::ReadFailed, s(1)).expect("a transition");
    assert_eq!(t.to, HealthState::Suspect);
}

#[test]
fn a_suspect_gpu_becomes_healthy_after_a_quiet_period_counted_from_the_last_warning() {
    let mut h = GpuHealth::new(0);
    h.on_signal(&cfg(), Signal::Event(SingleBitEcc), s(0));
    h.on_signal(&cfg(), Signal::Event(SingleBitEcc), s(20));
    assert_eq!(h.on_tick(&cfg(), s(35)), None);
    let t = h.on_tick(&cfg(), s(50)).expect("a transition");
    assert_eq!((t.from, t.to), (HealthState::Suspect, HealthState::Healthy));
}

#[test]
fn a_critical_event_turns_a_suspect_gpu_unhealthy() {
    let mut h = GpuHealth::new(0);
    h.on_signal(&cfg(), Signal::Event(SingleBitEcc), s(0));
    let t = h.on_signal(&cfg(), Signal::Event(DoubleBitEcc), s(1)).expect("a transition");
    assert_eq!((t.from, t.to), (HealthState::Suspect, HealthState::Unhealthy));
}

#[test]
fn an_unhealthy_gpu_is_probed_only_after_the_back_off_and_recovers_when_the_probe_passes() {
    let mut h = unhealthy_at(10);
    assert!(!h.probe_due(s(14)));
    assert!(h.probe_due(s(15)));
    let t = h.on_probe(&cfg(), true, s(15)).expect("a transition");
    assert_eq!(
        (t.from, t.to, t.reason.as_str()),
        (HealthState::Unhealthy, HealthState::Recovering, "probe passed")
    );
}

#[test]
fn a_failed_probe_keeps_the_gpu_unhealthy_and_doubles_the_back_off_up_to_the_cap() {
    let mut h = unhealthy_at(0);
    assert_eq!(h.on_probe(&cfg(), false, s(5)), None);
    assert_eq!(h.state(), HealthState::Unhealthy);
    assert!(!h.probe_due(s(14)) && h.probe_due(s(15)));
    h.on_probe(&cfg(), false, s(15));
    assert!(!h.probe_due(s(34)) && h.probe_due(s(35)));
    h.on_probe(&cfg(), false, s(35));
    h.on_probe(&cfg(), false, s(75));
    assert!(h.probe_due(s(115)), "back-off is capped at 40 s");
}

#[test]
fn a_recovering_gpu_becomes_healthy_once_no_critical_event_arrived_for_the_quiet_period() {
    let mut h = unhealthy_at(0);
    h.on_probe(&cfg(), true, s(5));
    assert_eq!(h.on_tick(&cfg(), s(29)), None);
    let t = h.on_tick(&cfg(), s(30)).expect("a transition");
    assert_eq!((t.from, t.to), (HealthState::Recovering, HealthState::Healthy));
}

#[test]
fn a_critical_event_while_recovering_makes_the_gpu_unhealthy_again_with_a_longer_back_off() {
    let mut h = unhealthy_at(0);
    h.on_probe(&cfg(), true, s(5));
    let t = h.on_signal(&cfg(), Signal::Event(Xid(79)), s(20)).expect("a transition");
    assert_eq!((t.from, t.to), (HealthState::Recovering, HealthState::Unhealthy));
    assert!(!h.probe_due(s(29)) && h.probe_due(s(30)));
}

#[test]
fn warnings_while_recovering_or_unhealthy_change_nothing() {
    let mut h = unhealthy_at(0);
    assert_eq!(h.on_signal(&cfg(), Signal::Event(SingleBitEcc), s(1)), None);
    h.on_probe(&cfg(), true, s(5));
    assert_eq!(h.on_signal(&cfg(), Signal::ReadFailed, s(6)), None);
    assert_eq!(h.state(), HealthState::Recovering);
}

#[test]
fn the_health_metric_values_order_states_by_severity() {
    let values =
        [HealthState::Healthy, HealthState::Suspect, HealthState::Recovering, HealthState::Unhealthy]
            .map(|h| h as u8);
    assert_eq!(values, [0, 1, 2, 3]);
}
