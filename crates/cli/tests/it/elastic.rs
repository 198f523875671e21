//! Elastic jobs through `gantry up` on a simulated 4-GPU node: a `--gpus 1..4` job (declared in
//! its script's `#GANTRY` line) starts on the one GPU left, grows onto all four once they are
//! idle — its restarted attempt sees `WORLD_SIZE=4` and four GPUs — and shrinks when a rigid
//! 2-GPU job arrives, after which both run.

use std::time::Duration;

use crate::harness::{Cluster, eventually};

fn job(cluster: &Cluster, id: &str) -> serde_json::Value {
    cluster.jobs().into_iter().find(|j| j["id"].as_i64() == id.parse().ok()).expect("job listed")
}

/// Waits until job `id` runs its attempt `attempt`, then returns what that attempt printed.
fn output_of(cluster: &Cluster, id: &str, attempt: u64) -> String {
    eventually(Duration::from_secs(60), &format!("job {id} to run attempt {attempt}"), || {
        let j = job(cluster, id);
        (j["state"] == "running" && j["attempt"] == attempt).then_some(())
    });
    eventually(Duration::from_secs(30), &format!("attempt {attempt} of job {id} to print"), || {
        let out = cluster.gantry(&["logs", id, "--attempt", &attempt.to_string()]);
        out.contains("world").then_some(out)
    })
}

/// (WORLD_SIZE, number of GPUs in CUDA_VISIBLE_DEVICES) from `world W gpus A,B,…`.
fn width(out: &str) -> (String, usize) {
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!((words.first(), words.get(2)), (Some(&"world"), Some(&"gpus")), "{out}");
    (words[1].to_owned(), words.get(3).map_or(0, |g| g.split(',').filter(|u| !u.is_empty()).count()))
}

#[test]
fn an_elastic_job_grows_onto_idle_gpus_then_shrinks_for_a_rigid_job_and_both_run() {
    let cluster =
        Cluster::start(&["--simulated-gpus", "4xA100-80GB", "--grace", "1", "--resize-interval", "1s"]);
    let go = cluster.shared().join("go");
    let wait_for_go = format!("while [ ! -e {} ]; do sleep 0.1; done", go.display());
    let blocker =
        cluster.gantry(&["submit", "--gpus", "3", "--", "sh", "-c", &wait_for_go]).trim().to_owned();
    eventually(Duration::from_secs(30), "the 3-GPU job to run", || {
        (job(&cluster, &blocker)["state"] == "running").then_some(())
    });
    let script = cluster.home.path().join("train.sh");
    let text = "#!/bin/sh\n#GANTRY --gpus 1..4 --name elastic\necho \"world $WORLD_SIZE gpus $CUDA_VISIBLE_DEVICES\"\nexec sleep 600\n";
    std::fs::write(&script, text).expect("write script");
    let elastic = cluster.gantry(&["submit", &script.display().to_string()]).trim().to_owned();

    // One GPU is left: it starts narrow.
    assert_eq!(width(&output_of(&cluster, &elastic, 1)), ("1".to_owned(), 1));
    let listed = cluster.gantry(&["jobs"]);
    assert!(listed.contains("1 GPU (1..4)"), "gantry jobs shows the width and the range:\n{listed}");

    // The 3-GPU job ends: nothing waits, so the elastic job grows to the whole node.
    std::fs::write(&go, "").expect("marker");
    assert_eq!(
        width(&output_of(&cluster, &elastic, 2)),
        ("4".to_owned(), 4),
        "the restarted attempt is 4 wide"
    );
    let detail = cluster.gantry(&["job", &elastic]);
    assert!(detail.contains("resized 1 → 4 GPUs: idle GPUs"), "gantry job says it grew:\n{detail}");

    // A rigid 2-GPU job arrives: the elastic job shrinks, and both run.
    let rigid = cluster.gantry(&["submit", "--gpus", "2", "--", "sleep", "600"]).trim().to_owned();
    let (world, gpus) = width(&output_of(&cluster, &elastic, 3));
    assert_eq!((world.as_str(), gpus), ("2", 2), "shrunk to what the rigid job leaves");
    eventually(Duration::from_secs(30), "the rigid job to run", || {
        (job(&cluster, &rigid)["state"] == "running").then_some(())
    });
    assert_eq!(job(&cluster, &elastic)["state"], "running");
    let detail = cluster.gantry(&["job", &elastic]);
    assert!(
        detail.contains(&format!("shrunk 4 → 2 GPUs: job {rigid} needed them")),
        "gantry job says why it shrank:\n{detail}"
    );
    assert!(cluster.gantry(&["jobs"]).contains("2 GPU (1..4)"));
    cluster.assert_no_double_allocation();
    cluster.gantry(&["cancel", &elastic]);
    cluster.gantry(&["cancel", &rigid]);
}

#[test]
fn a_bad_gpu_range_is_refused_with_a_sentence() {
    let cluster = Cluster::start(&["--simulated-gpus", "4xA100-80GB"]);
    // "the most GPUs on one node" is judged against registered nodes.
    cluster.wait_for_agent();
    for (range, says) in
        [("4..2", "must not exceed"), ("0..2", "at least 1 GPU"), ("1..8", "most GPUs on one node is 4")]
    {
        let out = cluster.try_gantry(&["submit", "--gpus", range, "--", "true"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "--gpus {range}: {err}");
    }
}
