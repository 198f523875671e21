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
