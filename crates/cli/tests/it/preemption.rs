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

/// A token for a member of `team`.
fn member(cluster: &Cluster, team: &str) -> String {
    cluster.gantry(&["token", "create", "--team", team]).trim().to_owned()
}

/// Runs `gantry ARGS` with `token`.
fn run_as(cluster: &Cluster, token: &str, args: &[&str]) -> std::process::Output {
    crate::harness::command(cluster.home.path()).env("GANTRY_TOKEN", token).args(args).output().expect("run")
}

/// Slurm's QOS and KAI's in-quota rule: priority orders a team's own queue; it does not let one
/// team take another's running GPUs (with no guarantees set, as `gantry up` starts).
#[test]
fn a_higher_priority_job_of_another_team_waits_and_a_member_cannot_pass_the_teams_ceiling() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB", "--grace", "1"]);
    let (a, b) = (member(&cluster, "a"), member(&cluster, "b"));
    let as_member = |token: &str, args: &[&str]| run_as(&cluster, token, args);
    let out = as_member(&a, &["submit", "--gpus", "1", "--", "sleep", "600"]);
    let running = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    eventually(Duration::from_secs(20), "team a's job to run", || {
        (job(&cluster, &running)["state"] == "running").then_some(())
    });
    let out = as_member(&b, &["submit", "--gpus", "1", "--priority", "1000", "--", "true"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("above team b's ceiling of 100"), "{said}");
    assert!(!said.contains("422") && !said.contains("Unprocessable"), "a sentence, no status phrase: {said}");
    let out = as_member(&b, &["submit", "--gpus", "1", "--priority", "100", "--", "true"]);
    let waiting = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let reason = eventually(Duration::from_secs(20), "team b's job to say why it waits", || {
        job(&cluster, &waiting)["reason"]
            .as_str()
            .filter(|r| r.contains("may not preempt"))
            .map(str::to_owned)
    });
    std::thread::sleep(Duration::from_secs(3));
    let kept = job(&cluster, &running);
    assert_eq!(
        (kept["state"].as_str(), kept["attempt"].as_i64()),
        (Some("running"), Some(1)),
        "{kept} ({reason})"
    );
    assert_eq!(job(&cluster, &waiting)["state"], "pending");
    cluster.gantry(&["cancel", &running]);
    eventually(Duration::from_secs(30), "team b's job to run once the GPU is free", || {
        (job(&cluster, &waiting)["state"] == "succeeded").then_some(())
    });
}

#[test]
fn a_guarantee_set_with_gantry_team_set_is_reclaimed_from_a_borrowing_team() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB", "--grace", "1"]);
    let (a, b) = (member(&cluster, "a"), member(&cluster, "b"));
    let as_member = |token: &str, args: &[&str]| {
        let out = run_as(&cluster, token, args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let borrowed: Vec<String> =
        (0..2).map(|_| as_member(&a, &["submit", "--gpus", "1", "--", "sleep", "600"])).collect();
    eventually(Duration::from_secs(20), "team a to hold both GPUs", || {
        borrowed.iter().all(|id| job(&cluster, id)["state"] == "running").then_some(())
    });
    cluster.gantry(&["team", "set", "b", "--guarantee", "1"]);
    cluster.gantry(&["team", "set", "b", "--max-priority", "50"]);
    let teams: Vec<serde_json::Value> =
        serde_json::from_str(&cluster.gantry(&["teams", "-o", "json"])).expect("teams json");
    let team_b = teams.iter().find(|t| t["name"] == "b").expect("team b listed");
    assert_eq!(
        (team_b["gpu_quota"].as_i64(), team_b["max_priority"].as_i64()),
        (Some(1), Some(50)),
        "{team_b}"
    );
    let table = cluster.gantry(&["teams"]);
    assert!(table.contains("GUARANTEE") && table.lines().any(|l| l.starts_with("b ")), "{table}");
    let reclaiming = as_member(&b, &["submit", "--gpus", "1", "--", "sleep", "600"]);
    eventually(Duration::from_secs(30), "team b to get its guaranteed GPU", || {
        (job(&cluster, &reclaiming)["state"] == "running").then_some(())
    });
    let preempted: Vec<serde_json::Value> = borrowed.iter().map(|id| job(&cluster, id)).collect();
    assert_eq!(preempted.iter().filter(|j| j["state"] == "running").count(), 1, "{preempted:?}");
    let missing = cluster.try_gantry(&["team", "set", "b"]);
    assert!(!missing.status.success(), "nothing to set is an error");
    for id in borrowed.iter().chain([&reclaiming]) {
        cluster.gantry(&["cancel", id]);
    }
}

/// The resize interval damps growth only: a team under its guarantee gets the GPU another team's
/// elastic job borrowed back at once (here with the default 300 s interval), and the elastic
/// job's event names the width its next attempt runs at.
#[test]
fn a_team_under_its_guarantee_gets_a_gpu_an_elastic_borrower_holds_back_within_five_seconds() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB", "--grace", "1"]);
    let (a, b) = (member(&cluster, "a"), member(&cluster, "b"));
    cluster.gantry(&["team", "set", "b", "--guarantee", "1"]);
    let as_member = |token: &str, args: &[&str]| {
        let out = run_as(&cluster, token, args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let borrower = as_member(&a, &["submit", "--gpus", "1..2", "--", "sleep", "600"]);
    let wide = eventually(Duration::from_secs(20), "team a's elastic job to run on both GPUs", || {
        let j = job(&cluster, &borrower);
        (j["state"] == "running").then_some(j)
    });
    assert_eq!(wide["gpu_uuids"].as_array().map(Vec::len), Some(2), "idle GPUs at admission: {wide}");
    let asked = std::time::Instant::now();
    let owner = as_member(&b, &["submit", "--gpus", "1", "--", "sleep", "600"]);
    eventually(Duration::from_secs(5), "team b's job to get its guaranteed GPU within 5 s", || {
        (job(&cluster, &owner)["state"] == "running").then_some(())
    });
    assert!(asked.elapsed() < Duration::from_secs(5), "took {:?}", asked.elapsed());
    let narrow = eventually(Duration::from_secs(20), "the elastic job to run again", || {
        let j = job(&cluster, &borrower);
        (j["state"] == "running" && j["attempt"] == 2).then_some(j)
    });
    assert_eq!(narrow["gpu_uuids"].as_array().map(Vec::len), Some(1), "{narrow}");
    let detail = cluster.gantry(&["job", &borrower]);
    assert!(detail.contains(&format!("shrunk 2 → 1 GPUs: job {owner} needed them")), "{detail}");
    cluster.assert_no_double_allocation();
    for id in [&borrower, &owner] {
        cluster.gantry(&["cancel", id]);
    }
}
