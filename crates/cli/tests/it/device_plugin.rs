//! `gantry device-plugin` against an independent kubelet: `fake_kubelet.py`, a Python grpcio
//! program generated from the same `.proto` at test time, drives the real binary, which reads
//! its GPUs through the real NVML adapter from the fake libnvidia-ml. The fake's clock is a
//! file, so the fatal XID fires exactly when the fake kubelet moves it.
//!
//! Needs python3 with `grpcio` and `grpcio-tools` (`scripts/test.sh` installs them). Without
//! them the test says so loudly and passes, unless `GANTRY_REQUIRE_PEER_TESTS=1` (set by
//! `scripts/test.sh` once the install worked) or `CI` is set, where it fails.

use crate::fake_nvml::FakeNvml;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GIB: u64 = 1 << 30;
const UUIDS: [&str; 4] = [
    "GPU-0d0c0b0a-0000-4000-8000-000000000000",
    "GPU-0d0c0b0a-0000-4000-8000-000000000001",
    "GPU-0d0c0b0a-0000-4000-8000-000000000002",
    "GPU-0d0c0b0a-0000-4000-8000-000000000003",
];

/// Four GPUs: 1 and 2 joined by four NVLinks; GPU 0 gets XID 79 at fake time 10 s; GPU 3 (4 GiB)
/// is the one offered as memory slices.
fn scenario() -> String {
    let mut s = String::from("clock = \"file\"\n");
    for (i, uuid) in UUIDS.iter().enumerate() {
        let bus = format!("00000000:{:02X}:00.0", 0x18 + i);
        let peers = match i {
            1 => {
                r#"nvlink_peers = ["00000000:1A:00.0", "00000000:1A:00.0", "00000000:1A:00.0", "00000000:1A:00.0"]"#
            }
            2 => {
                r#"nvlink_peers = ["00000000:19:00.0", "00000000:19:00.0", "00000000:19:00.0", "00000000:19:00.0"]"#
            }
            _ => "",
        };
        let mem = if i == 3 { 4 * GIB } else { 80 * GIB };
        s += &format!(
            "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"{uuid}\"\npci_bus_id = \"{bus}\"\n\
             memory_total_bytes = {mem}\n{peers}\n[[gpu.reading]]\ngpu_util_percent = 0\n"
        );
        if i == 0 {
            s += "[[gpu.event]]\nat_s = 10\nxid = 79\n";
        }
    }
    s
}

fn python_grpc_available() -> bool {
    Command::new("python3")
        .args(["-c", "import grpc, grpc_tools.protoc"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sigterm(child: &Child) {
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill runs");
    assert!(status.success(), "kill -TERM failed");
}

#[test]
fn the_device_plugin_serves_an_independent_kubelet_through_health_flips_allocation_and_a_kubelet_restart() {
    if !python_grpc_available() {
        let msg = "python3 with grpcio and grpcio-tools is not available: the device plugin's \
                   independent-peer test did NOT run (pip install grpcio grpcio-tools)";
        let required = std::env::var("GANTRY_REQUIRE_PEER_TESTS").as_deref() == Ok("1");
        assert!(!required && std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
        return;
    }
    let fake = FakeNvml::new(&scenario());
    let dir = tempfile::tempdir().expect("a kubelet directory");
    let kubelet_dir = dir.path().join("device-plugins");
    std::fs::create_dir(&kubelet_dir).expect("mkdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let spec = serde_json::json!({
        "proto": root.join("crates/k8s/proto/deviceplugin_v1beta1.proto"),
        "dir": kubelet_dir,
        "clock": fake.dir().join("fake-nvml.now"),
        "xid_at": 10,
        "whole": &UUIDS[..3],
        "nvlink_pair": [UUIDS[1], UUIDS[2]],
        "slice_uuid": UUIDS[3],
        "slice_index": 3,
        "slice_mib": 4096,
    });
    // The kubelet first, as on a node: the plugin finds kubelet.sock when it starts.
    let mut kubelet = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fake_kubelet.py"))
        .arg(spec.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 runs");
    let plugin = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["device-plugin", "--backend", "nvml", "--kubelet-dir"])
        .arg(&kubelet_dir)
        .args([
            "--slice-gpus",
            "3",
            "--interval-ms",
            "100",
            "--quiet-period-s",
            "2",
            "--probe-backoff-s",
            "1",
        ])
        .args(["--kubelet-poll-ms", "100"])
        .env("LD_LIBRARY_PATH", fake.dir())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("gantry device-plugin starts");
    let mut plugin = Plugin(plugin);
    let out = BufReader::new(kubelet.stdout.take().expect("piped"));
    let mut lines = Vec::new();
    for line in out.lines() {
        let line = line.expect("utf-8 output");
        eprintln!("{line}");
        lines.push(line);
    }
    let status = kubelet.wait().expect("the fake kubelet ends");
    assert!(
        status.success() && lines.iter().any(|l| l.contains("ALL CHECKS PASSED")),
        "the fake kubelet failed:\n{}",
        lines.join("\n")
    );
    assert!(lines.iter().filter(|l| l.contains(": ok: ")).count() >= 20, "too few checks ran");

    // SIGTERM: a clean exit that leaves no socket behind.
    assert!(plugin.0.try_wait().expect("wait").is_none(), "the plugin exited before SIGTERM");
    sigterm(&plugin.0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = plugin.0.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "the plugin did not exit within 30 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "the plugin exited with {status} on SIGTERM");
    for sock in ["gantry-gpu.sock", "gantry-gpu-memory.sock"] {
        assert!(!kubelet_dir.join(sock).exists(), "{sock} left behind after SIGTERM");
    }
}

#[test]
fn the_device_plugin_refuses_a_missing_kubelet_dir_and_an_unknown_slice_gpu() {
    let out = crate::gantry(&[
        "device-plugin",
        "--backend",
        "simulated",
        "--simulated-gpus",
        "2xT4",
        "--kubelet-dir",
        "/nonexistent/device-plugins",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is not a directory"), "{err}");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path");
    let out = crate::gantry(&[
        "device-plugin",
        "--backend",
        "simulated",
        "--simulated-gpus",
        "2xT4",
        "--kubelet-dir",
        d,
        "--slice-gpus",
        "7",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--slice-gpus names GPU 7"), "{err}");
}
