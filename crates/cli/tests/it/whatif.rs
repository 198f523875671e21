//! `gantry whatif`: replaying the cluster's own history. The fidelity check of issue 23: a
//! history of a few hundred short jobs of mixed sizes, run through `gantry up` on a simulated
//! fleet, replayed on the unchanged fleet, gives back the recorded mean wait and mean job
//! completion time within 5 %; adding nodes lowers the mean wait; members cannot read the history.

use std::time::Duration;

use crate::harness::{Cluster, command, eventually};

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn within(a: f64, b: f64, share: f64) -> bool {
    (a - b).abs() <= share * b.abs()
}

#[test]
fn a_replay_of_the_unchanged_fleet_gives_back_the_recorded_waits_and_more_nodes_shorten_them() {
    let cluster = Cluster::start(&["--simulated-gpus", "8xA100-80GB"]);
    // Three waves of arrays of 1-, 2- and 4-GPU jobs of 0.2 to 1.0 s: the queue fills, drains,
    // and fills again, with every size competing for the same eight GPUs.
    let script = "sleep 0.$(( (GANTRY_ARRAY_INDEX * 7) % 9 + 2 ))";
    for wave in 0..3 {
        for (gpus, count) in [("1", "0-59"), ("2", "0-29"), ("4", "0-9")] {
            let team = if gpus == "2" { "nlp" } else { "vision" };
            cluster.gantry(&[
                "submit",
                "--gpus",
                gpus,
                "--team",
                team,
                "--array",
                count,
                "--name",
                &format!("w{wave}-g{gpus}"),
                "--",
                "sh",
                "-c",
                script,
            ]);
        }
        std::thread::sleep(Duration::from_secs(4));
    }
    eventually(Duration::from_secs(240), "every job to finish", || {
        let jobs = cluster.jobs();
        (jobs.len() == 300 && jobs.iter().all(|j| j["state"] == "succeeded")).then_some(())
    });
    let c = json(&cluster.gantry(&["whatif", "--since", "1h", "--seeds", "1", "--json"]));
    let (rec, base) = (&c["recorded"], &c["baseline"]);
    assert_eq!(rec["jobs"], 300, "{c}");
    assert_eq!(base["jobs"], 300, "{c}");
    let (rw, bw) =
        (rec["wait_mean_s"].as_f64().expect("a number"), base["wait_mean_s"].as_f64().expect("a number"));
    let (rj, bj) =
        (rec["jct_mean_s"].as_f64().expect("a number"), base["jct_mean_s"].as_f64().expect("a number"));
    eprintln!(
        "whatif fidelity: mean wait recorded {rw:.3} s, replayed {bw:.3} s; mean JCT recorded {rj:.3} s, replayed {bj:.3} s; reaction {} s; GPU use {} % recorded, {} % replayed",
        c["reaction_s"], rec["gpu_use_pct"], base["gpu_use_pct"]
    );
    assert!(rw > 2.0, "the history must queue for the check to mean anything: {c}");
    assert!(within(bw, rw, 0.05), "mean wait: replayed {bw:.2} s, recorded {rw:.2} s\n{c}");
    assert!(within(bj, rj, 0.05), "mean JCT: replayed {bj:.2} s, recorded {rj:.2} s\n{c}");
    assert_eq!(c["teams"].as_array().map(Vec::len), Some(2), "{c}");

    let more = json(&cluster.gantry(&[
        "whatif",
        "--since",
        "1h",
        "--add",
        "1x8xA100-80GB",
        "--seeds",
        "3",
        "--json",
    ]));
    let (before, after) = (
        more["baseline"]["wait_mean_s"].as_f64().expect("a number"),
        more["changed"]["wait_mean_s"].as_f64().expect("a number"),
    );
    assert!(
        after < before * 0.5,
        "twice the GPUs should at least halve the mean wait: {before:.2} → {after:.2}\n{more}"
    );
    assert_eq!(more["changed"]["gpus"], 16);
    assert!(more["baseline"]["intervals"]["wait_mean_s"].is_array(), "{more}");

    // The history is every team's: members get a sentence, not the rows.
    let member =
        cluster.gantry(&["token", "create", "--team", "vision", "--user", "alice"]).trim().to_owned();
    let out =
        command(cluster.home.path()).env("GANTRY_TOKEN", &member).args(["whatif"]).output().expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("admin"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A fleet change that cannot apply is refused before anything runs.
    let out = cluster.try_gantry(&["whatif", "--remove", "no-such-node"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no node `no-such-node`"), "{out:?}");
}
