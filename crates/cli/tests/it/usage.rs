//! `gantry usage`: GPU-hours from the allocation history, checked against the history replayed
//! independently from the database; members see their own teams only.

use std::time::Duration;

use crate::harness::{Cluster, command, eventually};

#[test]
fn usage_totals_equal_the_allocation_history_replayed_independently() {
    let cluster = Cluster::start(&["--simulated-gpus", "4xA100-80GB"]);
    let vision =
        cluster.gantry(&["token", "create", "--team", "vision", "--user", "alice"]).trim().to_owned();
    let as_alice = |args: &[&str]| {
        let out = command(cluster.home.path()).env("GANTRY_TOKEN", &vision).args(args).output().expect("run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    as_alice(&["submit", "--gpus", "2", "--", "sleep", "1"]);
    as_alice(&["submit", "--gpu-memory", "20000", "--", "sleep", "1"]);
    cluster.gantry(&["submit", "--gpus", "1", "--team", "nlp", "--", "sleep", "1"]);
    eventually(Duration::from_secs(40), "the jobs to finish", || {
        let jobs = cluster.jobs();
        (jobs.len() == 3 && jobs.iter().all(|j| j["state"] == "succeeded")).then_some(())
    });
    // Replay the history straight from the database: each allocation's lifetime times its share.
    let db = rusqlite::Connection::open(cluster.data_dir().join("gantry.db")).expect("db");
    let mut stmt = db
        .prepare("SELECT j.team, a.created_at, a.released_at, a.share_milli FROM allocations a JOIN jobs j ON j.id = a.job_id")
        .expect("query");
    let mut replayed: std::collections::BTreeMap<String, f64> = Default::default();
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?))
        })
        .expect("rows");
    for row in rows {
        let (team, created, released, share) = row.expect("row");
        *replayed.entry(team).or_default() +=
            (released - created) as f64 * share as f64 / 1000.0 / 3_600_000.0;
    }
    let reported: Vec<serde_json::Value> =
        serde_json::from_str(&cluster.gantry(&["usage", "--since", "1h", "-o", "json"])).expect("json");
    assert_eq!(reported.len(), 2, "{reported:?}");
    for r in &reported {
        let team = r["team"].as_str().expect("team");
        let hours = r["gpu_hours"].as_f64().expect("hours");
        assert!(hours > 0.0);
        assert!(
            (hours - replayed[team]).abs() < 1e-9,
            "{team}: reported {hours}, replayed {}",
            replayed[team]
        );
    }
    let by_user: Vec<serde_json::Value> =
        serde_json::from_str(&cluster.gantry(&["usage", "--by", "user", "-o", "json"])).expect("json");
    assert!(
        by_user.iter().any(|r| r["team"] == "vision" && r["user"] == "alice" && r["jobs"] == 2),
        "{by_user:?}"
    );
    // Alice sees her team only.
    let hers: Vec<serde_json::Value> =
        serde_json::from_str(&as_alice(&["usage", "-o", "json"])).expect("json");
    assert!(hers.iter().all(|r| r["team"] == "vision") && !hers.is_empty(), "{hers:?}");
    // Used comes from the simulated GPUs' utilisation while the jobs held them; waste is the rest.
    for r in &reported {
        let (allocated, used, waste) = (
            r["gpu_hours"].as_f64().expect("allocated"),
            r["used_gpu_hours"].as_f64().expect("used"),
            r["waste_gpu_hours"].as_f64().expect("waste"),
        );
        assert!(used > 0.0 && used <= allocated + 1e-9, "{r}");
        assert!((waste - (allocated - used)).abs() < 1e-9, "{r}");
    }
    let csv = cluster.gantry(&["usage", "-o", "csv"]);
    assert!(
        csv.starts_with("team,user,gpu_hours,used_gpu_hours,waste_gpu_hours,jobs,stalled_gpu_hours\n"),
        "{csv}"
    );
    let yaml = cluster.gantry(&["usage", "-o", "yaml"]);
    assert!(yaml.contains("used_gpu_hours:") && yaml.contains("waste_gpu_hours:"), "{yaml}");
    // `nodes` is an sinfo-like summary: counts every user may see, no job names.
    let nodes: Vec<serde_json::Value> =
        serde_json::from_str(&as_alice(&["nodes", "-o", "json"])).expect("json");
    assert_eq!(nodes.len(), 1);
    assert_eq!((nodes[0]["gpus"].as_u64(), nodes[0]["gpus_free"].as_u64()), (Some(4), Some(4)), "{nodes:?}");
    assert_eq!(nodes[0]["gpu_model"], "NVIDIA A100-SXM4-80GB");
    assert!(
        nodes[0]["state"] == "ready" && nodes[0]["id"].is_string(),
        "the node's own fields stay: {nodes:?}"
    );
    let table = cluster.gantry(&["nodes"]);
    assert!(table.contains("GPUS FREE") && table.contains("4/4"), "{table}");
}
