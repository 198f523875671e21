//! Data stalls end to end on the simulated fleet (issue 22, point 5): a job that declares
//! `GANTRY_SIM_PROFILE=input_stall:0.4` waits on its input 4 s in every 10 (its GPU idle, its
//! simulated reads at 400 MiB/s); its agent judges each heartbeat's sample, the store adds the
//! lost GPU time up, and `/v1/findings` names the job and its declared input with the figure,
//! `gantry usage` has it in its `stalled` column and `gantry job N` shows the job's share. A
//! steady job beside it loses nothing.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{Cluster, eventually};

fn detail(cluster: &Cluster, id: &str) -> Value {
    serde_json::from_str(&cluster.gantry(&["job", id, "-o", "json"])).expect("job json")
}

fn findings(cluster: &Cluster) -> Vec<Value> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let resp = cluster
            .http()
            .get(format!("{}/v1/findings", cluster.url()))
            .bearer_auth(cluster.token())
            .send()
            .await
            .expect("findings");
        assert_eq!(resp.status(), 200);
        resp.json::<Vec<Value>>().await.expect("json")
    })
}

#[test]
fn a_job_stalled_on_its_input_is_named_with_its_input_and_its_share_and_counted_in_usage() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    let data = tempfile::tempdir().expect("tmp");
    // A file:// input copies only what every user of the node may read.
    let chmod = |path: &std::path::Path, mode| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    chmod(data.path(), 0o755);
    std::fs::write(data.path().join("shard-0"), vec![7u8; 4096]).expect("write");
    chmod(&data.path().join("shard-0"), 0o644);
    let root = std::fs::canonicalize(data.path()).expect("canonical");
    let url = format!("file://{}", root.display());
    let stalled = cluster
        .gantry(&[
            "submit",
            "--gpus",
            "1",
            "--input",
            &format!("data={url}"),
            "--env",
            "GANTRY_SIM_PROFILE=input_stall:0.4",
            "--",
            "sleep",
            "300",
        ])
        .trim()
        .to_owned();
    let steady = cluster
        .gantry(&["submit", "--gpus", "1", "--env", "GANTRY_SIM_PROFILE=steady", "--", "sleep", "300"])
        .trim()
        .to_owned();
    eventually(Duration::from_secs(60), "both jobs to run", || {
        (detail(&cluster, &stalled)["job"]["state"] == "running"
            && detail(&cluster, &steady)["job"]["state"] == "running")
            .then_some(())
    });
    let sentence = format!("job {stalled} lost ");
    let finding = eventually(Duration::from_secs(90), "the input_starved finding naming the job", || {
        findings(&cluster).into_iter().find(|f| {
            f["kind"] == "input_starved" && f["detail"].as_str().is_some_and(|d| d.contains(&sentence))
        })
    });
    let said = finding["detail"].as_str().expect("detail");
    assert!(said.contains(&format!("of its GPU time waiting for input (data: {url})")), "{said}");
    let figure: f64 = said
        .split(&sentence)
        .nth(1)
        .and_then(|rest| rest.split(" %").next())
        .and_then(|n| n.trim().parse().ok())
        .expect("a percentage");
    assert!((20.0..=60.0).contains(&figure), "about 40 % lost: {said}");
    assert!(
        finding["jobs"]
            .as_array()
            .is_some_and(|j| j.iter().any(|j| j["id"].as_i64() == stalled.parse().ok())),
        "{finding}"
    );
    assert!(
        !findings(&cluster)
            .iter()
            .any(|f| f["detail"].as_str().is_some_and(|d| d.contains(&format!("job {steady} lost")))),
        "a steady job is not starved"
    );

    // The job's figure: its share of the judged GPU time, on `gantry job`.
    let shown = detail(&cluster, &stalled);
    let share = shown["stall"]["share"].as_f64().expect("share");
    assert!((0.2..=0.6).contains(&share), "{}", shown["stall"]);
    assert!(shown["stall"]["stalled_gpu_hours"].as_f64().expect("stalled") > 0.0);
    let steady_shown = detail(&cluster, &steady);
    // Judged where its cgroup is readable (none when the agent runs without cgroups): never lost.
    assert_eq!(steady_shown["stall"]["share"].as_f64().unwrap_or(0.0), 0.0, "{}", steady_shown["stall"]);
    let text = cluster.gantry(&["job", &stalled]);
    assert!(text.contains("% of its GPU time waiting for input"), "{text}");

    // `gantry usage`: the stalled GPU-hours, as a column and a field.
    let usage: Vec<Value> =
        serde_json::from_str(&cluster.gantry(&["usage", "--since", "1h", "-o", "json"])).expect("json");
    let row = usage.iter().find(|r| r["team"] == "default").expect("the default team's row");
    let stalled_h = row["stalled_gpu_hours"].as_f64().expect("stalled_gpu_hours");
    assert!(stalled_h > 0.0 && stalled_h < row["gpu_hours"].as_f64().expect("gpu_hours"), "{row}");
    let table = cluster.gantry(&["usage", "--since", "1h"]);
    assert!(table.lines().next().is_some_and(|h| h.contains("STALLED")), "{table}");
    cluster.gantry(&["cancel", &stalled]);
    cluster.gantry(&["cancel", &steady]);
}
