//! Preemption through `gantry up`: a priority-100 job takes the GPU of a priority-0 job, which is
//! stopped (SIGTERM, grace), requeued without spending its retries, told why, and runs again once
//! the GPU is free.

use std::time::Duration;

use crate::harness::{Cluster, eventually};

fn job(cluster: &Cluster, id: &str) -> serde_json::Value {
    cluster.jobs().into_iter().find(|j| j["id"].as_i64() == id.parse().ok()).expect("job listed")
}

#[test]
fn a_priority_hundred_job_preempts_a_priority_zero_job_which_resumes_later() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB", "--grace", "1"]);
    let low = cluster
        .gantry(&["submit", "--gpus", "1", "--max-retries", "0", "--", "sleep", "600"])
        .trim()
        .to_owned();
    eventually(Duration::from_secs(20), "the priority-0 job to run", || {
        (job(&cluster, &low)["state"] == "running").then_some(())
    });
    let high =
        cluster.gantry(&["submit", "--gpus", "1", "--priority", "100", "--", "sleep", "2"]).trim().to_owned();
    let requeued = eventually(Duration::from_secs(30), "the priority-0 job to be preempted", || {
        let j = job(&cluster, &low);
        (j["state"] == "pending" || job(&cluster, &high)["state"] == "running").then_some(j)
    });
    eventually(Duration::from_secs(30), "the priority-100 job to succeed", || {
        (job(&cluster, &high)["state"] == "succeeded").then_some(())
    });
    let back = eventually(Duration::from_secs(30), "the preempted job to run again", || {
        let j = job(&cluster, &low);
        (j["state"] == "running").then_some(j)
    });
    assert_eq!(back["attempt"], 2, "it was placed a second time: {back}");
    let detail = cluster.gantry(&["job", &low]);
    assert!(
        detail.contains(&format!("preempted by job {high}")),
        "gantry job says who preempted it:\n{detail}"
    );
    assert!(requeued["state"] != "failed", "a preemption spends no retry (max-retries 0): {requeued}");
    cluster.assert_no_double_allocation();
    cluster.gantry(&["cancel", &low]);
}
