//! The NVML backend. Without a driver it must fail with a typed error; with one (feature
//! `nvml-tests`, run by `scripts/gpu-check.sh` with `--ignored`) it must read real GPUs.

use gantry_gpu::{GpuError, NvmlBackend};
#[cfg(feature = "nvml-tests")]
use {gantry_gpu::GpuBackend, std::time::Duration};

#[test]
fn opening_nvml_without_the_library_is_a_typed_error_not_a_panic() {
    match NvmlBackend::open() {
        Err(GpuError::LibraryNotFound { detail }) => assert!(detail.contains("libnvidia-ml")),
        // A machine with a driver: nothing to check here; the ignored tests cover it.
        Ok(_) | Err(GpuError::DriverNotLoaded) => {}
        Err(other) => panic!("unexpected error: {other}"),
    }
}

#[cfg(feature = "nvml-tests")]
#[test]
#[ignore = "needs an NVIDIA GPU and driver; run by scripts/gpu-check.sh"]
fn nvml_lists_gpus_and_reads_every_one_of_them() {
    let mut b = NvmlBackend::open().expect("NVML opens on a GPU machine");
    assert!(!b.inventory().is_empty(), "no GPU found");
    assert!(!b.driver_version().is_empty());
    let gpus = b.inventory().to_vec();
    for g in &gpus {
        assert!(g.uuid.starts_with("GPU-") || g.uuid.starts_with("MIG-"), "{}", g.uuid);
        assert!(g.memory_total_bytes > 0 && !g.pci_bus_id.is_empty());
        let s = b.sample(g.index, Duration::ZERO).expect("sample");
        assert!(
            s.memory_used_bytes + s.memory_free_bytes + s.memory_reserved_bytes <= g.memory_total_bytes + 1
        );
        assert!(s.power_watts > Some(0.0) && s.gpu_temp_celsius > Some(0.0) && s.sm_clock_mhz > Some(0));
        println!("{g:?}\n{s:?}");
        b.probe(g.index, Duration::ZERO).expect("probe passes on a healthy GPU");
    }
    b.processes(Duration::ZERO).expect("process list");
    b.poll_events(Duration::ZERO).expect("event poll");
}

#[cfg(feature = "nvml-tests")]
#[test]
#[ignore = "needs a Hopper or newer GPU; run by scripts/gpu-check.sh"]
fn nvml_reads_tensor_pipe_activity_from_the_second_sample_on_hopper() {
    let mut b = NvmlBackend::open().expect("NVML opens");
    b.sample(0, Duration::ZERO).expect("first sample");
    std::thread::sleep(Duration::from_millis(200));
    let s = b.sample(0, Duration::from_millis(200)).expect("second sample");
    println!("gr={:?} tensor={:?} dram={:?}", s.gr_engine_active, s.tensor_active, s.dram_active);
    assert!(s.tensor_active.is_some(), "GPM tensor activity missing");
}
