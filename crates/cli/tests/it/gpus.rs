//! `gantry gpus`.

use crate::{gantry, nvml_present};

#[test]
fn gpus_with_the_nvml_backend_and_no_driver_says_so_in_one_sentence_and_exits_non_zero() {
    if nvml_present() {
        assert!(gantry(&["gpus", "--backend", "nvml"]).status.success());
        return;
    }
    let out = gantry(&["gpus", "--backend", "nvml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.starts_with("error: the NVIDIA library was not found"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line, no backtrace: {err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn gpus_prints_the_simulated_fleet_as_a_table() {
    let out = gantry(&["gpus", "--simulated-gpus", "2xA100-80GB,1xT4", "--backend", "simulated"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert_eq!(
        text,
        "backend simulated, driver 550.90.07\n\
         GPU  MODEL                    PCI            UTIL%        MEMORY MiB  TEMP POWER W HEALTH     FINDINGS\n\
         0    NVIDIA A100-SXM4-80GB    0000:18:00.0       0           0/81920    31      56 healthy    -\n\
         1    NVIDIA A100-SXM4-80GB    0000:2A:00.0       0           0/81920    31      56 healthy    -\n\
         2    Tesla T4                 0000:3A:00.0       0           0/15360    31      10 healthy    -\n"
    );
}

#[test]
fn gpus_json_carries_inventory_samples_health_and_processes_from_a_fleet_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("fleet.toml");
    let toml = "seed = 4\ngpus = \"2xH100\"\n[[process]]\ngpu = 1\npid = 777\njob = \"train-9\"\nmemory_mib = 78000\nutil = { kind = \"steady\", percent = 70 }\n";
    std::fs::write(&file, toml).expect("write fleet");
    let out = gantry(&[
        "gpus",
        "--backend",
        "simulated",
        "--simulated-gpus",
        file.to_str().expect("utf-8 path"),
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["gpus"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["gpus"][1]["health"], "healthy");
    assert_eq!(v["gpus"][1]["findings"][0]["kind"], "memory_near_limit");
    assert_eq!(v["processes"][0]["pid"], 777);
    assert_eq!(v["processes"][0]["job_id"], "train-9");
}

#[test]
fn bad_flags_are_one_sentence_errors() {
    for (args, words) in [
        (&["gpus", "--backend", "simulated"][..], "--backend simulated needs --simulated-gpus"),
        (&["gpus", "--simulated-gpus", "3xZ9"][..], "unknown GPU model"),
        (
            &["gpus", "--backend", "nvml", "--simulated-gpus", "H100"][..],
            "cannot be used with --backend nvml",
        ),
    ] {
        let out = gantry(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(words) && err.lines().count() == 1, "{args:?}: {err}");
    }
}

mod fake_nvml_binary {
    //! The shipped binary on the real NVML adapter: `LD_LIBRARY_PATH` pointing at the fake
    //! libnvidia-ml, as `scripts/fake-nvml.sh` sets it up, with the default two-H200 scenario.

    use crate::fake_nvml as fake;
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    fn with_fake(fake: &fake::FakeNvml, args: &[&str]) -> Command {
        let mut cmd = Command::new(crate::harness::GANTRY);
        cmd.args(args).env("LD_LIBRARY_PATH", fake.dir()).env("RUST_LOG", "warn");
        cmd
    }

    #[test]
    fn gpus_reads_the_fake_h200s_through_the_nvml_adapter_in_gantry_units() {
        let fake = fake::FakeNvml::new(include_str!("../../../fake-nvml/scenarios/h200.toml"));
        let out = with_fake(&fake, &["gpus", "--backend", "nvml", "-o", "json"]).output().expect("run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["backend"], "nvml");
        let gpus = v["gpus"].as_array().expect("gpus");
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0]["info"]["name"], "NVIDIA H200");
        assert_eq!(gpus[0]["info"]["memory_total_bytes"], 150_754_820_096u64);
    }

    #[test]
    fn the_exporter_serves_dcgm_metrics_from_the_fake_library() {
        let fake = fake::FakeNvml::new(include_str!("../../../fake-nvml/scenarios/h200.toml"));
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        let listen = format!("127.0.0.1:{port}");
        let mut child =
            with_fake(&fake, &["exporter", "--backend", "nvml", "--listen", &listen, "--interval-ms", "200"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start the exporter");
        let deadline = Instant::now() + Duration::from_secs(20);
        let body = loop {
            let mut body = String::new();
            if let Ok(mut c) = std::net::TcpStream::connect(&listen) {
                let _ = c.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
                let _ = c.read_to_string(&mut body);
            }
            if body.contains("DCGM_FI_DEV_POWER_USAGE{") || Instant::now() > deadline {
                break body;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let _ = child.kill();
        let _ = child.wait();
        for name in
            ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"]
        {
            assert!(body.contains(&format!("{name}{{")), "{name} missing:\n{body}");
        }
        assert!(body.contains("modelName=\"NVIDIA H200\""), "{body}");
    }
}
