//! A real Prometheus scrapes the exporter; NVIDIA's dashboard queries must all return data,
//! from the simulated fleet and from the NVML adapter reading the fake libnvidia-ml.
//!
//! Needs Debian's `prometheus` package (`scripts/test.sh` installs it). Without the binary the
//! test fails, unless `GANTRY_SKIP_PROMETHEUS=1` says to skip it.

use crate::fake_nvml::FakeNvml;
use crate::support::{Exporting, Running};
use gantry_agent::exporter::client;
use gantry_gpu::health::HealthConfig;
use gantry_gpu::{FaultKind, NvmlBackend, UtilProfile};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DASHBOARD: &str = "dcgm-exporter-dashboard.json";

/// Kills Prometheus when the test ends, panics included.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- prometheus log ---\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }
}

fn find_prometheus() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file());
    on_path.or_else(|| Some(PathBuf::from("/usr/bin/prometheus")).filter(|p| p.is_file()))
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    l.local_addr().expect("addr").port()
}

fn start_prometheus(bin: &Path, target: SocketAddr) -> Prometheus {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("prometheus.yml");
    let yaml = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: gantry\n    static_configs:\n      - targets: ['{target}']\n"
    );
    std::fs::write(&config, yaml).expect("write config");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let log = dir.path().join("prometheus.log");
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file");
    let child = Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address={addr}"))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("prometheus starts");
    Prometheus { child, addr, log, _dir: dir }
}

/// Result vector of an instant query.
fn query(p: &Prometheus, promql: &str) -> Vec<Value> {
    let path = format!("/api/v1/query?query={}", client::encode_query(promql));
    let Ok(r) = client::get(p.addr, &path, Duration::from_secs(5)) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
    assert_ne!(v["status"], "error", "query {promql} failed: {}", r.body);
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn scalar(p: &Prometheus, promql: &str) -> Option<f64> {
    let r = query(p, promql);
    r.first()?["value"][1].as_str()?.parse().ok()
}

fn wait_for(p: &Prometheus, what: &str, promql: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = scalar(p, promql).filter(|v| ok(*v)) {
            return v;
        }
        assert!(Instant::now() < deadline, "waited 60 s for {what} ({promql} = {:?})", scalar(p, promql));
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn dashboard_exprs() -> Vec<String> {
    let dir = env!("CARGO_MANIFEST_DIR");
    let ours = std::fs::read_to_string(format!("{dir}/tests/data/{DASHBOARD}")).expect("dashboard copy");
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => m.iter().for_each(|(k, v)| match (k.as_str(), v) {
                ("expr", Value::String(s)) => out.push(s.clone()),
                _ => walk(v, out),
            }),
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut exprs = Vec::new();
    walk(&serde_json::from_str(&ours).expect("dashboard JSON"), &mut exprs);
    exprs.iter().map(|e| e.replace("$instance", ".*").replace("$gpu", ".*")).collect()
}

/// The Prometheus binary, `None` when `GANTRY_SKIP_PROMETHEUS=1` says to skip without one.
fn prometheus_binary() -> Option<PathBuf> {
    let found = find_prometheus();
    if found.is_none() {
        if std::env::var("GANTRY_SKIP_PROMETHEUS").as_deref() == Ok("1") {
            eprintln!("GANTRY_SKIP_PROMETHEUS=1: skipping the real-Prometheus test");
            return None;
        }
        panic!(
            "the prometheus binary is not on PATH nor at /usr/bin/prometheus: run scripts/test.sh (installs it) or `apt-get install prometheus`, or set GANTRY_SKIP_PROMETHEUS=1 to skip"
        );
    }
    found
}

/// Unhealthy for 2.5 s (the first probe), then recovering until 5 s of quiet: long enough for
/// 1 s scrapes to see both states.
fn health() -> HealthConfig {
    HealthConfig {
        quiet_period: Duration::from_secs(5),
        probe_backoff_initial: Duration::from_millis(2500),
        ..HealthConfig::default()
    }
}

/// What every backend must show Prometheus once `trigger` makes GPU 1 report XID 79 and GPU 2
/// XID 13: the health changes, then data for every query and variable of NVIDIA's dashboard.
fn health_changes_and_the_dashboard(prom: &Prometheus, trigger: impl FnOnce()) {
    trigger();
    wait_for(prom, "GPU 1 unhealthy", r#"gantry_gpu_health_state{gpu="1"}"#, |v| v == 3.0);
    assert_eq!(scalar(prom, r#"DCGM_FI_DEV_XID_ERRORS{gpu="1"}"#), Some(79.0));
    wait_for(prom, "XID 13 counted", r#"gantry_gpu_xid_errors_total{gpu="2",xid="13"}"#, |v| v == 1.0);
    assert_eq!(
        scalar(prom, r#"gantry_gpu_health_state{gpu="2"}"#),
        Some(0.0),
        "XID 13 must not change health"
    );
    wait_for(prom, "GPU 1 healthy again", r#"gantry_gpu_health_state{gpu="1"}"#, |v| v == 0.0);
    assert_eq!(scalar(prom, r#"max_over_time(gantry_gpu_health_state{gpu="1"}[5m])"#), Some(3.0));
    assert_eq!(scalar(prom, r#"max_over_time(gantry_gpu_health_state{gpu="2"}[5m])"#), Some(0.0));

    let exprs = dashboard_exprs();
    assert!(exprs.iter().any(|e| e.contains("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")), "tensor panel present");
    for e in &exprs {
        let r = query(prom, e);
        assert!(!r.is_empty(), "dashboard query returned no data: {e}");
    }
    let tensor = query(prom, r#"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0"}"#);
    let t: f64 = tensor[0]["value"][1].as_str().and_then(|s| s.parse().ok()).expect("tensor value");
    assert!(t > 0.4, "tensor activity follows load: {t}");
    for label in ["instance", "gpu"] {
        let path = format!(
            "/api/v1/label/{label}/values?{}",
            client::encode_query("match[]").replace("%5B%5D", "[]") + "=DCGM_FI_DEV_GPU_TEMP"
        );
        let r = client::get(prom.addr, &path, Duration::from_secs(5)).expect("label values");
        let v: Value = serde_json::from_str(&r.body).expect("json");
        assert!(
            v["data"].as_array().is_some_and(|a| !a.is_empty()),
            "dashboard variable {label}: {}",
            r.body
        );
    }
}

#[test]
fn prometheus_scrapes_the_exporter_and_sees_load_health_changes_and_every_dashboard_query() {
    let Some(bin) = prometheus_binary() else {
        return;
    };
    let run = Running::start("4xH100", Duration::from_millis(200), health());
    run.fleet
        .start_process(0, 5001, Some("job-a".into()), 40_000, UtilProfile::Steady { percent: 80.0 })
        .expect("start");
    let prom = start_prometheus(&bin, run.addr);

    wait_for(&prom, "a successful scrape", r#"up{job="gantry"}"#, |v| v == 1.0);
    wait_for(&prom, "GPU 0 busy", r#"DCGM_FI_DEV_GPU_UTIL{gpu="0"}"#, |v| (77.0..=83.0).contains(&v));
    assert_eq!(scalar(&prom, r#"DCGM_FI_DEV_GPU_UTIL{gpu="1"}"#), Some(0.0));
    assert_eq!(scalar(&prom, r#"DCGM_FI_DEV_FB_USED{gpu="0"}"#), Some(40_000.0));
    assert_eq!(
        scalar(&prom, r#"gantry_gpu_process_memory_used_bytes{job_id="job-a",pid="5001"}"#),
        Some(40_000.0 * 1024.0 * 1024.0)
    );
    assert_eq!(scalar(&prom, r#"gantry_gpu_health_state{gpu="1"}"#), Some(0.0));

    health_changes_and_the_dashboard(&prom, || {
        run.fleet.inject_now(1, FaultKind::Xid(79)).expect("inject xid 79");
        run.fleet.inject_now(2, FaultKind::Xid(13)).expect("inject xid 13");
    });
}

/// Four H200s on the fake library, in NVML's units: GPU 0 runs pid 5001 (40,000 MiB) at 80 %
/// and 612.5 W, down to 250.5 W at 10 s; at 10 s GPU 1 reports XID 79 and GPU 2 XID 13.
fn nvml_scenario() -> String {
    let mut s = String::from("clock = \"file\"\n");
    for gpu in 0..4 {
        let (util, power_mw, tensor) = if gpu == 0 { (80, 612_500, 55.0) } else { (0, 70_000, 0.0) };
        s += &format!(
            "[[gpu]]\nname = \"NVIDIA H200\"\nmemory_total_bytes = 150754820096\npower_limit_mw = 700000\ngpm = true\n\
             [[gpu.reading]]\ngpu_util_percent = {util}\nmem_util_percent = 10\nsm_clock_mhz = 1410\n\
             mem_clock_mhz = 3201\npower_mw = {power_mw}\ngpu_temp_c = 64\nmemory_reserved_bytes = 644939776\n\
             pcie_tx_kb_per_s = 3000\npcie_rx_kb_per_s = 1000\ngpm_graphics_percent = {util}.0\n\
             gpm_tensor_percent = {tensor}\ngpm_dram_percent = 20.0\n"
        );
        s += match gpu {
            0 => {
                "[[gpu.reading]]\nat_s = 10\npower_mw = 250500\n[[gpu.process]]\npid = 5001\nused_memory_bytes = 41943040000\n"
            }
            1 => "[[gpu.event]]\nat_s = 10\nxid = 79\n",
            2 => "[[gpu.event]]\nat_s = 10\nxid = 13\n",
            _ => "",
        };
    }
    s
}

/// A `/proc/<pid>` whose environment names the job (what the exporter attributes by).
fn proc_entry(root: &Path, pid: u32, job: &str) {
    let dir = root.join(pid.to_string());
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("stat"), format!("{pid} (python) S 1 1 1 0")).expect("stat");
    std::fs::write(dir.join("environ"), format!("PATH=/bin\0GANTRY_JOB_ID={job}\0")).expect("environ");
    std::fs::write(dir.join("cgroup"), "0::/\n").expect("cgroup");
}

#[test]
fn prometheus_sees_the_same_through_the_nvml_adapter_on_the_fake_library_in_dcgm_units() {
    let Some(bin) = prometheus_binary() else {
        return;
    };
    let proc_root = tempfile::tempdir().expect("tempdir");
    proc_entry(proc_root.path(), 5001, "job-a");
    let fake = FakeNvml::new(&nvml_scenario());
    let backend = NvmlBackend::open_at(&fake.library()).expect("the adapter opens the fake library");
    let run =
        Exporting::start(Box::new(backend), Duration::from_millis(200), health(), proc_root.path().into());
    let prom = start_prometheus(&bin, run.addr);

    wait_for(&prom, "a successful scrape", r#"up{job="gantry"}"#, |v| v == 1.0);
    wait_for(&prom, "GPU 0 busy", r#"DCGM_FI_DEV_GPU_UTIL{gpu="0"}"#, |v| v == 80.0);
    assert_eq!(scalar(&prom, r#"DCGM_FI_DEV_GPU_UTIL{gpu="1"}"#), Some(0.0));
    // NVML's units in, dcgm-exporter's out: mW → W, bytes → MiB, KB/s → B/s.
    assert_eq!(scalar(&prom, r#"DCGM_FI_DEV_POWER_USAGE{gpu="0"}"#), Some(612.5));
    assert_eq!(scalar(&prom, r#"DCGM_FI_DEV_FB_USED{gpu="0"}"#), Some(40_000.0));
    assert_eq!(scalar(&prom, r#"DCGM_FI_DEV_FB_RESERVED{gpu="0"}"#), Some(615.0));
    assert_eq!(scalar(&prom, r#"DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0"}"#), Some(3000.0 * 1024.0));
    assert_eq!(scalar(&prom, r#"DCGM_FI_DEV_GPU_TEMP{gpu="0"}"#), Some(64.0));
    assert_eq!(
        scalar(&prom, r#"DCGM_FI_DEV_ENC_UTIL{gpu="0"}"#),
        None,
        "not scripted: not supported, no series"
    );
    assert_eq!(
        scalar(&prom, r#"gantry_gpu_process_memory_used_bytes{job_id="job-a",pid="5001"}"#),
        Some(40_000.0 * 1024.0 * 1024.0)
    );
    assert_eq!(scalar(&prom, r#"gantry_gpu_health_state{gpu="1"}"#), Some(0.0));

    health_changes_and_the_dashboard(&prom, || fake.set_time(10.0));
    wait_for(&prom, "GPU 0's power after the scripted change", r#"DCGM_FI_DEV_POWER_USAGE{gpu="0"}"#, |v| {
        v == 250.5
    });
}
