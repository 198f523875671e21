//! Agent loss: a killed agent's running jobs are requeued (or failed when their retries are
//! spent) within the heartbeat timeout, and the agent coming back does not double-allocate.

use std::process::Child;
use std::time::{Duration, Instant};

use crate::harness::{Cluster, command, eventually};

fn start_agent(cluster: &Cluster, join: &str) -> Child {
    start_agent_as(cluster, join, "n1")
}

/// `gantry agent` as `node`, on 2 simulated GPUs whose UUIDs follow from the node id.
fn start_agent_as(cluster: &Cluster, join: &str, node: &str) -> Child {
    let dir = cluster.home.path().join(format!("node-{node}"));
    command(cluster.home.path())
        .args(["agent", "--server", &cluster.url(), "--node-id", node, "--backend", "simulated"])
        .arg("--ca")
        .arg(cluster.ca_path())
        .args(["--simulated-gpus", "2xA100-80GB", "--grace", "1", "--data-dir"])
        .arg(&dir)
        .arg("--work-dir")
        .arg(cluster.outside.path().join(format!("node-{node}-work")))
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
    let cluster = Cluster::start(&["--no-agent", "--heartbeat-timeout", "2", "--node-lost-after", "2s"]);
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

/// Slurm's `SlurmdTimeout` and Kubernetes' eviction delay: a node away for longer than the
/// heartbeat timeout is `not-responding`, not lost; its agent, back within `--node-lost-after`,
/// takes up the job it left running, on the same attempt.
#[test]
fn an_agent_stopped_for_30_seconds_and_restarted_keeps_its_running_job_on_attempt_1() {
    let cluster = Cluster::start(&["--no-agent", "--heartbeat-timeout", "2"]);
    let join = cluster.gantry(&["token", "create", "--role", "agent", "--name", "n1"]).trim().to_owned();
    let mut agent = start_agent(&cluster, &join);
    let go = cluster.shared().join("go");
    let script = format!("echo before; while [ ! -e {} ]; do sleep 0.1; done; echo after", go.display());
    let id = cluster.gantry(&["submit", "--gpus", "1", "--", "sh", "-c", &script]).trim().to_owned();
    eventually(Duration::from_secs(20), "the job to run", || {
        (state_of(&cluster, &id)["state"] == "running").then_some(())
    });
    let _ = agent.kill();
    let _ = agent.wait();
    eventually(Duration::from_secs(15), "the node to be not responding", || {
        cluster.gantry(&["nodes"]).contains("not-responding").then_some(())
    });
    std::thread::sleep(Duration::from_secs(30));
    let away = state_of(&cluster, &id);
    assert_eq!((away["state"].as_str(), away["attempt"].as_i64()), (Some("running"), Some(1)), "{away}");
    let mut agent = start_agent(&cluster, &join);
    eventually(Duration::from_secs(20), "the node to be ready again", || {
        let nodes = cluster.gantry(&["nodes"]);
        (!nodes.contains("not-responding") && nodes.contains("ready")).then_some(())
    });
    let events = cluster.gantry(&["events", "--node", "n1"]);
    // The restarted agent registered again (a new process: epoch 2) and kept its attempt.
    let (ready, silent) = (events.find("registered at epoch 2"), events.find("node.not-responding"));
    assert!(matches!((ready, silent), (Some(r), Some(s)) if r < s), "newest first:\n{events}");
    std::fs::write(&go, "").expect("go");
    let done = eventually(Duration::from_secs(20), "the job to succeed", || {
        let job = state_of(&cluster, &id);
        (job["state"] == "succeeded").then_some(job)
    });
    assert_eq!(done["attempt"], 1, "the same attempt went on: {done}");
    assert_eq!(cluster.gantry(&["logs", &id]), "before\nafter\n");
    cluster.assert_no_double_allocation();
    let _ = agent.kill();
    let _ = agent.wait();
}

#[test]
fn two_simulated_agents_on_one_machine_both_register_with_distinct_gpus() {
    let cluster = Cluster::start(&["--no-agent"]);
    let mut watch = command(cluster.home.path())
        .args(["events", "-w", "--node", "sim-b"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gantry events -w");
    let (tx, lines) = std::sync::mpsc::channel();
    let out = watch.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut agents = Vec::new();
    for node in ["sim-a", "sim-b"] {
        let join = cluster.gantry(&["token", "create", "--role", "agent", "--name", node]).trim().to_owned();
        agents.push(start_agent_as(&cluster, &join, node));
    }
    let nodes = eventually(Duration::from_secs(20), "both agents to register", || {
        let nodes: Vec<serde_json::Value> =
            serde_json::from_str(&cluster.gantry(&["nodes", "-o", "json"])).expect("nodes json");
        (nodes.iter().filter(|n| n["state"] == "ready").count() == 2).then_some(nodes)
    });
    let gpus = cluster.gantry(&["gpus", "-o", "json"]);
    let gpus: Vec<serde_json::Value> = serde_json::from_str(&gpus).expect("gpus json");
    let uuids: std::collections::BTreeSet<&str> =
        gpus.iter().filter_map(|g| g["gpu"]["uuid"].as_str()).collect();
    assert_eq!(uuids.len(), 4, "four distinct GPUs on two nodes: {nodes:?}");
    // `events -w` printed sim-b's registration as it happened, and nothing of sim-a's.
    let mut seen = Vec::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(15)) {
        let done = line.contains("node.registered");
        seen.push(line);
        if done {
            break;
        }
    }
    assert!(seen.last().is_some_and(|l| l.contains("node.registered") && l.contains("sim-b")), "{seen:?}");
    assert!(seen.iter().all(|l| !l.contains("sim-a")), "{seen:?}");
    let _ = watch.kill();
    let _ = watch.wait();
    for mut agent in agents {
        let _ = agent.kill();
        let _ = agent.wait();
    }
}

#[test]
fn a_cordoned_node_takes_no_new_work_and_a_drained_ones_jobs_are_requeued_without_spending_retries() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    // `gantry up` answers before its agent has registered (seen in CI on a loaded machine).
    let node = eventually(Duration::from_secs(20), "the local node to register", || {
        let nodes: Vec<serde_json::Value> =
            serde_json::from_str(&cluster.gantry(&["nodes", "-o", "json"])).ok()?;
        Some(nodes.first()?["id"].as_str()?.to_owned())
    });

    let said = cluster.gantry(&["node", "cordon", &node]);
    assert!(said.contains("cordoned"), "{said}");
    let listed = cluster.gantry(&["nodes"]);
    assert!(listed.contains("ready,cordoned"), "{listed}");
    let id = cluster.gantry(&["submit", "--gpus", "1", "--", "sleep", "60"]).trim().to_owned();
    std::thread::sleep(Duration::from_secs(2));
    let job: serde_json::Value =
        serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).expect("json");
    assert_eq!(job["job"]["state"], "pending", "a cordoned node takes nothing: {job}");

    cluster.gantry(&["node", "uncordon", &node]);
    eventually(Duration::from_secs(20), "the job to run once uncordoned", || {
        let job: serde_json::Value =
            serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).ok()?;
        (job["job"]["state"] == "running").then_some(())
    });

    let said = cluster.gantry(&["node", "drain", &node, "--grace", "1s"]);
    assert!(said.contains("draining") && said.contains("in 1s"), "{said}");
    let job = eventually(Duration::from_secs(30), "the drained job to be requeued", || {
        let job: serde_json::Value =
            serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).ok()?;
        (job["job"]["state"] == "pending" && job["job"]["attempt"] == 1).then_some(job)
    });
    let reason = job["job"]["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("drained"), "{job}");
    std::thread::sleep(Duration::from_secs(2));
    let job: serde_json::Value =
        serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).expect("json");
    assert_eq!(job["job"]["state"], "pending", "not back on the draining node: {job}");
    let events = cluster.gantry(&["events", "--node", &node]);
    assert!(events.contains("draining"), "{events}");

    cluster.gantry(&["node", "uncordon", &node]);
    eventually(Duration::from_secs(20), "the job to run again, its retries unspent", || {
        let job: serde_json::Value =
            serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).ok()?;
        (job["job"]["state"] == "running" && job["job"]["attempt"] == 2).then_some(())
    });

    // Members may not; an unknown node is named.
    let member = cluster.gantry(&["token", "create", "--team", "vision"]).trim().to_owned();
    let out = crate::harness::command(cluster.home.path())
        .args(["node", "cordon", &node])
        .env("GANTRY_TOKEN", &member)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let out = cluster.try_gantry(&["node", "drain", "nope"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("there is no node nope"), "{out:?}");
    cluster.gantry(&["cancel", &id]);
}
