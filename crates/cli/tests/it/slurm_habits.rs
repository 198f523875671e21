//! Issue 9's Slurm and kubectl habits through the real binary: arrays with a concurrency limit,
//! dependencies, `apply -f`, labels and selectors, GPU models, work directories, `-o yaml`,
//! `jobs -w`, and what a member of another team can (not) do with them.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};
use std::time::Duration;

use gantry_store::{JobState, Store};

use crate::harness::{Cluster, command, eventually};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn job(cluster: &Cluster, id: &str) -> serde_json::Value {
    let detail: serde_json::Value =
        serde_json::from_str(&cluster.gantry(&["job", id, "-o", "json"])).expect("job json");
    detail["job"].clone()
}

fn until_state(cluster: &Cluster, id: &str, state: &str) -> serde_json::Value {
    eventually(Duration::from_secs(60), &format!("job {id} {state}"), || {
        let j = job(cluster, id);
        (j["state"] == state).then_some(j)
    })
}

/// The most members of an array that ever held an allocation at once, from the jobs'
/// transitions in the store (scheduled until an end or a return to pending).
fn most_at_once(cluster: &Cluster, ids: &[i64]) -> usize {
    let store = cluster.store();
    let mut edges: Vec<(i64, i32)> = Vec::new();
    for id in ids {
        for t in store.transitions(*id).expect("transitions") {
            if t.to == JobState::Scheduled {
                edges.push((t.at, 1));
            } else if t.from.is_some_and(JobState::is_active) && !t.to.is_active() {
                edges.push((t.at, -1));
            }
        }
    }
    // Ends before starts at the same instant: a member that ended frees its place first.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn an_array_runs_one_job_per_index_never_more_than_its_limit_at_once() {
    let cluster = Cluster::start(&["--simulated-gpus", "4xA100-80GB"]);
    let out = cluster.gantry(&[
        "submit",
        "--array",
        "0-5%2",
        "--gpus",
        "1",
        "--name",
        "sweep",
        "--",
        "sh",
        "-c",
        "echo index=$GANTRY_ARRAY_INDEX array=$GANTRY_ARRAY_ID; sleep 1",
    ]);
    let array = out.trim().to_owned();
    let mut most_seen = 0;
    let members = eventually(Duration::from_secs(90), "every member to succeed", || {
        let list: Vec<serde_json::Value> =
            serde_json::from_str(&cluster.gantry(&["jobs", "--array", &array, "-o", "json"])).expect("json");
        let active = list.iter().filter(|j| j["state"] == "running" || j["state"] == "scheduled").count();
        most_seen = most_seen.max(active);
        assert!(active <= 2, "more than 2 members at once: {list:?}");
        (list.len() == 6 && list.iter().all(|j| j["state"] == "succeeded")).then_some(list)
    });
    let ids: Vec<i64> = members.iter().rev().map(|j| j["id"].as_i64().expect("id")).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "listed newest first: {ids:?}");
    assert_eq!(ids[0].to_string(), array, "the array's id is its first member's");
    let indices: Vec<u64> =
        members.iter().rev().map(|j| j["array"]["index"].as_u64().expect("index")).collect();
    assert_eq!(indices, [0, 1, 2, 3, 4, 5]);
    assert_eq!(most_at_once(&cluster, &ids), 2, "the limit was used and never passed");
    assert!(most_seen <= 2);

    // Each member knows its index and array; `12_3` names a member.
    let member = format!("{array}_3");
    let id3 = job(&cluster, &member)["id"].as_i64().expect("id").to_string();
    assert_eq!(cluster.gantry(&["logs", &id3]), format!("index=3 array={array}\n"));
    assert_eq!(cluster.gantry(&["logs", &member]), format!("index=3 array={array}\n"), "logs takes 12_3 too");
    let table = cluster.gantry(&["jobs"]);
    assert!(table.lines().next().is_some_and(|h| h.contains("ARRAY") && h.contains("USER")), "{table}");
    assert!(table.contains(&member), "{table}");
    let yaml = cluster.gantry(&["job", &member, "-o", "yaml"]);
    assert!(yaml.contains(&format!("id: {id3}")) && yaml.contains("submitted_rfc3339:"), "{yaml}");
    assert!(yaml.contains("index: 3") && yaml.contains("max_running: 2"), "{yaml}");

    // Cancelling the array's id cancels every unfinished member.
    let id = cluster.gantry(&["submit", "--array", "1,3,5", "--", "sleep", "600"]).trim().to_owned();
    eventually(Duration::from_secs(30), "members running", || {
        let j = job(&cluster, &id);
        (j["state"] == "running").then_some(())
    });
    let said = cluster.gantry(&["cancel", &id]);
    assert!(said.contains(&format!("array {id} cancelled")), "{said}");
    eventually(Duration::from_secs(60), "the array to end", || {
        let list: Vec<serde_json::Value> =
            serde_json::from_str(&cluster.gantry(&["jobs", "--array", &id, "-o", "json"])).expect("json");
        (list.len() == 3 && list.iter().all(|j| j["state"] == "cancelled")).then_some(())
    });
    cluster.assert_no_double_allocation();
}

#[test]
fn dependencies_wait_for_their_jobs_and_end_when_they_can_never_be_met() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    let first = cluster.gantry(&["submit", "--", "sleep", "2"]).trim().to_owned();
    let then = cluster.gantry(&["submit", "--after", &format!("ok:{first}"), "--", "true"]).trim().to_owned();
    let waiting = eventually(Duration::from_secs(30), "the reason to name the dependency", || {
        let j = job(&cluster, &then);
        let reason = j["reason"].as_str().unwrap_or_default().to_owned();
        reason.contains(&format!("waiting for dependency {first}")).then_some(j)
    });
    assert_eq!(waiting["state"], "pending");
    let before = until_state(&cluster, &first, "succeeded");
    let after = until_state(&cluster, &then, "succeeded");
    assert!(after["started_at"].as_i64() >= before["finished_at"].as_i64(), "{before} {after}");

    let failing = cluster.gantry(&["submit", "--", "sh", "-c", "exit 1"]).trim().to_owned();
    let on_ok =
        cluster.gantry(&["submit", "--after", &format!("ok:{failing}"), "--", "true"]).trim().to_owned();
    let on_any =
        cluster.gantry(&["submit", "--after", &format!("any:{failing}"), "--", "true"]).trim().to_owned();
    let on_notok =
        cluster.gantry(&["submit", "--after", &format!("notok:{failing}"), "--", "true"]).trim().to_owned();
    let ended = until_state(&cluster, &on_ok, "cancelled");
    assert_eq!(ended["reason"], format!("dependency {failing} failed"));
    until_state(&cluster, &on_any, "succeeded");
    until_state(&cluster, &on_notok, "succeeded");
    // On an array's id, a dependency waits for every member.
    let array = cluster.gantry(&["submit", "--array", "0-2", "--", "sleep", "1"]).trim().to_owned();
    let on_array =
        cluster.gantry(&["submit", "--after", &format!("ok:{array}"), "--", "true"]).trim().to_owned();
    let last = until_state(&cluster, &on_array, "succeeded")["started_at"].as_i64();
    let members: Vec<serde_json::Value> =
        serde_json::from_str(&cluster.gantry(&["jobs", "--array", &array, "-o", "json"])).expect("json");
    assert_eq!(members.len(), 3);
    for m in &members {
        assert!(m["state"] == "succeeded" && m["finished_at"].as_i64() <= last, "{m}");
    }
    let on_missing = cluster.try_gantry(&["submit", "--after", "ok:99999", "--", "true"]);
    assert!(!on_missing.status.success() && text(&on_missing.stderr).contains("not found"), "{on_missing:?}");
    let bad = cluster.try_gantry(&["submit", "--after", "soon:1", "--", "true"]);
    assert!(text(&bad.stderr).contains("known: ok, notok, any"), "{bad:?}");
}

#[test]
fn apply_submits_a_job_file_once_and_says_where_a_bad_file_is_wrong() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    let file = cluster.home.path().join("job.yaml");
    std::fs::write(
        &file,
        "# a training run\nname: from-yaml\ncommand: [sh, -c, 'echo $GREETING; pwd']\ngpus: 1\n\
         gpu_model: [A100]\nenv: {GREETING: hello}\nlabels: {exp: yaml}\nworkdir: out/run\ntime: 10m\n",
    )
    .expect("write");
    let path = file.display().to_string();
    let said = cluster.gantry(&["apply", "-f", &path]);
    let id = said.strip_prefix("job ").and_then(|s| s.strip_suffix(" created\n")).expect(&said).to_owned();
    assert_eq!(cluster.gantry(&["apply", "-f", &path]), format!("job {id} unchanged\n"));
    let j = until_state(&cluster, &id, "succeeded");
    assert_eq!((j["time_limit_s"].as_u64(), j["labels"]["exp"].as_str()), (Some(600), Some("yaml")));
    let out = cluster.gantry(&["logs", &id]);
    assert!(out.starts_with("hello\n") && out.trim_end().ends_with("/out/run"), "{out}");

    std::fs::write(&file, "name: x\ncommand: [true]\ngpu: 2\n").expect("write");
    let bad = cluster.try_gantry(&["apply", "-f", &path]);
    let err = text(&bad.stderr);
    assert!(!bad.status.success() && err.contains("unknown field `gpu`") && err.contains("line 3"), "{err}");
    std::fs::write(&file, "command: [true]\nworkdir: ../../etc\n").expect("write");
    let bad = cluster.try_gantry(&["apply", "-f", &path]);
    assert!(text(&bad.stderr).contains("workdir"), "{bad:?}");

    // GPU models: one no node has is refused at once, unless the caller waits for capacity.
    let none = cluster.try_gantry(&["submit", "--gpu-model", "H100", "--gpus", "1", "--", "true"]);
    let err = text(&none.stderr);
    assert!(err.contains("no registered node has a GPU of model H100") && err.contains("A100"), "{err}");
    cluster.gantry(&["submit", "--gpu-model", "H100", "--gpus", "1", "--wait-for-capacity", "--", "true"]);
    let slash = cluster.try_gantry(&["submit", "--workdir", "/etc", "--", "true"]);
    assert!(text(&slash.stderr).contains("absolute"), "{slash:?}");
}

#[test]
fn labels_select_jobs_in_yaml_and_watch_streams_their_changes() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let mut watch = command(cluster.home.path())
        .args(["jobs", "-w", "-o", "json", "-l", "exp=a"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("watch");
    let a = cluster.gantry(&["submit", "-l", "exp=a", "-l", "seed=1", "--", "sleep", "1"]).trim().to_owned();
    let b = cluster.gantry(&["submit", "--label", "exp=b", "--", "true"]).trim().to_owned();
    let mut states: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let done = |states: &BTreeMap<String, Vec<String>>| {
        states.get(&a).and_then(|s| s.last()).is_some_and(|l| l == "succeeded")
    };
    while !done(&states) {
        let line = lines.next().expect("watch keeps printing").expect("line");
        let j: serde_json::Value = serde_json::from_str(&line).expect("one JSON document per line");
        assert!(j["submitted_rfc3339"].is_string(), "{j}");
        states.entry(j["id"].to_string()).or_default().push(j["state"].as_str().expect("state").to_owned());
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(!states.contains_key(&b), "the selector holds while watching: {states:?}");
    assert!(states[&a].len() >= 2, "a line per change: {states:?}");

    let yaml = cluster.gantry(&["jobs", "-l", "exp=a,seed=1", "-o", "yaml"]);
    assert!(yaml.contains(&format!("id: {a}")) && !yaml.contains(&format!("id: {b}")), "{yaml}");
    assert!(yaml.contains("exp: a") && yaml.contains("submitted_rfc3339:"), "{yaml}");
    assert!(cluster.gantry(&["jobs", "-l", "exp=c", "-o", "json"]).trim() == "[]");
    let bad = cluster.try_gantry(&["jobs", "-l", "exp"]);
    assert!(!bad.status.success() && text(&bad.stderr).contains("KEY=VALUE"), "{bad:?}");
    let nodes = cluster.gantry(&["nodes", "-o", "yaml"]);
    assert!(nodes.contains("last_heartbeat_rfc3339:") && nodes.contains("gpus: 1"), "{nodes}");
}

#[test]
fn a_member_of_another_team_cannot_depend_on_select_or_cancel_a_teams_array() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    let token = |team: &str, user: &str| {
        cluster.gantry(&["token", "create", "--team", team, "--user", user]).trim().to_owned()
    };
    let (bob, eve) = (token("nlp", "bob"), token("vision", "eve"));
    let as_user = |secret: &str, args: &[&str]| -> Output {
        command(cluster.home.path()).env("GANTRY_TOKEN", secret).args(args).output().expect("run")
    };
    let out = as_user(&bob, &["submit", "--array", "0-2", "-l", "exp=secret", "--", "sleep", "600"]);
    assert!(out.status.success(), "{out:?}");
    let array = text(&out.stdout).trim().to_owned();

    let hostile = [
        vec!["submit".to_owned(), "--after".into(), format!("ok:{array}"), "--".into(), "true".into()],
        vec!["cancel".into(), array.clone()],
        vec!["cancel".into(), format!("{array}_1")],
        vec!["job".into(), format!("{array}_0")],
    ];
    for args in &hostile {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = as_user(&eve, &args);
        let err = text(&out.stderr);
        assert!(!out.status.success() && err.contains("not found"), "{args:?}: {err}");
        assert!(!err.contains("nlp") && !err.contains("bob"), "nothing of the other team leaks: {err}");
    }
    for args in [["jobs", "-l", "exp=secret", "-o", "json"], ["jobs", "--array", &array, "-o", "json"]] {
        let out = as_user(&eve, &args);
        assert_eq!(text(&out.stdout).trim(), "[]", "{args:?}: {out:?}");
    }
    let members: Vec<serde_json::Value> =
        serde_json::from_str(&text(&as_user(&bob, &["jobs", "--array", &array, "-o", "json"]).stdout))
            .expect("json");
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|j| j["state"] != "cancelled"), "{members:?}");
    let mine = as_user(&bob, &["cancel", &array]);
    assert!(mine.status.success(), "{mine:?}");
}

#[test]
fn every_new_flag_is_in_help_with_an_example() {
    let cases: [(&[&str], &[&str]); 12] = [
        (
            &["submit"],
            &[
                "--array",
                "0-99%8",
                "--after",
                "ok:12,any:13",
                "--gpu-model",
                "A100,H100",
                "--workdir",
                "--label",
                "exp=lr-sweep",
            ],
        ),
        (&["apply"], &["-f", "gantry apply -f job.yaml", "gpus: 2..8"]),
        (&["jobs"], &["--selector", "-l exp=lr-sweep", "--watch", "gantry jobs -w", "yaml", "--array"]),
        (&["job"], &["12_3 -o yaml"]),
        (&["nodes"], &["-o yaml"]),
        (&["usage"], &["WASTE", "csv", "yaml"]),
        (&["submit"], &["--replicas", "gantry submit --replicas 4 --gpus 2"]),
        (
            &["logs"],
            &["--previous", "gantry logs 12 --previous", "--attempt", "gantry logs 12 --attempt 1", "12_3"],
        ),
        (&["up"], &["--stop-jobs-on-exit", "gantry up --stop-jobs-on-exit"]),
        (
            &["agent"],
            &[
                "--stop-jobs-on-exit",
                "GANTRY_JOIN_TOKEN=gty_… gantry agent",
                "--join-token-file",
                "--advertise-addr 10.0.0.7",
            ],
        ),
        (&["submit"], &["MIN..MAX", "--gpus 2..8", "gantry submit --gpus 2..8", "WORLD_SIZE"]),
        (&["up"], &["--resize-interval", "gantry up --resize-interval 10m"]),
    ];
    for (command, wanted) in cases {
        let mut args = command.to_vec();
        args.push("--help");
        let out = crate::gantry(&args);
        let help = text(&out.stdout);
        for w in wanted {
            assert!(help.contains(w), "`gantry {} --help` lacks {w}:\n{help}", command.join(" "));
        }
    }
}

#[test]
fn applying_an_edited_job_file_updates_the_pending_array_in_place_and_a_started_job_needs_replace() {
    // One GPU held by a blocker: the array stays pending while it is edited.
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let blocker = cluster.gantry(&["submit", "--gpus", "1", "--", "sleep", "120"]).trim().to_owned();
    until_state(&cluster, &blocker, "running");
    let file = cluster.home.path().join("sweep.yaml");
    let path = file.display().to_string();
    std::fs::write(&file, "name: sweep\ncommand: [echo, one]\ngpus: 1\narray: 0-3\n").expect("write");
    let said = cluster.gantry(&["apply", "-f", &path]);
    let id = said.strip_prefix("array ").and_then(|s| s.strip_suffix(" created\n")).expect(&said).to_owned();
    assert_eq!(cluster.gantry(&["apply", "-f", &path]), format!("array {id} unchanged\n"));

    // Edited: the same array, its command and indices changed in place; no second array.
    std::fs::write(&file, "name: sweep\ncommand: [echo, two]\ngpus: 1\narray: 0-1,5\npriority: 5\n")
        .expect("write");
    assert_eq!(cluster.gantry(&["apply", "-f", &path]), format!("array {id} configured\n"));
    let members: Vec<serde_json::Value> =
        serde_json::from_str(&cluster.gantry(&["jobs", "-o", "json"])).expect("jobs json");
    let sweep: Vec<&serde_json::Value> = members.iter().filter(|j| j["name"] == "sweep").collect();
    let live: Vec<u64> = sweep
        .iter()
        .filter(|j| j["state"] == "pending")
        .filter_map(|j| j["array"]["index"].as_u64())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(live, [0, 1, 5], "{sweep:?}");
    assert!(sweep.iter().all(|j| j["array"]["id"].as_i64() == id.parse().ok()), "one array: {sweep:?}");
    assert!(
        sweep
            .iter()
            .filter(|j| j["state"] == "pending")
            .all(|j| j["command"] == serde_json::json!(["echo", "two"]) && j["priority"] == 5),
        "{sweep:?}"
    );
    let dropped = sweep.iter().filter(|j| j["state"] == "cancelled").count();
    assert_eq!(dropped, 2, "indices 2 and 3 left the array: {sweep:?}");

    // A started job: refused with the way out, then replaced.
    cluster.gantry(&["cancel", &blocker]);
    let first =
        sweep.iter().find(|j| j["array"]["index"] == 0).and_then(|j| j["id"].as_i64()).expect("member 0");
    until_state(&cluster, &first.to_string(), "succeeded");
    let job = cluster.home.path().join("long.yaml");
    let long = job.display().to_string();
    std::fs::write(&job, "name: long\ncommand: [sleep, '100']\n").expect("write");
    let said = cluster.gantry(&["apply", "-f", &long]);
    let old = said.strip_prefix("job ").and_then(|s| s.strip_suffix(" created\n")).expect(&said).to_owned();
    until_state(&cluster, &old, "running");
    std::fs::write(&job, "name: long\ncommand: [sleep, '200']\n").expect("write");
    let refused = cluster.try_gantry(&["apply", "-f", &long]);
    let err = text(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("--replace") && err.contains(&format!("job {old}")),
        "{err}"
    );
    let said = cluster.gantry(&["apply", "--replace", "-f", &long]);
    assert!(said.contains("replaced") && said.contains(&format!("(job {old} cancelled)")), "{said}");
    let new = said.split_whitespace().nth(1).expect("id").to_owned();
    until_state(&cluster, &new, "running");
    until_state(&cluster, &old, "cancelled");
    cluster.gantry(&["cancel", &new]);
}

#[test]
fn an_sbatch_array_script_gets_slurms_variables_and_each_member_a_different_task_id() {
    let cluster = Cluster::start(&["--simulated-gpus", "4xA100-80GB"]);
    let dir = tempfile::tempdir().expect("dir");
    let script = dir.path().join("sweep.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n#SBATCH --array=0-3 -J sweep\n\
         echo task=$SLURM_ARRAY_TASK_ID array=$SLURM_ARRAY_JOB_ID job=$SLURM_JOB_ID name=$SLURM_JOB_NAME ntasks=$SLURM_NTASKS\n",
    )
    .expect("script");
    let out = cluster.gantry(&["submit", "--no-upload", &script.display().to_string()]);
    let array = out.trim().to_owned();
    let members = eventually(Duration::from_secs(90), "every member to succeed", || {
        let list: Vec<serde_json::Value> =
            serde_json::from_str(&cluster.gantry(&["jobs", "--array", &array, "-o", "json"])).expect("json");
        (list.len() == 4 && list.iter().all(|j| j["state"] == "succeeded")).then_some(list)
    });
    let mut tasks = std::collections::BTreeSet::new();
    for m in &members {
        let id = m["id"].as_i64().expect("id").to_string();
        let line = cluster.gantry(&["logs", &id]);
        let index = m["array"]["index"].to_string();
        assert_eq!(line, format!("task={index} array={array} job={id} name=sweep ntasks=1\n"));
        tasks.insert(index);
    }
    assert_eq!(tasks.len(), 4, "four different SLURM_ARRAY_TASK_IDs: {tasks:?}");
}
