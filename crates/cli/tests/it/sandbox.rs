//! The job sandbox through `gantry up`: a job cannot read what the control plane and the agent
//! keep, and `gantry logs` and `gantry job` show the log limit at work.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use gantry_agent::runner::sandbox::running_as_root;

use crate::harness::{Cluster, eventually};

/// Waits for job `id` to end; returns its state.
fn ended(cluster: &Cluster, id: &str) -> String {
    let job = eventually(Duration::from_secs(60), "the job to end", || {
        cluster.jobs().into_iter().find(|j| {
            j["id"].as_i64() == id.parse().ok()
                && ["succeeded", "failed", "cancelled"].contains(&j["state"].as_str().unwrap_or_default())
        })
    });
    job["state"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_job_under_gantry_up_cannot_read_the_store_the_client_config_the_tokens_or_other_jobs_output() {
    if !running_as_root() {
        eprintln!("note: this test needs root (jobs run as the agent's user otherwise) and was skipped");
        return;
    }
    let secrets = [("GANTRY_JOIN_TOKEN", "join-secret-4f1c"), ("GANTRY_TOKEN", "token-secret-9a2e")];
    let cluster = Cluster::start_with_env(&["--log-limit", "1MiB"], &secrets);
    // HOME stays open (0755 from tempdir): the data directory's own 0700 must protect the store,
    // and the probe below is protected by its mode alone.
    std::fs::set_permissions(cluster.home.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let probe = cluster.outside.path().join("probe");
    std::fs::create_dir(&probe).expect("probe dir");
    std::fs::write(probe.join("secret"), "probe-secret-77d0").expect("probe");
    std::fs::set_permissions(probe.join("secret"), std::fs::Permissions::from_mode(0o600)).expect("chmod");

    let first = cluster.gantry(&["submit", "--", "echo", "first-jobs-secret"]).trim().to_owned();
    assert_eq!(ended(&cluster, &first), "succeeded");
    let (home, data) = (cluster.home.path().display(), cluster.data_dir());
    let data = data.display();
    let script = format!(
        "id -un; cat {home}/.config/gantry/config.toml; cat {data}/gantry.db; cat {data}/agent/credential; \
         cat {data}/logs/{first}/stdout; cat {probe}/secret; env; echo done",
        probe = probe.display()
    );
    let second = cluster.gantry(&["submit", "--", "sh", "-c", &script]).trim().to_owned();
    ended(&cluster, &second);
    let out = cluster.try_gantry(&["logs", &second]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // The admin's jobs go to team `default`, which runs as a user of its own.
    assert!(stdout.starts_with("gantry-t-default\n") && stdout.ends_with("done\n"), "{stdout}");
    assert_eq!(stderr.matches("Permission denied").count(), 5, "{stderr}");
    let agent_token =
        std::fs::read_to_string(cluster.data_dir().join("agent/credential")).expect("node credential");
    let admin_token = cluster.token();
    let leaks =
        [secrets[0].1, secrets[1].1, agent_token.trim(), &admin_token, "first-jobs-secret", "probe-secret"];
    for secret in leaks {
        assert!(!stdout.contains(secret) && !stderr.contains(secret), "`{secret}` reached the job: {stdout}");
    }
    let detail = cluster.gantry(&["job", &second]);
    assert!(detail.contains("at most 1 MiB per stream"), "{detail}");
}

#[test]
fn job_user_star_equals_gantry_job_puts_every_team_back_in_the_one_shared_user() {
    if !running_as_root() {
        eprintln!("note: this test needs root (jobs run as the agent's user otherwise) and was skipped");
        return;
    }
    let cluster = Cluster::start(&["--job-user", "*=gantry-job"]);
    let id = cluster.gantry(&["submit", "--", "id", "-un"]).trim().to_owned();
    assert_eq!(ended(&cluster, &id), "succeeded");
    assert_eq!(cluster.gantry(&["logs", &id]), "gantry-job\n");
}

#[test]
fn gantry_logs_says_how_much_output_the_log_limit_rotated_away() {
    let cluster = Cluster::start(&["--log-limit", "64KiB"]);
    let script = "yes 0123456789abcdef | head -c 1048576; echo end-of-output";
    let id = cluster.gantry(&["submit", "--", "sh", "-c", script]).trim().to_owned();
    assert_eq!(ended(&cluster, &id), "succeeded");
    let out = cluster.try_gantry(&["logs", &id]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.ends_with("end-of-output\n"), "the newest output is kept");
    assert!(stdout.len() <= 64 << 10, "{} bytes kept", stdout.len());
    let dropped = 1_048_576 + 14 - stdout.len();
    assert!(stderr.contains(&format!("{dropped} bytes of stdout were rotated away")), "{stderr}");
    let followed = cluster.try_gantry(&["logs", "--follow", &id]);
    assert_eq!(String::from_utf8_lossy(&followed.stdout), stdout);
}

#[test]
fn a_job_gets_the_variables_it_declares_and_none_that_gantry_sets() {
    let cluster = Cluster::start(&[]);
    let id = cluster
        .gantry(&["submit", "-e", "GREETING=hello there", "--", "sh", "-c", "echo \"$GREETING\""])
        .trim()
        .to_owned();
    assert_eq!(ended(&cluster, &id), "succeeded", "{}", cluster.gantry(&["job", &id]));
    assert_eq!(cluster.gantry(&["logs", &id]), "hello there\n");
    let refused = cluster.try_gantry(&["submit", "-e", "CUDA_VISIBLE_DEVICES=0,1,2,3", "--", "true"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("set by Gantry"), "{refused:?}");
    let malformed = cluster.try_gantry(&["submit", "-e", "NOEQUALS", "--", "true"]);
    assert!(!malformed.status.success());
}

#[test]
fn a_job_that_asks_for_no_memory_or_cpu_runs_under_its_gpus_share_of_the_node_by_default() {
    let cluster = Cluster::start(&["--simulated-gpus", "4xA100-80GB"]);
    let cpu_only = cluster.gantry(&["submit", "--", "true"]).trim().to_owned();
    let two = cluster.gantry(&["submit", "--gpus", "2", "--", "true"]).trim().to_owned();
    let asked =
        cluster.gantry(&["submit", "--gpus", "2", "--memory", "1GiB", "--", "true"]).trim().to_owned();
    let limits = |id: &str| {
        assert_eq!(ended(&cluster, id), "succeeded", "{}", cluster.gantry(&["job", id]));
        let detail: serde_json::Value =
            serde_json::from_str(&cluster.gantry(&["job", id, "-o", "json"])).expect("json");
        let l = &detail["limits"];
        (l["memory_mib"].as_u64().expect("memory"), l["cpu_milli"].as_u64().expect("cpu"))
    };
    let (memory, cpu) = limits(&cpu_only);
    assert!(
        memory > 0 && cpu >= 1000,
        "a job that asks for nothing is limited by default: {memory} MiB, {cpu}m"
    );
    assert_eq!(limits(&two).0, 2 * memory, "two GPUs, two shares");
    assert_eq!(limits(&asked).0, 1024, "what a job asks for is its limit");
    assert!(cluster.gantry(&["job", &cpu_only]).contains("limits    memory"), "the detail names the limits");
}

#[test]
fn a_running_jobs_output_stops_at_its_teams_log_quota_with_a_line_saying_so() {
    let cluster = Cluster::start(&[]);
    cluster.gantry(&["team", "set", "default", "--log-quota", "1MiB"]);
    // About 2 MB a second, for as long as it runs.
    let script = "while true; do head -c 100000 /dev/zero | tr '\\0' x; echo; sleep 0.05; done";
    let id = cluster.gantry(&["submit", "--", "sh", "-c", script]).trim().to_owned();
    let said = eventually(Duration::from_secs(40), "the output to be cut at the quota", || {
        let out = cluster.try_gantry(&["logs", &id, "--tail", "3"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("log quota of 1 MiB is full").then_some(text)
    });
    assert!(said.contains("team default's"), "{said}");
    let kept = || {
        let teams: serde_json::Value =
            serde_json::from_str(&cluster.gantry(&["teams", "-o", "json"])).expect("teams json");
        let default = teams.as_array().and_then(|t| t.iter().find(|t| t["name"] == "default").cloned());
        default.and_then(|t| t["log_bytes"].as_u64()).unwrap_or(0)
    };
    let size = |id: &str| {
        let dir = cluster.data_dir().join("logs").join(id).join("1");
        std::fs::metadata(dir.join("stdout")).map_or(0, |m| m.len())
    };
    let (first, first_kept) = (size(&id), kept());
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(size(&id), first, "nothing more is kept while it runs on");
    assert!(first_kept < 32 << 20, "held near the quota, not the log limit: {first_kept} bytes");
    let job: serde_json::Value =
        serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).expect("json");
    assert_eq!(job["job"]["state"], "running", "the job itself runs on");
    cluster.gantry(&["cancel", &id]);
}

#[test]
fn a_users_home_persists_from_job_to_job_and_no_other_team_reads_it() {
    let cluster = Cluster::start(&[]);
    let token = |team: &str, user: &str| {
        cluster.gantry(&["token", "create", "--team", team, "--user", user]).trim().to_owned()
    };
    let (alice, bob, carol) = (token("vision", "alice"), token("vision", "bob"), token("nlp", "carol"));
    let run = |token: &str, script: &str| {
        let out = crate::harness::command(cluster.home.path())
            .env("GANTRY_TOKEN", token)
            .args(["run", "--", "sh", "-c", script])
            .output()
            .expect("gantry run");
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // What a job leaves in ~ (a cache, a --user install) the user's next job finds.
    let (code, home) = run(&alice, "mkdir -p ~/.cache/hf && echo weights > ~/.cache/hf/model && echo $HOME");
    assert_eq!(code, Some(0), "{home}");
    let home = home.trim().to_owned();
    assert!(home.ends_with("/vision/alice"), "a home per team and user: {home}");
    let (code, read) = run(&alice, "cat ~/.cache/hf/model; pwd");
    assert_eq!(code, Some(0), "{read}");
    let mut lines = read.lines();
    assert_eq!(lines.next(), Some("weights"), "{read}");
    assert_ne!(lines.next(), Some(home.as_str()), "jobs still start in their own work directory");
    // Another user of the team has a home of their own.
    let (_, other) = run(&bob, "echo $HOME; test -e ~/.cache/hf/model && echo found || echo absent");
    assert!(other.contains("/vision/bob") && other.contains("absent"), "{other}");
    if running_as_root() {
        // Another team's job runs as another user: alice's home is closed to it.
        let (code, tried) = run(&carol, &format!("cat {home}/.cache/hf/model"));
        assert!(code != Some(0) && !tried.contains("weights"), "{code:?} {tried}");
    }
}

#[test]
fn a_teams_volume_outlives_its_jobs_mounts_read_only_when_asked_and_no_other_team_mounts_it() {
    if !running_as_root() {
        eprintln!("skipped: volumes need a root agent (mount namespaces)");
        return;
    }
    let cluster = Cluster::start(&[]);
    cluster.wait_for_agent();
    let token = |team: &str, user: &str| {
        cluster.gantry(&["token", "create", "--team", team, "--user", user]).trim().to_owned()
    };
    let (alice, carol) = (token("vision", "alice"), token("nlp", "carol"));
    let as_user = |token: &str, args: &[&str]| {
        crate::harness::command(cluster.home.path())
            .env("GANTRY_TOKEN", token)
            .args(args)
            .output()
            .expect("gantry")
    };
    let text = |out: &std::process::Output| {
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    };
    // Operators and admins create volumes; a member may not.
    let denied = as_user(&alice, &["volume", "create", "data", "--team", "vision"]);
    assert!(!denied.status.success(), "{}", text(&denied));
    cluster.gantry(&["volume", "create", "data", "--team", "vision", "--size", "1M"]);
    let listed = text(&as_user(&alice, &["volumes"]));
    assert!(listed.contains("data") && listed.contains("vision"), "{listed}");
    assert!(!text(&as_user(&carol, &["volumes"])).contains("data"), "another team lists none of vision's");

    let run = |token: &str, volume: &str, script: &str| {
        as_user(token, &["run", "--volume", volume, "--", "sh", "-c", script])
    };
    let wrote = run(&alice, "data:/mnt/data", "echo weights > /mnt/data/model && echo written");
    assert!(wrote.status.success(), "{}", text(&wrote));
    let read =
        run(&alice, "data:/mnt/data:ro", "cat /mnt/data/model; echo x > /mnt/data/other || echo read-only");
    let said = text(&read);
    assert!(said.contains("weights") && said.contains("read-only"), "{said}");
    // Another team neither mounts it nor reaches its files from a job.
    let other = run(&carol, "data:/mnt/data", "true");
    let said = text(&other);
    assert!(!other.status.success() && said.contains("volume data not found in team nlp"), "{said}");
    let files = cluster.outside.path().join("work/volumes/vision/data/model");
    assert!(files.exists(), "the volume lives under the work root: {}", files.display());
    let peek = as_user(&carol, &["run", "--", "cat", &files.display().to_string()]);
    assert!(!peek.status.success() && !text(&peek).contains("weights"), "{}", text(&peek));
    // Past its size, a writable mount is refused with the figures; read-only still works.
    let fill = run(&alice, "data:/mnt/data", "head -c 2000000 /dev/zero > /mnt/data/big");
    assert!(fill.status.success(), "{}", text(&fill));
    let refused = run(&alice, "data:/mnt/data", "true");
    assert!(!refused.status.success(), "{}", text(&refused));
    let jobs = cluster.jobs();
    assert!(
        jobs.iter().any(|j| j["reason"].as_str().is_some_and(|r| r.contains("past its size"))),
        "{jobs:?}"
    );
    assert!(run(&alice, "data:/mnt/data:ro", "test -s /mnt/data/big").status.success());
    // A bad mount path is refused at submit.
    let bad = run(&alice, "data:/etc/cron.d", "true");
    assert!(!bad.status.success() && text(&bad).contains("mount it under one of"), "{}", text(&bad));
}
