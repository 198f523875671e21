//! Idle GPUs end to end on the simulated fleet: a job whose GPU stays idle is warned, then
//! requeued with the reason, an event and an audit row naming the samples; a steady one runs on.

use std::time::Duration;

use crate::harness::{Cluster, eventually};

fn job(cluster: &Cluster, id: &str) -> serde_json::Value {
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.gantry(&["job", id, "-o", "json"])).expect("job json");
    shown["job"].clone()
}

#[test]
fn an_idle_job_under_requeue_is_requeued_after_twenty_seconds_with_the_reason_and_a_steady_one_is_untouched()
{
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    let said = cluster.gantry(&[
        "team",
        "idle",
        "default",
        "--warn-after",
        "8s",
        "--act-after",
        "20s",
        "--below",
        "1",
        "--action",
        "requeue",
    ]);
    assert!(said.contains("requeue after 20s"), "{said}");
    let submit = |profile: &str| {
        let env = format!("GANTRY_SIM_PROFILE={profile}");
        cluster.gantry(&["submit", "--gpus", "1", "--env", &env, "--", "sleep", "300"]).trim().to_owned()
    };
    let (idle, steady) = (submit("idle"), submit("steady"));
    eventually(Duration::from_secs(20), "both jobs to run", || {
        (job(&cluster, &idle)["state"] == "running" && job(&cluster, &steady)["state"] == "running")
            .then_some(())
    });
    let started = std::time::Instant::now();
    let events = eventually(Duration::from_secs(60), "the idle job to be requeued", || {
        let events = cluster.gantry(&["events", "--job", &idle]);
        events.contains("job.idle-requeued").then_some(events)
    });
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(15), "not before it was idle 20 s: {waited:?}");
    assert!(
        events.contains("job.idle ") || events.contains("job.idle\t") || events.contains("will be stopped"),
        "warned first:\n{events}"
    );
    assert!(events.contains("its GPUs were idle (below 1% for"), "{events}");
    // Requeued, its retries unspent: back in the queue and, with a GPU free, running again.
    let again = eventually(Duration::from_secs(30), "the idle job to run again", || {
        let j = job(&cluster, &idle);
        (j["attempt"] == 2).then_some(j)
    });
    assert_eq!(again["max_retries"], 3, "{again}");
    let shown = cluster.gantry(&["job", &idle]);
    assert!(shown.contains("idle"), "gantry job shows it:\n{shown}");
    let audit = cluster.gantry(&["audit", "-o", "json"]);
    assert!(audit.contains("job.idle-requeue") && audit.contains("samples, at most 0.0%"), "{audit}");

    let steady_job = job(&cluster, &steady);
    assert_eq!((steady_job["state"].clone(), steady_job["attempt"].clone()), ("running".into(), 1.into()));
    let events = cluster.gantry(&["events", "--job", &steady]);
    assert!(!events.contains("idle"), "a steady job is untouched:\n{events}");
    cluster.gantry(&["cancel", &idle]);
    cluster.gantry(&["cancel", &steady]);
}
