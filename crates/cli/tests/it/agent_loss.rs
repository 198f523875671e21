//! Agent loss: a killed agent's running jobs are requeued (or failed when their retries are
//! spent) within the heartbeat timeout, and the agent coming back does not double-allocate.

use std::process::Child;
use std::time::{Duration, Instant};

use crate::harness::{Cluster, command, eventually};

fn start_agent(cluster: &Cluster, join: &str) -> Child {
    let dir = cluster.home.path().join("node-n1");
    command(cluster.home.path())
        .args(["agent", "--server", &cluster.url(), "--node-id", "n1", "--backend", "simulated"])
        .arg("--ca")
        .arg(cluster.ca_path())
        .args(["--simulated-gpus", "2xA100-80GB", "--grace", "1", "--data-dir"])
        .arg(&dir)
        .arg("--work-dir")
        .arg(cluster.outside.path().join("node-n1-work"))
        .env("GANTRY_JOIN_TOKEN", join)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start agent")
}

fn state_of(cluster: &Cluster, id: &str) -> serde_json::Value {
    cluster.jobs().into_iter().find(|j| j["id"].as_i64() == id.parse().ok()).expect("job listed")
}

#[test]
fn a_lost_agent_requeues_or_fails_its_jobs_and_coming_back_does_not_double_allocate() {
    let cluster = Cluster::start(&["--no-agent", "--heartbeat-timeout", "2"]);
    let join = cluster.gantry(&["token", "create", "--role", "agent", "--name", "n1"]).trim().to_owned();
    let mut agent = start_agent(&cluster, &join);
    let retried = cluster.gantry(&["submit", "--gpus", "1", "--", "sleep", "60"]).trim().to_owned();
    let spent = cluster
        .gantry(&["submit", "--gpus", "1", "--max-retries", "0", "--", "sleep", "60"])
        .trim()
        .to_owned();
    eventually(Duration::from_secs(20), "both jobs to run", || {
        let both = [&retried, &spent].iter().all(|id| state_of(&cluster, id)["state"] == "running");
        both.then_some(())
    });
    let _ = agent.kill();
    let _ = agent.wait();
    let killed = Instant::now();
    eventually(Duration::from_secs(15), "the jobs to be requeued or failed", || {
        let (a, b) = (state_of(&cluster, &retried), state_of(&cluster, &spent));
        (a["state"] == "pending" && b["state"] == "failed").then_some(())
    });
    // The timeout is 2 s; passes and polling add at most a few seconds even on a loaded machine.
    assert!(killed.elapsed() < Duration::from_secs(2 + 6), "took {:?}", killed.elapsed());
    let nodes = cluster.gantry(&["nodes"]);
    assert!(nodes.contains("lost"), "{nodes}");
    let failed = state_of(&cluster, &spent);
    assert!(failed["reason"].as_str().unwrap_or_default().contains("retry budget"), "{failed}");

    let mut agent = start_agent(&cluster, &join);
    let back = eventually(Duration::from_secs(20), "the requeued job to run again", || {
        let job = state_of(&cluster, &retried);
        (job["state"] == "running").then_some(job)
    });
    assert_eq!(back["attempt"], 2);
    assert_eq!(back["epoch"], 2, "placed under the agent's new epoch");
    cluster.assert_no_double_allocation();
    cluster.gantry(&["cancel", &retried]);
    let _ = std::process::Command::new("kill").arg(agent.id().to_string()).status();
    let _ = agent.wait();
}
