//! GPUs are never over-allocated: whole GPUs are exclusive, slices share by memory.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::harness::Cluster;

/// Polls the job list until every job is terminal; returns the most GPUs held at once and the
/// most jobs active at once.
fn watch_until_done(cluster: &Cluster, expected: usize) -> (usize, usize, Vec<serde_json::Value>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut most_gpus, mut most_jobs) = (0, 0);
    loop {
        let jobs = cluster.jobs();
        let active: Vec<&serde_json::Value> =
            jobs.iter().filter(|j| j["state"] == "running" || j["state"] == "scheduled").collect();
        let gpus: usize = active.iter().map(|j| j["gpu_uuids"].as_array().map_or(0, Vec::len)).sum();
        most_gpus = most_gpus.max(gpus);
        most_jobs = most_jobs.max(active.len());
        let done = jobs.iter().filter(|j| j["state"] == "succeeded").count();
        if done == expected {
            return (most_gpus, most_jobs, jobs);
        }
        assert!(Instant::now() < deadline, "jobs did not all finish: {jobs:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn five_two_gpu_jobs_on_four_gpus_never_hold_more_than_four_and_all_finish() {
    let cluster = Cluster::start(&["--simulated-gpus", "4xA100-80GB"]);
    for _ in 0..5 {
        cluster.gantry(&["submit", "--gpus", "2", "--", "sleep", "1.5"]);
    }
    let (most_gpus, most_jobs, _) = watch_until_done(&cluster, 5);
    assert!(most_gpus <= 4, "{most_gpus} GPUs were held at once");
    assert!(most_jobs <= 2, "{most_jobs} two-GPU jobs ran at once");
    assert!(most_jobs >= 1);
    cluster.assert_no_double_allocation();
}

#[test]
fn twenty_gigabyte_slices_share_one_eighty_gigabyte_gpu_four_at_a_time() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let script = "echo \"$CUDA_VISIBLE_DEVICES $GANTRY_GPU_MEMORY_LIMIT_MIB $GANTRY_JOB_ID\"; sleep 2";
    for _ in 0..6 {
        cluster.gantry(&["submit", "--gpu-memory", "20000", "--", "sh", "-c", script]);
    }
    let (_, most_jobs, jobs) = watch_until_done(&cluster, 6);
    assert_eq!(most_jobs, 4, "four slices of 20000 MiB fit an 80 GB GPU");
    let gpus: HashSet<String> =
        jobs.iter().map(|j| j["gpu_uuids"][0].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(gpus.len(), 1);
    let id = jobs[0]["id"].to_string();
    let gpu = gpus.iter().next().cloned().unwrap_or_default();
    assert_eq!(cluster.gantry(&["logs", &id]), format!("{gpu} 20000 {id}\n"));
    cluster.assert_no_double_allocation();
}

#[test]
fn slices_pack_onto_one_gpu_and_leave_the_other_gpus_idle() {
    let cluster = Cluster::start(&["--simulated-gpus", "4xA100-80GB"]);
    for _ in 0..4 {
        cluster.gantry(&["submit", "--gpu-memory", "20000", "--", "sleep", "1"]);
    }
    let (_, _, jobs) = watch_until_done(&cluster, 4);
    let gpus: HashSet<String> =
        jobs.iter().map(|j| j["gpu_uuids"][0].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(gpus.len(), 1, "four 20 GB slices fit one 80 GB GPU: {jobs:#?}");
    cluster.assert_no_double_allocation();
}
