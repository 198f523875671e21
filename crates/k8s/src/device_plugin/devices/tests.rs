use super::*;

fn gpu(index: u32, mib: u64, peers: &[&str]) -> GpuInfo {
    GpuInfo {
        index,
        uuid: format!("GPU-{index:04}"),
        name: "NVIDIA H100".to_owned(),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
        memory_total_bytes: mib * MIB,
        power_limit_watts: None,
        max_sm_clock_mhz: None,
        nvlink_peers: peers.iter().map(|p| (*p).to_owned()).collect(),
        mig_enabled: false,
    }
}

/// GPUs 0–2 whole (1 and 2 joined by NVLink), GPU 3 offered as 16 MiB of slices.
fn node() -> Devices {
    let inv = [
        gpu(0, 16, &[]),
        gpu(1, 16, &["00000000:1A:00.0"]),
        gpu(2, 16, &["00000000:19:00.0"]),
        gpu(3, 16, &[]),
    ];
    Devices::new(&inv, &[3]).expect("valid slice list")
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn each_gpu_is_offered_one_way_whole_by_uuid_or_sliced_by_mib() {
    let d = node();
    assert_eq!(d.resources(), [Resource::Gpu, Resource::GpuMemory]);
    let whole: Vec<String> = d.list(Resource::Gpu, &[true; 4]).into_iter().map(|d| d.id).collect();
    assert_eq!(whole, ["GPU-0000", "GPU-0001", "GPU-0002"]);
    let mem = d.list(Resource::GpuMemory, &[true; 4]);
    assert_eq!(mem.len(), 16);
    assert_eq!((mem[0].id.as_str(), mem[15].id.as_str()), ("3-0", "3-15"));
    assert!(Devices::new(&[gpu(0, 16, &[])], &[0]).expect("valid").resources() == [Resource::GpuMemory]);
}

#[test]
fn an_unhealthy_gpu_lists_all_its_devices_unhealthy_and_they_come_back() {
    let d = node();
    let health = |h: &[bool], r| d.list(r, h).into_iter().map(|d| d.health).collect::<Vec<_>>();
    assert_eq!(health(&[false, true, true, true], Resource::Gpu), [UNHEALTHY, HEALTHY, HEALTHY]);
    assert!(health(&[true, true, true, false], Resource::GpuMemory).iter().all(|h| h == UNHEALTHY));
    assert!(health(&[true; 4], Resource::GpuMemory).iter().all(|h| h == HEALTHY));
}

#[test]
fn allocate_names_the_gpus_by_uuid_for_the_runtime_and_for_cuda() {
    let r = node().allocate(Resource::Gpu, &ids(&["GPU-0002", "GPU-0000"]), &[true; 4]).expect("allocated");
    assert_eq!(r.envs[ENV_NVIDIA_VISIBLE_DEVICES], "GPU-0000,GPU-0002");
    assert_eq!(r.envs[ENV_CUDA_VISIBLE_DEVICES], "GPU-0000,GPU-0002");
    assert!(!r.envs.contains_key(ENV_MEMORY_LIMIT_MIB));
}

#[test]
fn a_slice_gets_its_gpu_and_its_memory_limit() {
    let r =
        node().allocate(Resource::GpuMemory, &ids(&["3-0", "3-1", "3-7"]), &[true; 4]).expect("allocated");
    assert_eq!(r.envs[ENV_NVIDIA_VISIBLE_DEVICES], "GPU-0003");
    assert_eq!(r.envs[ENV_MEMORY_LIMIT_MIB], "3");
    assert_eq!(r.envs[ENV_MPS_MEMORY_LIMIT], "0=3M");
}

#[test]
fn allocate_refuses_unknown_unhealthy_and_cross_resource_devices() {
    let d = node();
    let all = [true; 4];
    let unknown =
        |r: Resource, id: &str| DeviceError::UnknownDevice { resource: r.name(), id: id.to_owned() };
    assert_eq!(d.allocate(Resource::Gpu, &ids(&["GPU-0003"]), &all), Err(unknown(Resource::Gpu, "GPU-0003")));
    for bad in ["3-16", "0-1", "3", "x-1", "3--1", ""] {
        assert_eq!(
            d.allocate(Resource::GpuMemory, &ids(&[bad]), &all),
            Err(unknown(Resource::GpuMemory, bad))
        );
    }
    assert_eq!(
        d.allocate(Resource::Gpu, &ids(&["GPU-0001"]), &[true, false, true, true]),
        Err(DeviceError::Unhealthy("GPU-0001".to_owned()))
    );
    assert_eq!(d.allocate(Resource::Gpu, &[], &all), Err(DeviceError::Empty));
}

#[test]
fn a_slice_spanning_two_gpus_is_refused() {
    let inv = [gpu(0, 4, &[]), gpu(1, 4, &[])];
    let d = Devices::new(&inv, &[0, 1]).expect("valid");
    assert_eq!(
        d.allocate(Resource::GpuMemory, &ids(&["0-0", "1-0"]), &[true, true]),
        Err(DeviceError::SliceSpansGpus(vec![0, 1]))
    );
}

#[test]
fn preferred_whole_gpus_follow_blocks_then_nvlink() {
    let d = node();
    let avail = ids(&["GPU-0000", "GPU-0001", "GPU-0002"]);
    assert_eq!(d.preferred(Resource::Gpu, &avail, &[], 2).expect("choice"), ["GPU-0000", "GPU-0001"]);
    assert_eq!(
        d.preferred(Resource::Gpu, &avail, &ids(&["GPU-0002"]), 2).expect("choice"),
        ["GPU-0001", "GPU-0002"]
    );
    assert!(d.preferred(Resource::Gpu, &avail, &[], 4).is_err());
}

#[test]
fn preferred_slice_units_all_come_from_the_best_fitting_gpu() {
    let inv = [gpu(0, 8, &[]), gpu(1, 8, &[])];
    let d = Devices::new(&inv, &[0, 1]).expect("valid");
    // GPU 0 has 8 MiB available, GPU 1 only 4 (the rest is held by other pods): best fit is GPU 1.
    let avail = ids(&["0-0", "0-1", "0-2", "0-3", "0-4", "0-5", "0-6", "0-7", "1-4", "1-5", "1-6", "1-7"]);
    assert_eq!(d.preferred(Resource::GpuMemory, &avail, &[], 3).expect("choice"), ["1-4", "1-5", "1-6"]);
    assert_eq!(d.preferred(Resource::GpuMemory, &avail, &[], 6).expect("choice").len(), 6);
    assert!(
        d.preferred(Resource::GpuMemory, &avail, &[], 6).expect("choice").iter().all(|i| i.starts_with("0-"))
    );
    assert_eq!(d.preferred(Resource::GpuMemory, &avail, &ids(&["0-7"]), 2).expect("choice"), ["0-7", "0-0"]);
    assert_eq!(d.preferred(Resource::GpuMemory, &avail, &[], 9), Err(DeviceError::NoGpuHolds(9)));
}

#[test]
fn slicing_a_gpu_the_node_lacks_is_a_clear_error() {
    assert_eq!(Devices::new(&[gpu(0, 8, &[])], &[5]).err(), Some(DeviceError::UnknownSliceGpu(5)));
}

#[test]
fn a_slice_list_the_kubelet_could_not_receive_is_refused_at_start() {
    // "Unhealthy" is longer than "Healthy": check_message_size measures the longer list.
    let h200 = 143_771;
    assert!(
        Devices::new(&[gpu(0, h200, &[]), gpu(1, h200, &[])], &[0])
            .expect("valid")
            .check_message_size()
            .is_ok()
    );
    let err =
        Devices::new(&[gpu(0, h200, &[]), gpu(1, h200, &[])], &[0, 1]).expect("valid").check_message_size();
    assert!(matches!(err, Err(DeviceError::TooManySliceDevices { devices: 287_542, .. })), "{err:?}");
}
