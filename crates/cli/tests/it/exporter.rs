//! `gantry exporter`: serves a simulated fleet, and the benchmark mode runs end to end.

use crate::gantry;
use gantry_agent::exporter::client;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_exporter_serves_dcgm_metrics_for_a_simulated_fleet_on_the_listen_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let listen = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args([
            "exporter",
            "--backend",
            "simulated",
            "--simulated-gpus",
            "8xH100",
            "--listen",
            &listen,
            "--interval-ms",
            "100",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("exporter starts");
    let _guard = Killed(child);
    let addr = listen.parse().expect("addr");
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        match client::get(addr, "/metrics", Duration::from_secs(2)) {
            Ok(r) if r.body.contains("DCGM_FI_DEV_GPU_UTIL{") => break r.body,
            _ => {
                assert!(Instant::now() < deadline, "exporter never served metrics");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert_eq!(body.matches("DCGM_FI_DEV_GPU_UTIL{").count(), 8);
    assert!(body.contains("modelName=\"NVIDIA H100 80GB HBM3\""));
    assert_eq!(client::get(addr, "/healthz", Duration::from_secs(2)).expect("healthz").status, 200);
}

#[test]
fn the_exporter_refuses_auto_without_nvml_or_a_simulated_fleet() {
    if crate::nvml_present() {
        return;
    }
    let out = gantry(&["exporter", "--listen", "127.0.0.1:0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("pass --simulated-gpus"), "{err}");
}

#[test]
fn the_benchmark_reports_memory_and_scrape_latency() {
    let out = gantry(&["bench", "exporter", "--seconds", "1", "--scrapes", "50", "--processes", "20"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("RSS after 1 s:") && text.contains("over 50 scrapes") && text.contains("p99"),
        "{text}"
    );
}

fn python_grpc_available() -> bool {
    Command::new("python3")
        .args(["-c", "import grpc, grpc_tools.protoc"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Against an independent kubelet (Python grpcio, compiled from the same upstream proto): GPU 0
/// is held by one container (a `gantry.dev/gpu-memory` slice of it), GPU 1 by one container
/// (`nvidia1` under `nvidia.com/gpu`), GPU 2 by two time-slicing replicas of two pods, GPU 3 by
/// nobody, and one pod asked for no device.
#[test]
fn the_exporter_labels_gpu_series_with_the_pod_the_kubelet_says_holds_the_gpu() {
    if !python_grpc_available() {
        let msg = "python3 with grpcio and grpcio-tools is not available: the exporter's pod-resources \
                   independent-peer test did NOT run (pip install grpcio grpcio-tools)";
        let required = std::env::var("GANTRY_REQUIRE_PEER_TESTS").as_deref() == Ok("1");
        assert!(!required && std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("kubelet.sock");
    let dev = |resource: &str, ids: &[&str]| serde_json::json!({"resource": resource, "ids": ids});
    let pods = serde_json::json!([
        {"namespace": "inference", "name": "serve-0", "containers": [
            {"name": "model", "devices": [dev("gantry.dev/gpu-memory", &["0-0", "0-1"])]},
            {"name": "proxy"}]},
        {"namespace": "ml", "name": "train-1", "containers": [
            {"name": "trainer", "devices": [dev("nvidia.com/gpu", &["nvidia1"])]}]},
        {"namespace": "ml", "name": "share-a", "containers": [
            {"name": "c", "devices": [dev("nvidia.com/gpu", &["nvidia2::0"])]}]},
        {"namespace": "ml", "name": "share-b", "containers": [
            {"name": "c", "devices": [dev("nvidia.com/gpu", &["nvidia2::1"])]}]},
        {"namespace": "kube-system", "name": "coredns", "containers": [{"name": "coredns"}]},
    ]);
    let mut kubelet = Command::new("python3")
        .arg(root.join("tests/it/fake_pod_resources.py"))
        .arg(root.join("../k8s/proto/podresources_v1.proto"))
        .arg(&socket)
        .arg(pods.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 runs");
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(kubelet.stdout.take().expect("piped")),
        &mut ready,
    )
    .expect("fake kubelet output");
    let _kubelet = Killed(kubelet);
    assert_eq!(ready.trim(), "ready", "fake kubelet did not start");

    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let listen = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["exporter", "--backend", "simulated", "--simulated-gpus", "4xH100", "--listen", &listen])
        .args(["--interval-ms", "100", "--pod-resources-interval-s", "1", "--pod-resources-socket"])
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("exporter starts");
    let _exporter = Killed(child);
    let addr = listen.parse().expect("addr");
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        match client::get(addr, "/metrics", Duration::from_secs(2)) {
            Ok(r) if r.body.contains("pod=\"train-1\"") && r.body.contains("pod=\"serve-0\"") => {
                break r.body;
            }
            _ => {
                assert!(Instant::now() < deadline, "the exporter never labelled GPUs with pods");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    let util: Vec<&str> = body.lines().filter(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{")).collect();
    assert_eq!(util.len(), 4, "{body}");
    let line = |gpu: u32| {
        let tag = format!("{{gpu=\"{gpu}\",");
        util.iter().find(|l| l.contains(&tag)).unwrap_or_else(|| panic!("GPU {gpu}: {body}"))
    };
    assert!(line(0).contains(",container=\"model\",namespace=\"inference\",pod=\"serve-0\"}"), "{}", line(0));
    assert!(line(1).contains(",container=\"trainer\",namespace=\"ml\",pod=\"train-1\"}"), "{}", line(1));
    for gpu in [2, 3] {
        assert!(!line(gpu).contains("pod=") && !line(gpu).contains("namespace="), "{}", line(gpu));
    }
    assert!(!body.contains("coredns") && !body.contains("proxy"), "{body}");
}

#[test]
fn exporter_pod_logs_dir_without_the_pod_resources_socket_is_refused_by_the_parser() {
    let out = gantry(&["exporter", "--pod-logs-dir", "/var/log/pods"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pod-resources-socket"));
}
