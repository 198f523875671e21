//! The simulated fleet: specs, load that follows processes, faults, determinism.

use gantry_gpu::sim::{FleetSpec, MODELS};
use gantry_gpu::{FaultKind, GpuBackend, GpuError, GpuEventKind, MIB, SimulatedBackend, UtilProfile};
use std::time::Duration;

fn fleet(spec: &str, seed: u64) -> SimulatedBackend {
    SimulatedBackend::new(&FleetSpec::parse(spec, seed).expect("valid spec")).expect("fleet builds")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_fleet_spec_lists_models_in_index_order_with_their_data_sheet_numbers() {
    let b = fleet("2xA100-80GB, 4xT4", 1);
    let names: Vec<&str> = b.inventory().iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        names,
        ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "Tesla T4", "Tesla T4", "Tesla T4", "Tesla T4"]
    );
    assert_eq!(b.inventory()[2].memory_total_bytes, 15_360 * MIB);
    assert_eq!(b.inventory()[0].nvlink_peers, [b.inventory()[1].pci_bus_id.clone()]);
    assert!(b.inventory()[3].nvlink_peers.is_empty());
    assert_eq!(fleet("H100", 1).inventory().len(), 1);
}

#[test]
fn bad_fleet_specs_are_refused_with_the_reason() {
    for (spec, words) in [("8xB999", "unknown GPU model"), ("", "1 to 64"), ("65xT4", "1 to 64")] {
        let err = FleetSpec::parse(spec, 0).expect_err("must fail").to_string();
        assert!(err.contains(words), "{spec:?}: {err}");
    }
}

#[test]
fn bad_fleet_files_are_refused_with_the_reason() {
    for (toml, words) in [
        ("gpus = \"T4\"\n[[fault]]\nat_s = 1\ngpu = 3\nxid = 79\n", "fleet has 1 GPUs"),
        ("gpus = \"T4\"\n[[fault]]\nat_s = 1\ngpu = 0\n", "exactly one of xid or event"),
        ("gpus = \"T4\"\n[[fault]]\nat_s = -1\ngpu = 0\nxid = 1\n", "non-negative"),
        ("gpus = \"T4\"\ncolour = 1\n", "unknown field"),
        ("gpus = \"T4\"\n[[fault]]\nat_s = 1\ngpu = 0\nevent = \"thermal_throttle\"\n", "duration_s"),
    ] {
        let err = FleetSpec::from_toml(toml).expect_err("must fail").to_string();
        assert!(err.contains(words), "{toml:?}: {err}");
    }
}

#[test]
fn every_model_has_consistent_specs() {
    for m in MODELS {
        assert!(m.idle_watts < m.power_limit_watts && m.idle_sm_clock_mhz < m.max_sm_clock_mhz, "{}", m.key);
        assert!(m.reserved_mib < m.memory_mib / 10, "{}", m.key);
    }
}

#[test]
fn utilisation_memory_and_power_follow_the_processes_started_and_stopped() {
    let mut b = fleet("2xH100", 3);
    let h = b.handle();
    let idle = b.sample(0, ms(0)).expect("sample");
    assert_eq!((idle.gpu_util_percent, idle.memory_used_bytes), (Some(0.0), 0));
    h.start_process(0, 100, Some("job-a".into()), 20_000, UtilProfile::Steady { percent: 80.0 })
        .expect("start");
    let busy = b.sample(0, ms(1000)).expect("sample");
    assert!(busy.gpu_util_percent.is_some_and(|u| (78.0..=82.0).contains(&u)), "{:?}", busy.gpu_util_percent);
    assert_eq!(busy.memory_used_bytes, 20_000 * MIB);
    assert!(busy.power_watts.expect("modelled") > idle.power_watts.expect("modelled") + 300.0);
    assert!(busy.tensor_active.expect("modelled") > 0.4);
    assert_eq!(
        b.sample(1, ms(1000)).expect("sample").gpu_util_percent,
        Some(0.0),
        "the other GPU stays idle"
    );
    let procs = b.processes(ms(1000)).expect("processes");
    assert_eq!((procs[0].pid, procs[0].job_id.as_deref()), (100, Some("job-a")));
    h.stop_process(100).expect("stop");
    let after = b.sample(0, ms(2000)).expect("sample");
    assert_eq!((after.gpu_util_percent, after.memory_used_bytes), (Some(0.0), 0));
    assert!(after.energy_millijoules > busy.energy_millijoules);
}

#[test]
fn processes_are_refused_when_memory_runs_out_or_the_pid_is_taken() {
    let b = fleet("T4", 0);
    let h = b.handle();
    assert!(matches!(
        h.start_process(0, 1, None, 16_000, UtilProfile::Idle),
        Err(GpuError::OutOfMemory { .. })
    ));
    h.start_process(0, 1, None, 1000, UtilProfile::Idle).expect("fits");
    assert!(matches!(h.start_process(0, 1, None, 1000, UtilProfile::Idle), Err(GpuError::DuplicatePid(1))));
    assert!(matches!(h.stop_process(2), Err(GpuError::UnknownPid(2))));
    let uuid = b.inventory()[0].uuid.clone();
    h.start_process(uuid.as_str(), 2, None, 10, UtilProfile::Idle).expect("by uuid");
}

#[test]
fn bursty_processes_alternate_between_high_and_low_utilisation() {
    let mut b = fleet("A100", 9);
    b.handle()
        .start_process(0, 5, None, 100, UtilProfile::Bursty { low: 5.0, high: 95.0, period_s: 2.0 })
        .expect("start");
    let u: Vec<f64> = (0..4)
        .map(|i| {
            b.sample(0, ms(500 + i * 1000))
                .expect("sample")
                .gpu_util_percent
                .expect("simulated GPUs report utilisation")
        })
        .collect();
    assert!(u[0] > 90.0 && u[1] < 10.0 && u[2] > 90.0 && u[3] < 10.0, "{u:?}");
}

#[test]
fn the_same_seed_and_times_give_the_same_readings_and_another_seed_differs() {
    let run = |seed| {
        let mut b = fleet("4xH100", seed);
        b.handle().start_process(1, 7, None, 1000, UtilProfile::Steady { percent: 60.0 }).expect("start");
        (0..20).map(|t| b.sample(1, ms(t * 250)).expect("sample")).collect::<Vec<_>>()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
    assert_ne!(fleet("H100", 1).inventory()[0].uuid, fleet("H100", 2).inventory()[0].uuid);
}

#[test]
fn scripted_faults_fire_at_their_time_as_events() {
    let spec = FleetSpec::from_toml(
        "seed = 1\ngpus = \"2xH100\"\n[[fault]]\nat_s = 2\ngpu = 1\nxid = 79\n[[fault]]\nat_s = 3\ngpu = 0\nevent = \"double_bit_ecc\"\n",
    )
    .expect("valid toml");
    let mut b = SimulatedBackend::new(&spec).expect("fleet");
    assert!(b.poll_events(ms(1999)).expect("poll").is_empty());
    let ev = b.poll_events(ms(2000)).expect("poll");
    assert_eq!((ev.len(), ev[0].gpu_index, ev[0].kind), (1, 1, GpuEventKind::Xid(79)));
    assert_eq!(b.sample(1, ms(2000)).expect("sample").last_xid, 79);
    let ev = b.poll_events(ms(5000)).expect("poll");
    assert_eq!(ev[0].kind, GpuEventKind::DoubleBitEcc);
    assert_eq!(b.sample(0, ms(5000)).expect("sample").ecc_double_bit_volatile, Some(1));
    assert!(b.poll_events(ms(6000)).expect("poll").is_empty(), "events are delivered once");
}

#[test]
fn a_gpu_that_falls_off_the_bus_fails_reads_and_probes_until_it_returns() {
    let mut b = fleet("2xH100", 1);
    let h = b.handle();
    h.start_process(1, 9, None, 10, UtilProfile::Idle).expect("start");
    h.inject_now(1, FaultKind::FallOffBus).expect("inject");
    assert_eq!(b.poll_events(ms(10)).expect("poll")[0].kind, GpuEventKind::Lost);
    assert!(matches!(b.sample(1, ms(10)), Err(GpuError::Lost { index: 1 })));
    assert!(b.probe(1, ms(10)).is_err());
    assert!(b.processes(ms(10)).expect("processes").is_empty());
    h.inject_now(1, FaultKind::ReturnToBus).expect("inject");
    assert!(b.probe(1, ms(20)).is_ok());
}

#[test]
fn thermal_throttling_heats_the_gpu_and_lowers_its_clock_for_its_duration() {
    let mut b = fleet("H100", 1);
    b.handle().start_process(0, 9, None, 10, UtilProfile::Steady { percent: 90.0 }).expect("start");
    let normal = b.sample(0, ms(0)).expect("sample");
    b.handle().inject_now(0, FaultKind::ThermalThrottle(Duration::from_secs(5))).expect("inject");
    let hot = b.sample(0, ms(1000)).expect("sample");
    assert!(
        hot.throttle.thermal
            && hot.gpu_temp_celsius.is_some_and(|t| t >= 88.0)
            && hot.sm_clock_mhz < normal.sm_clock_mhz
    );
    assert!(!b.sample(0, ms(6000)).expect("sample").throttle.thermal);
}

#[test]
fn time_going_backwards_is_an_error_not_a_panic() {
    let mut b = fleet("H100", 1);
    b.sample(0, ms(100)).expect("sample");
    assert!(matches!(b.sample(0, ms(50)), Err(GpuError::TimeWentBackwards { .. })));
}

mod properties {
    use super::{fleet, ms};
    use gantry_gpu::{GpuBackend, MIB, UtilProfile};
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Start { gpu: u32, pid: u32, mib: u64, percent: f64 },
        Stop { pid: u32 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3u32, 0..20u32, 0..40_000u64, 0.0..100.0f64).prop_map(|(gpu, pid, mib, percent)| Op::Start {
                gpu,
                pid,
                mib,
                percent
            }),
            (0..20u32).prop_map(|pid| Op::Stop { pid }),
        ]
    }

    fn replay(seed: u64, ops: &[Op]) -> Vec<gantry_gpu::GpuSample> {
        let mut b = fleet("3xA100-80GB", seed);
        let h = b.handle();
        let mut out = Vec::new();
        for (t, op) in ops.iter().enumerate() {
            // Refusals (no memory, pid taken, unknown pid) are part of the behaviour under test.
            let _ = match op {
                Op::Start { gpu, pid, mib, percent } => {
                    h.start_process(*gpu, *pid, None, *mib, UtilProfile::Steady { percent: *percent })
                }
                Op::Stop { pid } => h.stop_process(*pid),
            };
            for gpu in 0..3 {
                out.push(b.sample(gpu, ms(t as u64 * 100)).expect("sample"));
            }
        }
        out
    }

    proptest! {
        #[test]
        fn memory_always_adds_up_and_utilisation_stays_a_percentage(seed in 0..1000u64, ops in prop::collection::vec(op(), 1..40)) {
            for s in replay(seed, &ops) {
                prop_assert_eq!(s.memory_used_bytes + s.memory_free_bytes + s.memory_reserved_bytes, 81_920 * MIB);
                prop_assert!(s.gpu_util_percent.is_some_and(|u| (0.0..=100.0).contains(&u)));
            }
        }

        #[test]
        fn the_same_seed_and_operations_replay_identically(seed in 0..1000u64, ops in prop::collection::vec(op(), 1..20)) {
            prop_assert_eq!(replay(seed, &ops), replay(seed, &ops));
        }
    }
}

mod fuzz {
    //! Property-based fuzzing of the fleet flag and fleet file parsers: refused with a reason or
    //! accepted, never a panic (`GANTRY_FUZZ_CASES`, default 64).
    use gantry_gpu::FleetSpec;
    use proptest::prelude::*;

    fn cases() -> u32 {
        std::env::var("GANTRY_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
    }

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|f| format!("{f:?}")),
            Just("1e300".to_owned()),
            Just("nan".to_owned()),
            Just("inf".to_owned()),
            Just("-0.0".to_owned()),
        ]
    }

    fn toml_text() -> impl Strategy<Value = String> {
        let key = prop::sample::select(
            &[
                "gpus",
                "at_s",
                "gpu",
                "xid",
                "event",
                "duration_s",
                "seed",
                "memory_mib",
                "pid",
                "job",
                "util",
            ][..],
        );
        let value = prop_oneof![
            number(),
            Just("\"2xH100\"".to_owned()),
            Just("\"thermal_throttle\"".to_owned()),
            Just("\"x\"".to_owned()),
            Just("[]".to_owned())
        ];
        let line = (key, value).prop_map(|(k, v)| format!("{k} = {v}"));
        let table = prop::sample::select(&["", "[[process]]", "[[fault]]"][..]).prop_map(str::to_owned);
        let body = prop::collection::vec(prop_oneof![line, table], 0..16).prop_map(|l| l.join("\n"));
        (any::<bool>(), body).prop_map(|(lead, b)| if lead { format!("gpus = \"2xH100\"\n{b}") } else { b })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn any_fleet_flag_is_parsed_or_refused(flag in "[0-9xA-Za-z,\\- ]{0,24}", seed in any::<u64>()) {
            let _ = FleetSpec::parse(&flag, seed);
        }

        #[test]
        fn any_fleet_file_is_parsed_or_refused(text in toml_text()) {
            let _ = FleetSpec::from_toml(&text);
        }

        #[test]
        fn any_fault_time_or_duration_is_parsed_or_refused(at in number(), gpu in 0u32..3, duration in number()) {
            let text = format!(
                "gpus = \"2xH100\"\n[[fault]]\nat_s = {at}\ngpu = {gpu}\nevent = \"thermal_throttle\"\nduration_s = {duration}\n"
            );
            let _ = FleetSpec::from_toml(&text);
        }
    }
}
