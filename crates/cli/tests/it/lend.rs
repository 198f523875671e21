//! Idle GPUs lent end to end on the simulated fleet: a job idle past its team's `lend` limit
//! keeps its GPU, a preemptible job runs on it beside it (an ordinary one waits), and the
//! borrower is preempted within 30 s of the owner computing again.

use std::time::Duration;

use crate::harness::{Cluster, eventually};

fn job(cluster: &Cluster, id: &str) -> serde_json::Value {
    serde_json::from_str(&cluster.gantry(&["job", id, "-o", "json"])).expect("job json")
}

/// When the job's first event of `kind` happened, ms.
fn event_at(cluster: &Cluster, id: &str, kind: &str) -> Option<i64> {
    let events: serde_json::Value =
        serde_json::from_str(&cluster.gantry(&["events", "--job", id, "-o", "json"])).expect("events json");
    events.as_array()?.iter().filter(|e| e["kind"] == kind).filter_map(|e| e["at"].as_i64()).min()
}

#[test]
fn a_preemptible_job_runs_on_an_idle_owners_gpu_and_is_preempted_within_thirty_seconds_of_the_owner_resuming()
{
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let args = ["team", "idle", "default", "--warn-after", "4s", "--act-after", "8s", "--action", "lend"];
    let said = cluster.gantry(&args);
    assert!(said.contains("lend after 8s"), "{said}");
    // Idle for 40 s after its start, then computing (90 %).
    let submit = |extra: &[&str]| {
        let mut args = vec!["submit", "--gpus", "1"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[
            "--",
            "sh",
            "-c",
            "echo limit=${GANTRY_GPU_MEMORY_LIMIT_MIB:-none}; sleep 600",
        ]);
        cluster.gantry(&args).trim().to_owned()
    };
    let owner = submit(&["--env", "GANTRY_SIM_PROFILE=idle:40"]);
    let running = eventually(Duration::from_secs(20), "the owner to run", || {
        let j = job(&cluster, &owner);
        (j["job"]["state"] == "running").then_some(j)
    });
    let resumes_at = running["job"]["started_at"].as_i64().expect("started_at") + 40_000;
    eventually(Duration::from_secs(30), "the owner to lend its GPU", || {
        event_at(&cluster, &owner, "job.idle-lent")
    });
    let ordinary = submit(&[]);
    let borrower = submit(&["--preemptible", "--env", "GANTRY_SIM_PROFILE=steady"]);
    let borrowing = eventually(Duration::from_secs(20), "the preemptible job to run on the lent GPU", || {
        let b = job(&cluster, &borrower);
        (b["job"]["state"] == "running").then_some(b)
    });
    assert_eq!(borrowing["job"]["gpu_uuids"], running["job"]["gpu_uuids"], "the owner's GPU");
    assert_eq!(borrowing["loans"][0]["owner"].to_string(), owner, "{borrowing}");
    let o = job(&cluster, &owner);
    assert_eq!((o["job"]["state"].clone(), o["job"]["attempt"].clone()), ("running".into(), 1.into()), "{o}");
    assert_eq!(o["loans"][0]["borrower"].to_string(), borrower, "the owner is told: {o}");
    let shown = cluster.gantry(&["job", &owner]);
    assert!(shown.contains("lent") && shown.contains(&format!("borrowed by job {borrower}")), "{shown}");
    assert_eq!(job(&cluster, &ordinary)["job"]["state"], "pending", "only preemptible jobs borrow");
    // The borrower may use only the GPU memory the owner left free, as a slice's grant.
    let free = borrowing["loans"][0]["memory_mib"].as_u64().expect("the loan's memory");
    let said = eventually(Duration::from_secs(10), "the borrower's first line", || {
        let out = cluster.gantry(&["logs", &borrower]);
        out.contains("limit=").then_some(out)
    });
    assert!(
        said.contains(&format!("limit={}", free.max(1))),
        "the borrower's grant is the owner's free memory: {said}"
    );
    let owners = cluster.gantry(&["logs", &owner]);
    assert!(owners.contains("limit=none"), "the owner's GPU is whole: {owners}");

    let preempted = eventually(Duration::from_secs(90), "the borrower to be preempted", || {
        event_at(&cluster, &borrower, "job.preempted")
    });
    assert!(preempted >= resumes_at - 2_000, "not before the owner resumed: {preempted} vs {resumes_at}");
    assert!(
        preempted - resumes_at <= 30_000,
        "within 30 s of the owner resuming: {} ms",
        preempted - resumes_at
    );
    let events = cluster.gantry(&["events", "--job", &borrower]);
    assert!(
        events.contains(&format!("job {owner}, whose idle GPUs it borrowed, takes them back")),
        "{events}"
    );
    let events = cluster.gantry(&["events", "--job", &owner]);
    assert!(events.contains("job.idle-returned") && events.contains("use its GPUs again"), "{events}");
    let audit = cluster.gantry(&["audit", "-o", "json"]);
    assert!(audit.contains("job.idle-lend") && audit.contains("job.idle-give-back"), "{audit}");
    // The owner ran on, untouched; the borrower is back in the queue, its retries unspent.
    let o = job(&cluster, &owner);
    assert_eq!((o["job"]["state"].clone(), o["job"]["attempt"].clone()), ("running".into(), 1.into()));
    eventually(Duration::from_secs(30), "the borrower back in the queue", || {
        let b = job(&cluster, &borrower);
        (b["job"]["state"] == "pending").then_some(())
    });
    for id in [&owner, &ordinary, &borrower] {
        cluster.gantry(&["cancel", id]);
    }
}
