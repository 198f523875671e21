//! `gantry bench pass`: the JSON a script reads, and a clear refusal of a fleet of nothing.

use crate::gantry;

#[test]
fn bench_pass_prints_the_full_pass_beside_the_incremental_ones() {
    let out = gantry(&[
        "bench",
        "pass",
        "--pending",
        "40",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--rounds",
        "1",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["pending"], 40, "{v}");
    for key in [
        "full_pass_s",
        "full_reload_s",
        "idle_pass_s",
        "timed_pass_s",
        "change_pass_s",
        "job_counts_s",
        "job_counts_scan_s",
    ] {
        assert!(v[key].as_f64().is_some_and(|s| s >= 0.0), "{key} in {v}");
    }
    for key in ["idle_ratio", "timed_ratio", "change_ratio", "job_counts_ratio"] {
        assert!(v[key].as_f64().is_some_and(f64::is_finite), "{key} in {v}");
    }
}

#[test]
fn bench_pass_refuses_a_fleet_without_gpus() {
    let out = gantry(&["bench", "pass", "--nodes", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be positive"), "{out:?}");
}

#[test]
fn bench_start_times_jobs_from_submission_to_running_and_prints_percentiles() {
    let out = gantry(&["bench", "start", "--jobs", "3", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["jobs"], 3, "{v}");
    let (p50, p90, p99) = (v["p50_s"].as_f64(), v["p90_s"].as_f64(), v["p99_s"].as_f64());
    let (p50, p90, p99) = (p50.expect("p50_s"), p90.expect("p90_s"), p99.expect("p99_s"));
    assert!(0.0 < p50 && p50 <= p90 && p90 <= p99, "{v}");
}
