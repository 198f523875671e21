//! Preemption and services through `gantry up`: a job that needs room takes it from batch jobs
//! before replicas, and from one replica of a service at a time, so a preemption never takes a
//! whole service down (the core's rule, `crates/core/src/sched/service.rs`, carried out by the
//! server). Written as a new user would try it, it found a job that waited for ever: the queue
//! had demoted the two replicas (the youngest jobs) and the one-replica rule then refused them,
//! while the batch job that could go with one replica was never considered.

use std::time::Duration;

use crate::harness::eventually;
use crate::services::{Serving, ready};

/// Whether job `id` is in `state`.
fn state_of(s: &Serving, id: &str) -> serde_json::Value {
    let jobs = s.cluster.jobs();
    jobs.into_iter()
        .find(|j| j["id"].as_i64() == id.parse().ok())
        .map_or(serde_json::Value::Null, |j| j["state"].clone())
}

#[test]
fn a_job_needing_two_gpus_takes_a_batch_jobs_and_one_replicas_never_both_replicas() {
    let s = Serving::start(&["--simulated-gpus", "3xA100-80GB"]);
    let low =
        s.cluster.gantry(&["submit", "--team", "ml", "--gpus", "1", "--", "sleep", "600"]).trim().to_owned();
    eventually(Duration::from_secs(20), "the batch job to run", || {
        (state_of(&s, &low) == "running").then_some(())
    });
    s.apply(&s.file("pair", "replicas: 2\ngpus: 1\n"));
    s.until("pair", "two ready replicas", 60, |v| ready(v) == 2);
    // Every GPU is taken: the batch job's and the two replicas'. Two GPUs are wanted at priority
    // 50 in the same team. The two replicas are the cheapest to stop (they started last: the
    // least GPU time lost), yet the batch job goes first and only one replica with it.
    let high = s
        .cluster
        .gantry(&["submit", "--team", "ml", "--gpus", "2", "--priority", "50", "--", "sleep", "600"])
        .trim()
        .to_owned();
    let mut least_ready = 2;
    eventually(Duration::from_secs(40), "the priority-50 job to run", || {
        least_ready = least_ready.min(ready(&s.view("pair")));
        (state_of(&s, &high) == "running").then_some(())
    });
    assert_eq!(state_of(&s, &low), "pending", "the batch job was preempted");
    let v = s.view("pair");
    assert!(least_ready >= 1 && ready(&v) >= 1, "one replica kept serving throughout: {v}");
    assert_eq!(s.get("/ml/pair/", &s.token).map(|r| r.0), Ok(200), "the service still answers");
    s.cluster.assert_no_double_allocation();
    s.cluster.gantry(&["cancel", &high]);
    s.cluster.gantry(&["cancel", &low]);
}
