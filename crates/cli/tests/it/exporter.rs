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
    let out = gantry(&[
        "exporter",
        "--bench",
        "--bench-seconds",
        "1",
        "--bench-scrapes",
        "50",
        "--bench-processes",
        "20",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("RSS after 1 s:") && text.contains("over 50 scrapes") && text.contains("p99"),
        "{text}"
    );
}
