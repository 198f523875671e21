//! The real NVML adapter against the fake libnvidia-ml (`crates/fake-nvml`): every test loads
//! its own copy with its own scenario, written in NVML's units, and checks what the adapter
//! makes of it in Gantry's (watts, bytes, bytes per second, ratios, typed errors).

#[path = "../../../fake-nvml/testing.rs"]
mod fake_nvml;

use fake_nvml::FakeNvml;
use gantry_gpu::findings::FindingsConfig;
use gantry_gpu::health::{HealthConfig, HealthState};
use gantry_gpu::{
    Collection, Collector, GpuBackend, GpuError, GpuEvent, GpuEventKind, NvmlBackend, ProcessUsage,
};
use std::time::Duration;

const MIB: u64 = 1024 * 1024;
const H200_TOTAL: u64 = 150_754_820_096;

/// A GPU block: `name`, then extra keys and tables for it.
fn gpu(name: &str, extra: &str) -> String {
    format!("[[gpu]]\nname = \"{name}\"\nmemory_total_bytes = {H200_TOTAL}\n{extra}\n")
}

fn open(fake: &FakeNvml) -> NvmlBackend {
    NvmlBackend::open_at(&fake.library()).expect("the adapter opens the fake library")
}

fn secs(t: f64) -> Duration {
    Duration::from_secs_f64(t)
}

/// Ratios from GPM are percentages divided by 100: compare them to six places.
fn ratio(v: Option<f64>) -> Option<f64> {
    v.map(|x| (x * 1e6).round() / 1e6)
}

const BUSY: &str = r#"
power_limit_mw = 700000
max_sm_clock_mhz = 1980
gpm = true
nvlink_peers = ["00000000:2A:00.0", "00000000:3B:00.0"]
[[gpu.reading]]
gpu_util_percent = 97
mem_util_percent = 41
encoder_util_percent = 3
decoder_util_percent = 5
sm_clock_mhz = 1410
mem_clock_mhz = 3201
power_mw = 689000
energy_mj = 1000000
gpu_temp_c = 62
memory_temp_c = 71
memory_used_bytes = 1022361600
memory_reserved_bytes = 644939776
pcie_tx_kb_per_s = 2048
pcie_rx_kb_per_s = 6144
pcie_replays = 2
ecc_corrected_volatile = 1
ecc_uncorrected_volatile = 0
remapped_rows_correctable = 3
remapped_rows_uncorrectable = 0
row_remap_failure = false
nvlink_total_kib = 4096
throttle = []
gpm_graphics_percent = 97.7
gpm_tensor_percent = 88.8
gpm_dram_percent = 52.0
[[gpu.reading]]
at_s = 10
power_mw = 250500
throttle = ["sw_thermal_slowdown", "sw_power_cap"]
"#;

#[test]
fn the_default_scenario_is_two_h200s_reading_as_a_real_one_did_under_load() {
    let fake = FakeNvml::new(include_str!("../../../fake-nvml/scenarios/h200.toml"));
    let mut b = open(&fake);
    assert_eq!((b.kind(), b.driver_version()), ("nvml", "580.159.04"));
    let gpus = b.inventory().to_vec();
    assert_eq!(gpus.len(), 2);
    let g = &gpus[0];
    assert_eq!((g.name.as_str(), g.pci_bus_id.as_str()), ("NVIDIA H200", "00000000:18:00.0"));
    assert_eq!(g.uuid, "GPU-5c2b6a1e-8d3f-4a47-9b1e-2f0c7d4e9a01");
    assert_eq!(
        (g.memory_total_bytes, g.power_limit_watts, g.max_sm_clock_mhz),
        (H200_TOTAL, Some(700.0), Some(1980))
    );
    let _ = b.sample(0, Duration::ZERO).expect("first sample");
    let s = b.sample(0, secs(0.5)).expect("second sample");
    assert_eq!((s.gpu_util_percent, s.power_watts, s.sm_clock_mhz), (Some(97.0), Some(689.0), Some(1410)));
    assert_eq!((s.memory_used_bytes, s.memory_reserved_bytes), (975 * MIB, 644_939_776));
    assert_eq!((ratio(s.tensor_active), ratio(s.gr_engine_active)), (Some(0.888), Some(0.977)));
    assert!(s.nvlink_bytes_total.is_none() && s.pcie_tx_bytes_per_second.is_some());
    let procs = b.processes(Duration::ZERO).expect("processes");
    assert_eq!(
        procs,
        [ProcessUsage {
            pid: 4242,
            gpu_index: 0,
            memory_used_bytes: 975 * MIB,
            job_id: None,
            util_percent: Some(97)
        }]
    );
}

#[test]
fn inventory_carries_identity_memory_limits_and_nvlink_peers() {
    let fake = FakeNvml::new(&format!(
        "{}{}",
        gpu("NVIDIA H200", &format!("uuid = \"GPU-aaaa\"\npci_bus_id = \"00000000:18:00.0\"\n{BUSY}")),
        gpu("Tesla T4", "")
    ));
    let b = open(&fake);
    let [h, t] = b.inventory() else { panic!("two GPUs: {:?}", b.inventory()) };
    assert_eq!((h.index, h.uuid.as_str(), h.name.as_str()), (0, "GPU-aaaa", "NVIDIA H200"));
    assert_eq!(h.nvlink_peers, ["00000000:2A:00.0", "00000000:3B:00.0"]);
    assert_eq!((h.power_limit_watts, h.max_sm_clock_mhz, h.mig_enabled), (Some(700.0), Some(1980), false));
    assert_eq!((t.index, t.pci_bus_id.as_str()), (1, "00000000:19:00.0"));
    assert!(t.nvlink_peers.is_empty(), "NVLink not supported means no peers");
    assert_eq!(
        (t.power_limit_watts, t.max_sm_clock_mhz),
        (None, None),
        "unsupported limits are absent, not 0"
    );
}

#[test]
fn readings_arrive_in_gantry_units_and_follow_the_scripted_changes() {
    let fake = FakeNvml::new(&format!("clock = \"file\"\n{}", gpu("NVIDIA H200", BUSY)));
    let mut b = open(&fake);
    let s = b.sample(0, Duration::ZERO).expect("sample at 0 s");
    assert_eq!((s.gpu_util_percent, s.mem_copy_util_percent), (Some(97.0), Some(41.0)));
    assert_eq!((s.encoder_util_percent, s.decoder_util_percent), (Some(3.0), Some(5.0)));
    assert_eq!((s.sm_clock_mhz, s.mem_clock_mhz), (Some(1410), Some(3201)));
    assert_eq!(s.power_watts, Some(689.0), "NVML reports milliwatts");
    assert_eq!(s.energy_millijoules, Some(1_000_000));
    assert_eq!((s.gpu_temp_celsius, s.memory_temp_celsius), (Some(62.0), Some(71.0)));
    assert_eq!((s.memory_used_bytes, s.memory_reserved_bytes), (1_022_361_600, 644_939_776));
    assert_eq!(s.memory_free_bytes, H200_TOTAL - 1_022_361_600 - 644_939_776);
    assert_eq!(s.pcie_tx_bytes_per_second, Some(2048.0 * 1024.0), "NVML reports KB/s");
    assert_eq!(s.pcie_rx_bytes_per_second, Some(6144.0 * 1024.0));
    assert_eq!(s.pcie_replay_count, Some(2));
    assert_eq!((s.ecc_single_bit_volatile, s.ecc_double_bit_volatile), (Some(1), Some(0)));
    assert_eq!((s.remapped_rows_correctable, s.remapped_rows_uncorrectable), (Some(3), Some(0)));
    assert_eq!(s.row_remap_failure, Some(false));
    assert_eq!(s.nvlink_bytes_total, Some(4096 * 1024), "NVML counts NVLink traffic in KiB");
    assert!(!s.throttle.any());
    assert_eq!(s.gr_engine_active, None, "GPM needs two samples");

    fake.set_time(10.0);
    let s = b.sample(0, secs(10.0)).expect("sample at 10 s");
    assert_eq!(s.power_watts, Some(250.5));
    assert_eq!(s.energy_millijoules, Some(1_000_000 + 689_000 * 10), "energy grows by the power drawn");
    assert!(s.throttle.thermal && s.throttle.power && !s.throttle.hardware, "{:?}", s.throttle);
    assert_eq!(
        (ratio(s.gr_engine_active), ratio(s.tensor_active), ratio(s.dram_active)),
        (Some(0.977), Some(0.888), Some(0.52))
    );
}

#[test]
fn processes_carry_pid_gpu_and_memory_and_come_and_go() {
    let fake = FakeNvml::new(&format!(
        "clock = \"file\"\n{}{}",
        gpu("NVIDIA H200", "[[gpu.process]]\npid = 100\nused_memory_bytes = 1073741824\nuntil_s = 20"),
        gpu("NVIDIA H200", "[[gpu.process]]\npid = 200\nused_memory_bytes = 536870912\nfrom_s = 5"),
    ));
    let mut b = open(&fake);
    // No process declares a utilisation: the driver has no sample of any (NOT_FOUND), so each
    // ran no kernel since the last read.
    let p = |pid, gpu_index, mib| ProcessUsage {
        pid,
        gpu_index,
        memory_used_bytes: mib * MIB,
        job_id: None,
        util_percent: Some(0),
    };
    assert_eq!(b.processes(Duration::ZERO).expect("at 0 s"), [p(100, 0, 1024)]);
    fake.set_time(10.0);
    assert_eq!(b.processes(secs(10.0)).expect("at 10 s"), [p(100, 0, 1024), p(200, 1, 512)]);
    assert_eq!(
        b.sample(1, secs(10.0)).expect("sample").memory_used_bytes,
        512 * MIB,
        "used = the processes' memory"
    );
    fake.set_time(30.0);
    assert_eq!(b.processes(secs(30.0)).expect("at 30 s"), [p(200, 1, 512)]);
}

#[test]
fn each_process_carries_its_own_sm_utilisation_from_the_drivers_per_process_samples() {
    let fake = FakeNvml::new(&format!(
        "clock = \"file\"\n{}",
        gpu(
            "NVIDIA H200",
            "[[gpu.process]]\npid = 100\nused_memory_bytes = 1073741824\nsm_util_percent = 80\n\
             [[gpu.process]]\npid = 200\nused_memory_bytes = 536870912\n\
             [[gpu.process]]\npid = 300\nused_memory_bytes = 1048576\nsm_util_percent = 35\nfrom_s = 5",
        ),
    ));
    let mut b = open(&fake);
    let util =
        |procs: Vec<ProcessUsage>| procs.into_iter().map(|p| (p.pid, p.util_percent)).collect::<Vec<_>>();
    fake.set_time(1.0);
    let first = util(b.processes(secs(1.0)).expect("at 1 s"));
    assert_eq!(
        first,
        [(100, Some(80)), (200, Some(0))],
        "the busy owner apart from an idle process on the same GPU"
    );
    fake.set_time(10.0);
    let later = util(b.processes(secs(10.0)).expect("at 10 s"));
    assert_eq!(later, [(100, Some(80)), (200, Some(0)), (300, Some(35))]);
    // Read again before the driver took a newer sample: no process ran a kernel since.
    let again = util(b.processes(secs(10.0)).expect("again at 10 s"));
    assert_eq!(again, [(100, Some(0)), (200, Some(0)), (300, Some(0))]);
}

fn health() -> HealthConfig {
    HealthConfig {
        quiet_period: Duration::from_secs(30),
        probe_backoff_initial: Duration::from_secs(5),
        probe_backoff_max: Duration::from_secs(40),
        ..HealthConfig::default()
    }
}

/// Moves the fake's clock and the collector's to `t` and runs one cycle.
fn cycle(fake: &FakeNvml, c: &mut Collector, t: f64) -> Collection {
    fake.set_time(t);
    c.collect(secs(t)).expect("collect")
}

fn health_of(col: &Collection) -> Vec<HealthState> {
    col.gpus.iter().map(|g| g.health).collect()
}

#[test]
fn an_xid_event_makes_the_gpu_unhealthy_then_a_passing_probe_and_quiet_make_it_healthy() {
    let fake = FakeNvml::new(&format!(
        "clock = \"file\"\n{}{}",
        gpu("NVIDIA H200", "[[gpu.event]]\nat_s = 10\nxid = 79"),
        gpu("NVIDIA H200", "[[gpu.event]]\nat_s = 10\nxid = 13"),
    ));
    let mut c = Collector::new(Box::new(open(&fake)), health(), FindingsConfig::default());
    use HealthState::*;
    assert_eq!(health_of(&cycle(&fake, &mut c, 0.0)), [Healthy, Healthy]);
    let col = cycle(&fake, &mut c, 10.0);
    assert_eq!(health_of(&col), [Unhealthy, Healthy], "XID 13 is the application's, not the GPU's");
    assert_eq!((col.transitions.len(), col.transitions[0].reason.as_str()), (1, "xid 79"));
    assert_eq!(col.gpus[1].xid_counts.get(&13), Some(&1));
    let last_xid = |col: &Collection, i: usize| col.gpus[i].sample.as_ref().map(|s| s.last_xid);
    assert_eq!((last_xid(&col, 0), last_xid(&col, 1)), (Some(79), Some(13)));
    assert_eq!(health_of(&cycle(&fake, &mut c, 12.0)), [Unhealthy, Healthy], "no probe before the back-off");
    assert_eq!(health_of(&cycle(&fake, &mut c, 16.0)), [Recovering, Healthy], "the probe passed");
    let col = cycle(&fake, &mut c, 41.0);
    assert_eq!(health_of(&col), [Healthy, Healthy]);
    assert_eq!(col.transitions[0].reason, "quiet for 30s");
    assert_eq!(col.gpus[0].xid_counts.get(&79), Some(&1), "each event is delivered once");
}

#[test]
fn ecc_events_and_a_row_remap_failure_reach_health_and_the_counters() {
    let fake = FakeNvml::new(&format!(
        "clock = \"file\"\n{}{}",
        gpu(
            "NVIDIA H200",
            "[[gpu.reading]]\necc_corrected_volatile = 4\necc_uncorrected_volatile = 0\n\
             [[gpu.event]]\nat_s = 5\necc = \"single_bit\"\n[[gpu.event]]\nat_s = 10\necc = \"double_bit\""
        ),
        gpu(
            "NVIDIA H200",
            "[[gpu.reading]]\nrow_remap_failure = false\n[[gpu.reading]]\nat_s = 10\nrow_remap_failure = true"
        ),
    ));
    let mut c = Collector::new(Box::new(open(&fake)), health(), FindingsConfig::default());
    use HealthState::*;
    let col = cycle(&fake, &mut c, 5.0);
    assert_eq!(health_of(&col), [Suspect, Healthy]);
    assert_eq!(col.gpus[0].sample.as_ref().and_then(|s| s.ecc_single_bit_volatile), Some(5));
    let col = cycle(&fake, &mut c, 10.0);
    assert_eq!(health_of(&col), [Unhealthy, Unhealthy]);
    let reasons: Vec<&str> = col.transitions.iter().map(|t| t.reason.as_str()).collect();
    assert_eq!(reasons, ["double-bit ECC error", "row remap failure"]);
    assert_eq!(col.gpus[0].sample.as_ref().and_then(|s| s.ecc_double_bit_volatile), Some(1));
    let col = cycle(&fake, &mut c, 20.0);
    assert_eq!(health_of(&col), [Recovering, Unhealthy], "a failed remap fails every probe until a reset");
}

#[test]
fn a_gpu_that_falls_off_the_bus_is_lost_and_recovers_once_it_answers_again() {
    let fake = FakeNvml::new(&format!(
        "clock = \"file\"\n{}{}",
        gpu("NVIDIA H200", ""),
        gpu(
            "NVIDIA H200",
            "lost_from_s = 5\nlost_until_s = 20\n[[gpu.process]]\npid = 7\nused_memory_bytes = 1"
        ),
    ));
    let mut b = open(&fake);
    fake.set_time(5.0);
    assert!(matches!(b.sample(1, secs(5.0)), Err(GpuError::Lost { index: 1 })));
    assert!(matches!(b.probe(1, secs(5.0)), Err(GpuError::Lost { index: 1 })));
    assert!(b.sample(0, secs(5.0)).is_ok(), "the other GPU still answers");
    assert!(b.processes(secs(5.0)).expect("processes").is_empty(), "a lost GPU's processes are not listed");

    let mut c = Collector::new(Box::new(b), health(), FindingsConfig::default());
    use HealthState::*;
    let col = cycle(&fake, &mut c, 5.0);
    assert_eq!(health_of(&col), [Healthy, Unhealthy]);
    assert_eq!(col.transitions[0].reason, "GPU lost");
    assert_eq!(col.gpus[1].error.as_deref(), Some("GPU 1 is lost (fell off the bus or is unreachable)"));
    assert_eq!(health_of(&cycle(&fake, &mut c, 12.0)), [Healthy, Unhealthy], "still lost");
    let col = cycle(&fake, &mut c, 22.0);
    assert_eq!(health_of(&col), [Healthy, Recovering], "answers again and the probe passes");
    assert!(col.gpus[1].sample.is_some());
}

#[test]
fn a_mig_gpu_reports_no_utilisation_rather_than_zero_but_keeps_engine_activity() {
    let fake = FakeNvml::new(&gpu(
        "NVIDIA H200",
        "mig = true\ngpm = true\n[[gpu.reading]]\ngpu_util_percent = 50\nmem_util_percent = 20\ngpm_graphics_percent = 40.0",
    ));
    let mut b = open(&fake);
    assert!(b.inventory()[0].mig_enabled);
    let _ = b.sample(0, Duration::ZERO).expect("first sample");
    let s = b.sample(0, secs(1.0)).expect("second sample");
    assert_eq!((s.gpu_util_percent, s.mem_copy_util_percent), (None, None));
    assert_eq!(ratio(s.gr_engine_active), Some(0.4), "GR engine activity is the MIG utilisation");
    assert_eq!(s.tensor_active, None, "a GPM metric the GPU does not report is absent");
}

#[test]
fn readings_a_gpu_does_not_support_are_absent_not_zero() {
    let fake = FakeNvml::new(&gpu(
        "Tesla T4",
        "supported_events = []\nnot_supported = [\"nvmlDeviceGetTotalEccErrors\"]\n\
         [[gpu.reading]]\nmemory_used_bytes = 1048576\necc_corrected_volatile = 9",
    ));
    let mut b = open(&fake);
    let s = b.sample(0, Duration::ZERO).expect("sample");
    assert_eq!(s.memory_used_bytes, MIB);
    assert_eq!((s.gpu_util_percent, s.encoder_util_percent, s.decoder_util_percent), (None, None, None));
    assert_eq!(
        (s.sm_clock_mhz, s.mem_clock_mhz, s.power_watts, s.energy_millijoules),
        (None, None, None, None)
    );
    assert_eq!((s.gpu_temp_celsius, s.memory_temp_celsius, s.pcie_replay_count), (None, None, None));
    assert_eq!(
        (s.pcie_tx_bytes_per_second, s.ecc_single_bit_volatile, s.remapped_rows_correctable),
        (None, None, None)
    );
    assert_eq!((s.row_remap_failure, s.nvlink_bytes_total, s.gr_engine_active), (None, None, None));
    assert_eq!(
        b.poll_events(Duration::ZERO).expect("a GPU without events is not watched"),
        Vec::<GpuEvent>::new()
    );
}

#[test]
fn a_driver_older_than_r510_is_refused_with_a_sentence() {
    let fake =
        FakeNvml::new(&format!("driver_version = \"470.256.02\"\n{}", gpu("Tesla V100-SXM2-32GB", "")));
    let err = NvmlBackend::open_at(&fake.library()).expect_err("too old");
    assert!(matches!(err, GpuError::DriverTooOld { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the NVIDIA driver is too old (version 470.256.02); Gantry needs driver 510 or newer"
    );
}

#[test]
fn a_library_without_a_running_driver_or_permission_gives_the_typed_error() {
    let fake = FakeNvml::new("init_error = \"driver_not_loaded\"");
    assert!(matches!(NvmlBackend::open_at(&fake.library()), Err(GpuError::DriverNotLoaded)));
    let fake = FakeNvml::new("init_error = \"no_permission\"");
    assert!(matches!(NvmlBackend::open_at(&fake.library()), Err(GpuError::NoPermission)));
}

#[test]
fn a_library_path_with_nothing_there_is_library_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("libnvidia-ml.so.1");
    match NvmlBackend::open_at(&missing) {
        Err(GpuError::LibraryNotFound { detail }) => {
            assert!(detail.contains("libnvidia-ml.so.1"), "{detail}")
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
}

#[test]
fn xid_and_ecc_events_come_out_of_poll_events_once_with_their_kind() {
    let fake = FakeNvml::new(&format!(
        "clock = \"file\"\n{}",
        gpu(
            "NVIDIA H200",
            "[[gpu.event]]\nat_s = 1\nxid = 48\n[[gpu.event]]\nat_s = 2\necc = \"double_bit\""
        ),
    ));
    let mut b = open(&fake);
    assert!(b.poll_events(Duration::ZERO).expect("poll").is_empty());
    fake.set_time(2.0);
    let kinds: Vec<GpuEventKind> =
        b.poll_events(secs(2.0)).expect("poll").into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [GpuEventKind::Xid(48), GpuEventKind::DoubleBitEcc]);
    assert!(b.poll_events(secs(2.0)).expect("poll").is_empty());
}
