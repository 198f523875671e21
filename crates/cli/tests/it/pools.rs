//! Node pools end to end: `spread` and `pack` on the simulated fleet, pools chosen by label,
//! teams a pool does not admit.

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

use crate::harness::{Cluster, command, eventually};

fn start_agent(cluster: &Cluster, node: &str) -> Child {
    let join = cluster.gantry(&["token", "create", "--role", "agent", "--name", node]).trim().to_owned();
    let dir = cluster.home.path().join(format!("node-{node}"));
    command(cluster.home.path())
        .args(["agent", "--server", &cluster.url(), "--node-id", node, "--backend", "simulated"])
        .arg("--ca")
        .arg(cluster.ca_path())
        .args(["--simulated-gpus", "4xA100-80GB", "--grace", "1", "--data-dir"])
        .arg(&dir)
        .arg("--work-dir")
        .arg(cluster.outside.path().join(format!("node-{node}-work")))
        .env("GANTRY_JOIN_TOKEN", join)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start agent")
}

/// Submits four 1-GPU jobs and returns, once all run, how many landed on each node.
fn four_jobs(cluster: &Cluster) -> BTreeMap<String, usize> {
    let ids: Vec<String> = (0..4)
        .map(|_| cluster.gantry(&["submit", "--gpus", "1", "--", "sleep", "120"]).trim().to_owned())
        .collect();
    let placed = eventually(Duration::from_secs(30), "four jobs to run", || {
        let jobs = cluster.jobs();
        let mine: Vec<&serde_json::Value> =
            jobs.iter().filter(|j| ids.iter().any(|id| j["id"].as_i64() == id.parse().ok())).collect();
        mine.iter().all(|j| j["state"] == "running").then(|| {
            let mut per: BTreeMap<String, usize> = BTreeMap::new();
            for j in mine {
                *per.entry(j["node_id"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
            }
            per
        })
    });
    for id in &ids {
        cluster.gantry(&["cancel", id]);
    }
    eventually(Duration::from_secs(30), "the jobs to end", || {
        cluster.jobs().iter().all(|j| j["state"] != "running" && j["state"] != "scheduled").then_some(())
    });
    placed
}

#[test]
fn four_one_gpu_jobs_on_two_four_gpu_nodes_land_two_and_two_under_spread_and_four_and_none_under_pack() {
    let cluster = Cluster::start(&["--no-agent"]);
    let mut agents = vec![start_agent(&cluster, "sim-a"), start_agent(&cluster, "sim-b")];
    eventually(Duration::from_secs(20), "both agents to register", || {
        let nodes: Vec<serde_json::Value> =
            serde_json::from_str(&cluster.gantry(&["nodes", "-o", "json"])).expect("nodes json");
        (nodes.iter().filter(|n| n["node"]["state"] == "ready" || n["state"] == "ready").count() == 2)
            .then_some(())
    });

    let said = cluster.gantry(&["pool", "set", "default", "--placement", "spread"]);
    assert!(said.contains("pool default places by spread"), "{said}");
    let spread = four_jobs(&cluster);
    assert_eq!(spread.values().copied().collect::<Vec<_>>(), [2, 2], "spread: {spread:?}");

    cluster.gantry(&["pool", "set", "default", "--placement", "pack"]);
    let packed = four_jobs(&cluster);
    assert_eq!(packed.values().copied().collect::<Vec<_>>(), [4], "pack: all on one node: {packed:?}");

    let pools: Vec<serde_json::Value> =
        serde_json::from_str(&cluster.gantry(&["pools", "-o", "json"])).expect("pools json");
    assert_eq!(pools.len(), 1, "{pools:?}");
    assert_eq!((pools[0]["name"].clone(), pools[0]["placement"].clone()), ("default".into(), "pack".into()));
    assert_eq!((pools[0]["gpus"].as_u64(), pools[0]["nodes"].as_array().map(Vec::len)), (Some(8), Some(2)));
    let audit = cluster.gantry(&["audit"]);
    assert!(audit.contains("pool.set"), "{audit}");
    cluster.assert_no_double_allocation();
    for agent in &mut agents {
        let _ = agent.kill();
        let _ = agent.wait();
    }
}

#[test]
fn a_job_runs_only_in_its_pool_and_a_team_the_pool_does_not_admit_is_refused() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB", "--label", "pool=inference"]);
    // The node must have registered (with its pool label) before what it offers is judged.
    cluster.wait_for_agent();
    // No node is in pool `default`: a job that names no pool could never run.
    let out = cluster.try_gantry(&["submit", "--gpus", "1", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no registered node is in pool default"), "{err}");
    let out = cluster.try_gantry(&[
        "submit",
        "--gpus",
        "1",
        "--node-selector",
        "gpu.count=8",
        "--pool",
        "inference",
        "--",
        "true",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("pool inference with gpu.count=8"), "{err}");

    let id = cluster
        .gantry(&[
            "submit",
            "--gpus",
            "1",
            "--pool",
            "inference",
            "--node-selector",
            "gpu.count=2",
            "--",
            "true",
        ])
        .trim()
        .to_owned();
    eventually(Duration::from_secs(20), "the job in pool inference to succeed", || {
        let job: serde_json::Value =
            serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).ok()?;
        (job["job"]["state"] == "succeeded").then_some(())
    });
    let shown = cluster.gantry(&["job", &id]);
    assert!(shown.contains("pool=inference"), "{shown}");

    cluster.gantry(&["pool", "set", "inference", "--teams", "serving"]);
    let out = cluster.try_gantry(&[
        "submit",
        "--gpus",
        "1",
        "--pool",
        "inference",
        "--team",
        "vision",
        "--",
        "true",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("team vision may not use pool inference"), "{err}");
    let ok = cluster.try_gantry(&[
        "submit",
        "--gpus",
        "1",
        "--pool",
        "inference",
        "--team",
        "serving",
        "--",
        "true",
    ]);
    assert!(ok.status.success(), "{ok:?}");
    let listed = cluster.gantry(&["pools"]);
    assert!(listed.contains("inference") && listed.contains("serving"), "{listed}");
    // Members may not set pools.
    let member = cluster.gantry(&["token", "create", "--team", "vision"]).trim().to_owned();
    let out = command(cluster.home.path())
        .args(["pool", "set", "inference", "--placement", "spread"])
        .env("GANTRY_TOKEN", &member)
        .output()
        .expect("run");
    assert!(!out.status.success(), "{out:?}");
}
