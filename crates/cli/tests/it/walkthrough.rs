//! The README walkthrough, verbatim.

use std::time::Duration;

use crate::harness::{Cluster, eventually};

#[test]
fn the_readme_walkthrough_runs_a_job_on_one_gpu_and_prints_its_output() {
    let cluster = Cluster::start(&[]);
    let log = std::fs::read_to_string(cluster.home.path().join("up.log")).unwrap_or_default();
    let id =
        cluster.gantry(&["submit", "--gpus", "1", "--", "sh", "-c", "echo hello; sleep 2"]).trim().to_owned();
    assert!(id.parse::<i64>().is_ok(), "submit printed {id:?}");
    let running = eventually(Duration::from_secs(15), "the job to run", || {
        let jobs = cluster.jobs();
        jobs.into_iter().find(|j| j["id"].as_i64() == id.parse().ok() && j["state"] == "running")
    });
    let uuids = running["gpu_uuids"].as_array().expect("gpu_uuids");
    assert_eq!(uuids.len(), 1);
    assert!(uuids[0].as_str().unwrap_or_default().starts_with("GPU-"));
    eventually(Duration::from_secs(20), "the job to succeed", || {
        cluster.jobs().into_iter().find(|j| j["id"].as_i64() == id.parse().ok() && j["state"] == "succeeded")
    });
    assert_eq!(cluster.gantry(&["logs", &id]), "hello\n");
    assert_eq!(cluster.gantry(&["logs", "--follow", &id]), "hello\n");
    let up_log = std::fs::read_to_string(cluster.home.path().join("up.log")).expect("up log");
    assert!(
        up_log.contains("simulated fleet of 4xA100-80GB") || log.contains("NVML"),
        "gantry up should say it uses a simulated fleet:\n{up_log}"
    );
}

#[test]
fn a_second_gantry_up_on_the_same_data_dir_resumes_queued_jobs() {
    let mut cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let first = cluster.gantry(&["submit", "--gpus", "1", "--", "sleep", "30"]).trim().to_owned();
    let queued = cluster.gantry(&["submit", "--gpus", "1", "--", "echo", "resumed"]).trim().to_owned();
    eventually(Duration::from_secs(15), "the first job to run", || {
        cluster.jobs().into_iter().find(|j| j["id"].as_i64() == first.parse().ok() && j["state"] == "running")
    });
    cluster.gantry(&["cancel", &first]);
    cluster.kill();
    cluster.restart();
    eventually(Duration::from_secs(30), "the queued job to succeed after the restart", || {
        cluster
            .jobs()
            .into_iter()
            .find(|j| j["id"].as_i64() == queued.parse().ok() && j["state"] == "succeeded")
    });
    assert_eq!(cluster.gantry(&["logs", &queued]), "resumed\n");
    cluster.assert_no_double_allocation();
}

#[test]
fn cancelling_a_running_job_stops_its_process_group() {
    let cluster = Cluster::start(&["--grace", "1"]);
    let id = cluster
        .gantry(&["submit", "--gpus", "1", "--", "sh", "-c", "trap '' TERM; sleep 60 & wait"])
        .trim()
        .to_owned();
    eventually(Duration::from_secs(15), "the job to run", || {
        cluster.jobs().into_iter().find(|j| j["id"].as_i64() == id.parse().ok() && j["state"] == "running")
    });
    cluster.gantry(&["cancel", &id]);
    let job = eventually(Duration::from_secs(15), "the job to be cancelled", || {
        cluster.jobs().into_iter().find(|j| j["id"].as_i64() == id.parse().ok() && j["state"] == "cancelled")
    });
    assert!(job["finished_at"].is_number());
}

#[test]
fn client_errors_are_one_sentence_and_a_non_zero_exit() {
    let cluster = Cluster::start(&["--no-agent"]);
    let out = cluster.try_gantry(&["job", "999"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("job 999 not found"), "{err}");
    let data = cluster.data_dir().display().to_string();
    let out = cluster.try_gantry(&["up", "--listen", "127.0.0.1:0", "--no-agent", "--data-dir", &data]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is already using"));
    let out = crate::harness::command(cluster.home.path())
        .args(["jobs", "--server", "http://127.0.0.1:9"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach"));
}

#[test]
fn ctrl_c_with_stop_jobs_on_exit_stops_the_jobs_and_exits_cleanly() {
    let mut cluster = Cluster::start(&["--grace", "2", "--stop-jobs-on-exit"]);
    let marker = cluster.shared().join("still-running");
    let script = format!("touch {m}.started; sleep 3; touch {m}", m = marker.display());
    let id = cluster.gantry(&["submit", "--gpus", "1", "--", "sh", "-c", &script]).trim().to_owned();
    eventually(Duration::from_secs(15), "the job to run", || {
        cluster.jobs().into_iter().find(|j| j["id"].as_i64() == id.parse().ok() && j["state"] == "running")
    });
    let status = cluster.interrupt();
    assert!(status.success(), "gantry up exited with {status}");
    std::thread::sleep(Duration::from_secs(4));
    assert!(marker.with_extension("started").exists(), "the job ran");
    assert!(!marker.exists(), "the job's process outlived gantry up");
}

#[test]
fn gantry_up_serves_gpu_metrics_that_follow_the_jobs_it_runs() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", cluster.metrics_port).parse().expect("address");
    let scrape = || {
        gantry_agent::exporter::client::get(addr, "/metrics", Duration::from_secs(5))
            .map(|r| r.body)
            .unwrap_or_default()
    };
    let up_log = std::fs::read_to_string(cluster.home.path().join("up.log")).expect("up log");
    assert!(
        up_log.contains(&format!("GPU metrics (dcgm-exporter names) at http://{addr}/metrics")),
        "{up_log}"
    );
    let id = cluster.gantry(&["submit", "--gpus", "1", "--", "sleep", "30"]).trim().to_owned();
    let label = format!("job_id=\"{id}\"");
    let busy = eventually(Duration::from_secs(15), "the job's GPU process in /metrics", || {
        let body = scrape();
        body.lines()
            .any(|l| l.starts_with("gantry_gpu_process_memory_used_bytes{") && l.contains(&label))
            .then_some(body)
    });
    let utils: Vec<f64> = busy
        .lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(utils.len(), 2, "{busy}");
    assert!(utils.iter().any(|u| *u > 50.0), "the job's GPU is busy: {utils:?}");
    cluster.gantry(&["cancel", &id]);
    eventually(Duration::from_secs(20), "the job's process to leave /metrics", || {
        (!scrape().contains(&label)).then_some(())
    });
}
