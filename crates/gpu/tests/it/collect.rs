//! One collection cycle over the simulated fleet: health reacts to injected faults.

use gantry_gpu::findings::FindingsConfig;
use gantry_gpu::health::{HealthConfig, HealthState};
use gantry_gpu::{Collector, FaultKind, FleetSpec, SimulatedBackend, UtilProfile};
use std::time::Duration;

fn collector() -> (Collector, gantry_gpu::FleetHandle) {
    let b = SimulatedBackend::new(&FleetSpec::parse("2xH100", 5).expect("spec")).expect("fleet");
    let h = b.handle();
    let health = HealthConfig {
        quiet_period: Duration::from_secs(3),
        probe_backoff_initial: Duration::from_secs(1),
        ..HealthConfig::default()
    };
    (Collector::new(Box::new(b), health, FindingsConfig::default()), h)
}

fn at(c: &mut Collector, secs: f64) -> gantry_gpu::Collection {
    c.collect(Duration::from_secs_f64(secs)).expect("collect")
}

#[test]
fn xid_79_makes_the_gpu_unhealthy_in_the_same_cycle_and_it_recovers_after_the_quiet_period() {
    let (mut c, h) = collector();
    assert_eq!(at(&mut c, 0.0).gpus[1].health, HealthState::Healthy);
    h.inject_now(1, FaultKind::Xid(79)).expect("inject");
    let col = at(&mut c, 0.5);
    assert_eq!(col.gpus[1].health, HealthState::Unhealthy);
    assert_eq!(col.gpus[1].xid_counts.get(&79), Some(&1));
    assert_eq!(col.transitions[0].reason, "xid 79");
    assert_eq!(at(&mut c, 1.5).gpus[1].health, HealthState::Recovering);
    assert_eq!(at(&mut c, 3.0).gpus[1].health, HealthState::Recovering);
    let col = at(&mut c, 3.5);
    assert_eq!(col.gpus[1].health, HealthState::Healthy);
    assert_eq!(col.gpus[0].health, HealthState::Healthy, "the other GPU never changed");
}

#[test]
fn xid_13_is_counted_but_does_not_change_health() {
    let (mut c, h) = collector();
    h.inject_now(0, FaultKind::Xid(13)).expect("inject");
    let col = at(&mut c, 1.0);
    assert_eq!((col.gpus[0].health, col.gpus[0].xid_counts.get(&13)), (HealthState::Healthy, Some(&1)));
    assert!(col.transitions.is_empty());
}

#[test]
fn a_lost_gpu_stays_unhealthy_until_it_answers_probes_again() {
    let (mut c, h) = collector();
    h.inject_now(0, FaultKind::FallOffBus).expect("inject");
    let col = at(&mut c, 1.0);
    assert!(col.gpus[0].sample.is_none() && col.gpus[0].error.is_some());
    assert_eq!(col.gpus[0].health, HealthState::Unhealthy);
    assert_eq!(at(&mut c, 10.0).gpus[0].health, HealthState::Unhealthy);
    h.inject_now(0, FaultKind::ReturnToBus).expect("inject");
    assert_eq!(at(&mut c, 10.5).gpus[0].health, HealthState::Unhealthy);
    // Lost for longer than the quiet period: once the probe passes, nothing holds it back.
    let col = at(&mut c, 30.0);
    let steps: Vec<_> = col.transitions.iter().map(|t| (t.from, t.to)).collect();
    assert_eq!(
        steps,
        [(HealthState::Unhealthy, HealthState::Recovering), (HealthState::Recovering, HealthState::Healthy)]
    );
}

#[test]
fn findings_come_out_of_the_cycle_for_a_gpu_that_is_nearly_full() {
    let (mut c, h) = collector();
    h.start_process(1, 77, None, 80_000, UtilProfile::Steady { percent: 50.0 }).expect("start");
    let col = at(&mut c, 1.0);
    assert_eq!(col.gpus[1].findings.len(), 1);
    assert!(col.gpus[0].findings.is_empty());
}

#[test]
fn a_failed_row_remap_makes_the_gpu_unhealthy_and_keeps_failing_its_probes() {
    let (mut c, h) = collector();
    h.inject_now(0, FaultKind::RowRemapFailure).expect("inject");
    let col = at(&mut c, 1.0);
    assert_eq!(col.gpus[0].health, HealthState::Unhealthy);
    assert_eq!(col.transitions[0].reason, "row remap failure");
    for t in 2..60 {
        assert_eq!(at(&mut c, f64::from(t)).gpus[0].health, HealthState::Unhealthy, "at {t} s");
    }
}
