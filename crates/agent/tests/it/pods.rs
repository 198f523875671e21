//! Kubernetes attribution in the text output: pod labels on the series of a GPU one container
//! holds, none on a shared GPU, and the pod UID of each process from its cgroup.

use crate::support::parse;
use gantry_agent::exporter::ExporterConfig;
use gantry_agent::exporter::pods::{PodCell, PodMap, PodRef};
use gantry_agent::exporter::sampler::Publisher;
use gantry_gpu::findings::FindingsConfig;
use gantry_gpu::health::HealthConfig;
use gantry_gpu::{Collector, FleetSpec, SimulatedBackend, UtilProfile};
use std::sync::Arc;
use std::time::Duration;

fn holder(pod: &str) -> PodRef {
    PodRef { namespace: "ml".into(), pod: pod.into(), container: "trainer".into() }
}

#[test]
fn gpu_series_carry_the_holding_pod_and_process_series_their_pod_uid() {
    let backend = SimulatedBackend::new(&FleetSpec::parse("3xH100", 11).expect("spec")).expect("fleet");
    let fleet = backend.handle();
    let uuids: Vec<String> = fleet.gpus().iter().map(|g| g.uuid.clone()).collect();
    let steady = || UtilProfile::Steady { percent: 50.0 };
    fleet.start_process(0, 5001, None, 1000, steady()).expect("start");
    fleet.start_process(1, 5002, None, 1000, steady()).expect("start");
    fleet.start_process(1, 5003, None, 1000, steady()).expect("start");

    let proc_root = tempfile::tempdir().expect("tempdir");
    let cgroup = |pid: u32, text: &str| {
        let dir = proc_root.path().join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("cgroup"), text).expect("cgroup");
    };
    // 5001: the GPU pod (systemd driver); 5002: a pod that asked for no GPU (cgroupfs driver);
    // 5003: not in a pod.
    cgroup(
        5001,
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod11111111_2222_3333_4444_555555555555.slice/cri-containerd-aa.scope\n",
    );
    cgroup(5002, "0::/kubepods/besteffort/podaaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee/bb\n");
    cgroup(5003, "0::/user.slice/user-1000.slice/session-1.scope\n");

    let cell = Arc::new(PodCell::new());
    let mut map = PodMap::default();
    map.add_uuid(&uuids[0], holder("train-0"));
    map.add_uuid(&uuids[1], holder("share-a"));
    map.add_index(1, holder("share-b"));
    cell.publish(map);

    let cfg = ExporterConfig {
        interval: Duration::from_secs(1),
        hostname: "node-1".into(),
        proc_root: proc_root.path().to_owned(),
        pods: Some(cell.clone()),
        pod_logs: None,
    };
    let mut publisher = Publisher::new(&cfg);
    let mut collector = Collector::new(Box::new(backend), HealthConfig::default(), FindingsConfig::default());
    let c = collector.collect(Duration::from_secs(1));
    publisher.record(c.as_ref(), Duration::from_millis(1));
    let body = publisher.cell().latest().body.clone();
    let (series, _) = parse(std::str::from_utf8(&body).expect("utf-8"));

    let gpu_series = |name: &str, gpu: &str| {
        series
            .iter()
            .find(|s| s.name == name && s.labels["gpu"] == gpu)
            .unwrap_or_else(|| panic!("{name} {gpu}"))
    };
    for name in ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "gantry_gpu_health_state"] {
        let s = gpu_series(name, "0");
        assert_eq!(s.labels.get("pod").map(String::as_str), Some("train-0"), "{name}");
        assert_eq!(s.labels.get("namespace").map(String::as_str), Some("ml"), "{name}");
        assert_eq!(s.labels.get("container").map(String::as_str), Some("trainer"), "{name}");
        // Shared by two pods: neither is named on the GPU's own series; nobody holds GPU 2.
        for gpu in ["1", "2"] {
            let s = gpu_series(name, gpu);
            assert!(!s.labels.contains_key("pod") && !s.labels.contains_key("namespace"), "{name} {gpu}");
        }
    }
    let process = |pid: &str| {
        series
            .iter()
            .find(|s| s.name == "gantry_gpu_process_memory_used_bytes" && s.labels["pid"] == pid)
            .unwrap_or_else(|| panic!("process {pid}"))
    };
    assert_eq!(process("5001").labels["pod_uid"], "11111111-2222-3333-4444-555555555555");
    // A process's pod is its own, not the GPU holder's: process series carry no holder labels.
    assert!(!process("5001").labels.contains_key("pod"));
    assert_eq!(process("5002").labels["pod_uid"], "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
    assert!(!process("5003").labels.contains_key("pod_uid"));

    // The kubelet's answer changes (the pod left): the next collection drops the labels.
    assert!(cell.publish(PodMap::default()));
    let c = collector.collect(Duration::from_secs(2));
    publisher.record(c.as_ref(), Duration::from_millis(1));
    let body = publisher.cell().latest().body.clone();
    let text = std::str::from_utf8(&body).expect("utf-8");
    assert!(!text.contains("pod=\""), "{text}");
}

#[test]
fn process_series_of_pods_without_gpus_are_named_from_the_kubelets_pod_log_directory() {
    let backend = SimulatedBackend::new(&FleetSpec::parse("1xH100", 11).expect("spec")).expect("fleet");
    let fleet = backend.handle();
    let steady = || UtilProfile::Steady { percent: 50.0 };
    for pid in [6001, 6002, 6003] {
        fleet.start_process(0, pid, None, 1000, steady()).expect("start");
    }
    let cid: String = std::iter::repeat_n('c', 64).collect();
    let proc_root = tempfile::tempdir().expect("tempdir");
    let cgroup = |pid: u32, text: &str| {
        let dir = proc_root.path().join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("cgroup"), text).expect("cgroup");
    };
    // 6001: container `worker` of a two-container pod (systemd driver, containerd);
    // 6002: a single-container pod (cgroupfs driver); 6003: a pod the directory does not list.
    cgroup(
        6001,
        &format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod11111111_2222_3333_4444_555555555555.slice/cri-containerd-{cid}.scope\n"
        ),
    );
    cgroup(6002, "0::/kubepods/besteffort/podaaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee/0123\n");
    cgroup(6003, "0::/kubepods/besteffort/pod99999999-bbbb-cccc-dddd-eeeeeeeeeeee/0123\n");
    // The kubelet's layout: /var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log and
    // /var/log/containers/<pod>_<namespace>_<container>-<id>.log.
    let logs = tempfile::tempdir().expect("tempdir");
    let pods = logs.path().join("pods");
    for dir in [
        "batch_etl-5_11111111-2222-3333-4444-555555555555/worker",
        "batch_etl-5_11111111-2222-3333-4444-555555555555/fetch",
        "web_api-0_aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee/api",
    ] {
        std::fs::create_dir_all(pods.join(dir)).expect("mkdir");
        std::fs::write(pods.join(dir).join("0.log"), "log line\n").expect("log");
    }
    std::fs::create_dir_all(logs.path().join("containers")).expect("mkdir");
    std::fs::write(logs.path().join("containers").join(format!("etl-5_batch_worker-{cid}.log")), "")
        .expect("link");

    let cfg = ExporterConfig {
        interval: Duration::from_secs(1),
        hostname: "node-1".into(),
        proc_root: proc_root.path().to_owned(),
        pods: Some(Arc::new(PodCell::new())),
        pod_logs: Some(pods),
    };
    let mut publisher = Publisher::new(&cfg);
    let mut collector = Collector::new(Box::new(backend), HealthConfig::default(), FindingsConfig::default());
    let c = collector.collect(Duration::from_secs(1));
    publisher.record(c.as_ref(), Duration::from_millis(1));
    let body = publisher.cell().latest().body.clone();
    let (series, _) = parse(std::str::from_utf8(&body).expect("utf-8"));
    let process = |pid: &str| {
        series
            .iter()
            .find(|s| s.name == "gantry_gpu_process_memory_used_bytes" && s.labels["pid"] == pid)
            .unwrap_or_else(|| panic!("process {pid}"))
    };
    let label = |pid: &str, k: &str| process(pid).labels.get(k).cloned();
    assert_eq!(label("6001", "pod_uid").as_deref(), Some("11111111-2222-3333-4444-555555555555"));
    assert_eq!(label("6001", "namespace").as_deref(), Some("batch"));
    assert_eq!(label("6001", "pod").as_deref(), Some("etl-5"));
    assert_eq!(label("6001", "container").as_deref(), Some("worker"));
    assert_eq!(label("6002", "namespace").as_deref(), Some("web"));
    assert_eq!(label("6002", "pod").as_deref(), Some("api-0"));
    assert_eq!(label("6002", "container").as_deref(), Some("api"));
    assert_eq!(label("6003", "pod_uid").as_deref(), Some("99999999-bbbb-cccc-dddd-eeeeeeeeeeee"));
    assert_eq!(label("6003", "pod"), None);
}
