//! Restarts keep jobs, through the real binary: stopping (SIGTERM) or crashing (`kill -9`)
//! `gantry up` leaves running jobs running; the next `gantry up` on the same data directory
//! takes them up as the same attempt; a job that ended meanwhile is reported with its real exit
//! code; one that really died is requeued, and each attempt's output stays readable
//! (`gantry logs --previous`, kubectl's habit).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Cluster, eventually};

fn job(cluster: &Cluster, id: &str) -> Value {
    serde_json::from_str(&cluster.gantry(&["job", id, "-o", "json"])).expect("job json")
}

fn wait_state(cluster: &Cluster, id: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    eventually(Duration::from_secs(30), what, || Some(job(cluster, id)).filter(|d| check(&d["job"])))
}

/// A job that prints `before`, touches `tick` while it waits for `go`, then prints `after` and
/// exits with `code`.
fn submit_waiting(cluster: &Cluster, code: i32) -> (String, PathBuf, PathBuf) {
    let (tick, go) = (cluster.shared().join("tick"), cluster.shared().join("go"));
    let script = format!(
        "echo before; while [ ! -e {go} ]; do touch {tick}; sleep 0.1; done; echo after; exit {code}",
        go = go.display(),
        tick = tick.display()
    );
    let id = cluster.gantry(&["submit", "--gpus", "1", "--", "sh", "-c", &script]).trim().to_owned();
    wait_state(cluster, &id, "the job to run", |j| j["state"] == "running");
    eventually(Duration::from_secs(15), "the job's first line", || {
        (cluster.gantry(&["logs", &id]) == "before\n").then_some(())
    });
    (id, tick, go)
}

/// The job keeps touching `tick`: it runs.
fn assert_still_ticking(tick: &Path) {
    let _ = std::fs::remove_file(tick);
    eventually(Duration::from_secs(10), "the job to keep running while gantry up is down", || {
        tick.exists().then_some(())
    });
}

fn restart_keeps_the_job(stop: impl FnOnce(&mut Cluster)) {
    let mut cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB", "--heartbeat-timeout", "3"]);
    let (id, tick, go) = submit_waiting(&cluster, 0);
    stop(&mut cluster);
    assert_still_ticking(&tick);
    // Down for longer than the heartbeat timeout: a restarted control plane gives its agents
    // that long to report before it declares their nodes lost.
    std::thread::sleep(Duration::from_secs(4));
    cluster.restart();
    std::thread::sleep(Duration::from_secs(1));
    let kept = job(&cluster, &id);
    assert_eq!(kept["job"]["state"], "running", "{kept}");
    assert_eq!(kept["job"]["attempt"], 1, "the attempt count is unchanged: {kept}");
    std::fs::write(&go, "").expect("go");
    let done = wait_state(&cluster, &id, "the job to succeed", |j| j["state"].as_str() != Some("running"));
    assert_eq!(done["job"]["state"], "succeeded", "{done}");
    assert_eq!(done["job"]["attempt"], 1, "{done}");
    assert_eq!(done["attempts"].as_array().map(Vec::len), Some(1), "{done}");
    assert_eq!(cluster.gantry(&["logs", &id]), "before\nafter\n", "all its output, across the restart");
    cluster.assert_no_double_allocation();
}

#[test]
fn restarting_gantry_up_after_sigterm_leaves_a_running_job_running_as_the_same_attempt() {
    restart_keeps_the_job(|cluster| {
        let status = cluster.terminate();
        assert!(status.success(), "gantry up exited with {status}");
        // It says what keeps running and how to take it back.
        let log = std::fs::read_to_string(cluster.home.path().join("up.log")).expect("output");
        let said = log.lines().find(|l| l.starts_with("shutting down")).unwrap_or_default();
        assert!(said.contains("1 running job (") && said.contains("the next `gantry up`"), "{log}");
    });
}

#[test]
fn restarting_gantry_up_after_kill_9_leaves_a_running_job_running_as_the_same_attempt() {
    restart_keeps_the_job(Cluster::kill);
}

#[test]
fn a_job_that_ended_while_gantry_up_was_down_is_reported_with_its_real_exit_code() {
    let mut cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let (id, _, go) = submit_waiting(&cluster, 3);
    cluster.kill();
    std::fs::write(&go, "").expect("go");
    let exits = cluster.data_dir().join("agent/attempts").join(format!("{id}-1.exit"));
    eventually(Duration::from_secs(10), "the job to end while gantry up is down", || {
        exits.exists().then_some(())
    });
    cluster.restart();
    let done = wait_state(&cluster, &id, "the job to be reported", |j| j["state"] != "running");
    assert_eq!(done["job"]["state"], "failed", "{done}");
    assert_eq!(done["job"]["exit_code"], 3, "{done}");
    assert_eq!(done["job"]["attempt"], 1, "{done}");
    assert_eq!(cluster.gantry(&["logs", &id]), "before\nafter\n");
}

#[test]
fn a_job_that_died_while_gantry_up_was_down_runs_again_and_logs_previous_shows_the_first_attempt() {
    let mut cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let count = cluster.shared().join("count");
    let script = format!(
        "n=$(($(cat {c} 2>/dev/null || echo 0) + 1)); echo $n > {c}; echo attempt $n; \
         if [ $n = 1 ]; then exec sleep 1000; fi; exit 4",
        c = count.display()
    );
    let id = cluster.gantry(&["submit", "--gpus", "1", "--", "sh", "-c", &script]).trim().to_owned();
    wait_state(&cluster, &id, "the job to run", |j| j["state"] == "running");
    eventually(Duration::from_secs(15), "the first attempt's output", || {
        (cluster.gantry(&["logs", &id]) == "attempt 1\n").then_some(())
    });
    let out = cluster.try_gantry(&["logs", &id, "--previous"]);
    assert!(!out.status.success(), "a job on its first attempt has no previous one");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no previous attempt"), "{out:?}");
    let status = cluster.terminate();
    assert!(status.success(), "{status}");
    // The machine went down with gantry up: the job and its shim are gone, no exit was written.
    let record = cluster.data_dir().join("agent/attempts").join(format!("{id}-1.json"));
    let record: Value = serde_json::from_slice(&std::fs::read(record).expect("record")).expect("json");
    for pid in [&record["shim_pid"], &record["pid"]] {
        let pid = pid.as_u64().and_then(|p| u32::try_from(p).ok()).expect("pid");
        let started = gantry_agent::runner::record::start_time(pid).expect("running");
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        eventually(Duration::from_secs(10), "the killed process to be gone", || {
            (!gantry_agent::runner::record::is_alive(pid, started)).then_some(())
        });
    }
    cluster.restart();
    let done = wait_state(&cluster, &id, "the second attempt to end", |j| j["state"] == "failed");
    assert_eq!(done["job"]["attempt"], 2, "{done}");
    assert_eq!(cluster.gantry(&["logs", &id]), "attempt 2\n");
    assert_eq!(cluster.gantry(&["logs", &id, "--previous"]), "attempt 1\n");
    assert_eq!(cluster.gantry(&["logs", &id, "--attempt", "1"]), "attempt 1\n");
    let attempts = done["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "{done}");
    assert_eq!(attempts[0]["outcome"], "pending", "requeued: {done}");
    assert!(attempts[0]["reason"].as_str().unwrap_or_default().contains("lost"), "{done}");
    assert_eq!(
        (attempts[1]["outcome"].as_str(), attempts[1]["exit_code"].as_i64()),
        (Some("failed"), Some(4)),
        "{done}"
    );
    let node = attempts[0]["node_id"].as_str().expect("node");
    assert!(!node.is_empty() && attempts[1]["node_id"] == node, "{done}");
    assert!(attempts.iter().all(|a| a["started_at"].is_number() && a["finished_at"].is_number()), "{done}");
    let table = cluster.gantry(&["job", &id]);
    for line in [format!("#1   node {node}"), format!("#2   node {node}")] {
        assert!(table.contains(&line), "`gantry job` lists every attempt:\n{table}");
    }
    assert!(table.contains("exit 4  failed") && table.contains("requeued"), "{table}");
    let out = cluster.try_gantry(&["logs", &id, "--attempt", "3"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no attempt 3"), "{out:?}");
}
