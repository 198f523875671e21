//! `gantry events` records what happened to jobs (issue 38, point 7): scheduled (with the node),
//! started, succeeded, failed (with the exit code), timed out; `--job` selects one job's.

use std::time::Duration;

use crate::harness::{Cluster, eventually};

#[test]
fn gantry_events_records_each_jobs_start_and_end() {
    let cluster = Cluster::start(&[]);
    let ok = cluster.gantry(&["submit", "--no-upload", "--name", "fine", "--", "true"]).trim().to_owned();
    let bad = cluster
        .gantry(&["submit", "--no-upload", "--name", "broken", "--", "sh", "-c", "exit 3"])
        .trim()
        .to_owned();
    let slow = cluster
        .gantry(&["submit", "--no-upload", "--name", "slow", "--time", "00:00:01", "--", "sleep", "60"])
        .trim()
        .to_owned();
    let events = eventually(Duration::from_secs(60), "every job's end in the events", || {
        let text = cluster.gantry(&["events", "-o", "json"]);
        let all: Vec<serde_json::Value> = serde_json::from_str(&text).expect("json");
        let has = |kind: &str, id: &str| {
            all.iter().any(|e| e["kind"] == kind && e["subject"] == format!("job/{id}"))
        };
        (has("job.succeeded", &ok) && has("job.failed", &bad) && has("job.timeout", &slow)).then_some(all)
    });
    let of = |id: &str| -> Vec<(String, String)> {
        events
            .iter()
            .filter(|e| e["subject"] == format!("job/{id}"))
            .map(|e| {
                (e["kind"].as_str().unwrap_or("").to_owned(), e["message"].as_str().unwrap_or("").to_owned())
            })
            .collect()
    };
    let fine = of(&ok);
    for kind in ["job.scheduled", "job.started", "job.succeeded"] {
        assert!(fine.iter().any(|(k, _)| k == kind), "{kind} missing: {fine:?}");
    }
    assert!(fine.iter().any(|(k, m)| k == "job.scheduled" && m.starts_with("fine on ")), "{fine:?}");
    let broken = of(&bad);
    assert!(broken.iter().any(|(k, m)| k == "job.failed" && m.contains("exit code 3")), "{broken:?}");
    let one = cluster.gantry(&["events", "--job", &bad]);
    assert!(one.contains("job.failed") && !one.contains(&format!("job/{ok}")), "{one}");
}
