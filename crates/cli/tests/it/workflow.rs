//! The daily workflow of issue 9 through the real binary: waiting for a result, `run`, batch
//! scripts, requests no node can hold, unknown values, the jobs table, and contexts.

use std::process::{Output, Stdio};
use std::time::Duration;

use crate::harness::{Cluster, command, eventually};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

fn job_named(cluster: &Cluster, name: &str) -> serde_json::Value {
    cluster.jobs().into_iter().find(|j| j["name"] == name).unwrap_or_else(|| panic!("no job named {name}"))
}

#[test]
fn wait_run_and_logs_follow_exit_with_the_jobs_status() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let out = cluster.try_gantry(&["submit", "--wait", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code(&out), Some(3), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    assert!(id.parse::<i64>().is_ok(), "submit --wait still prints the id first: {out:?}");
    let said = text(&out.stderr);
    assert!(said.starts_with(&format!("gantry: job {id} ")), "{said}");
    assert!(said.trim_end().ends_with(&format!("gantry: job {id} failed: exit status 3")), "{said}");

    let out = cluster.try_gantry(&["logs", "-f", &id]);
    assert_eq!(code(&out), Some(3), "logs -f exits with the job's status: {out:?}");
    assert_eq!(code(&cluster.try_gantry(&["logs", &id])), Some(0), "plain logs is not a wait");

    let out = cluster.try_gantry(&["run", "--gpus", "1", "--", "sh", "-c", "echo out; echo err >&2"]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "out\n", "run streams the output and prints nothing else on stdout");
    let said = text(&out.stderr);
    assert!(said.contains("err") && said.contains("succeeded"), "{said}");

    let out = cluster.try_gantry(&["run", "--quiet", "--", "sh", "-c", "echo bye; exit 7"]);
    assert_eq!((code(&out), text(&out.stdout).as_str(), text(&out.stderr).as_str()), (Some(7), "bye\n", ""));
    let ok = cluster.try_gantry(&["submit", "--wait", "--", "true"]);
    assert_eq!(code(&ok), Some(0), "{ok:?}");
}

#[test]
fn a_batch_script_takes_its_gantry_lines_as_flags_and_the_command_line_wins() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    let script = cluster.home.path().join("train.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n# train something\n#GANTRY --gpus 2 --name from-script\n#GANTRY -e GREETING='hello there'\n\
         echo \"$GREETING $1 from $0\"\n#GANTRY --gpus 9\n",
    )
    .expect("write script");
    let path = script.display().to_string();
    let out = cluster.try_gantry(&["run", "--quiet", "--name", "from-cli", &path, "--", "world"]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "hello there world from train.sh\n");
    let job = job_named(&cluster, "from-cli");
    assert_eq!(job["request"]["gpus"], 2, "the script's --gpus applies: {job}");
    let id = cluster.gantry(&["submit", "--gpus", "1", &path]).trim().to_owned();
    let job: serde_json::Value =
        serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).expect("json");
    assert_eq!(
        (job["job"]["request"]["gpus"].as_i64(), job["job"]["name"].as_str()),
        (Some(1), Some("from-script"))
    );

    std::fs::write(&script, "#GANTRY --server http://elsewhere:1\necho hi\n").expect("write");
    let out = cluster.try_gantry(&["submit", &path]);
    assert!(!out.status.success() && text(&out.stderr).contains("not accepted in a script"), "{out:?}");
}

#[test]
fn forgetting_the_double_dash_gets_a_hint() {
    let cluster = Cluster::start(&["--no-agent"]);
    let out = cluster.try_gantry(&["submit", "--gpus", "1", "python", "train.py"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("hint: put the job's command after `--`"), "{out:?}");
    let out = cluster.try_gantry(&["submit", "--gpus", "1", "nvidia-smi"]);
    assert!(text(&out.stderr).contains("put it after `--`"), "{out:?}");
    let out = cluster.try_gantry(&["submit", "--gpus", "1"]);
    assert!(text(&out.stderr).contains("nothing to run"), "{out:?}");
}

#[test]
fn requests_no_node_can_hold_are_refused_at_submit_in_the_users_units() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    cluster.wait_for_agent();
    let out = cluster.try_gantry(&["submit", "--gpu-memory", "100000", "--", "true"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("a 100000 MiB GPU slice, the largest GPU has 81920 MiB"), "{out:?}");
    let out = cluster.try_gantry(&["submit", "--cpu", "4000", "--", "true"]);
    assert!(text(&out.stderr).contains("4000 CPU cores, the largest node has"), "{out:?}");
    let out = cluster.try_gantry(&["submit", "--gpus", "2", "--", "true"]);
    assert!(text(&out.stderr).contains("2 GPUs, the most on one node is 1"), "{out:?}");
    assert!(text(&out.stderr).contains("--wait-for-capacity"), "{out:?}");
    let id = cluster.gantry(&["submit", "--gpus", "2", "--wait-for-capacity", "--", "true"]);
    assert!(id.trim().parse::<i64>().is_ok());
    assert_eq!(cluster.jobs().len(), 1, "only the job that asked to wait was queued");
}

#[test]
fn unknown_values_list_the_valid_ones() {
    let cluster = Cluster::start(&["--no-agent"]);
    let out = cluster.try_gantry(&["jobs", "--state", "bogus"]);
    assert!(text(&out.stderr).contains("pending") && text(&out.stderr).contains("cancelled"), "{out:?}");
    let out = cluster.try_gantry(&["gpus", "--backend", "simulated", "--simulated-gpus", "2xB200"]);
    let err = text(&out.stderr);
    assert!(err.contains("unknown GPU model") && err.contains("H100") && err.contains("A100-80GB"), "{err}");
    let out = cluster.try_gantry(&["config", "use-context", "nowhere"]);
    assert!(text(&out.stderr).contains("known: local"), "{out:?}");
}

#[test]
fn jobs_shows_short_gpu_ids_age_and_cancelling_and_json_adds_rfc3339_times() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB", "--grace", "3"]);
    let id = cluster
        .gantry(&[
            "submit",
            "--gpus",
            "1",
            "--name",
            "stubborn",
            "--",
            "sh",
            "-c",
            "trap '' TERM; sleep 60 & wait",
        ])
        .trim()
        .to_owned();
    let job = eventually(Duration::from_secs(15), "the job to run", || {
        Some(job_named(&cluster, "stubborn")).filter(|j| j["state"] == "running")
    });
    let uuid = job["gpu_uuids"][0].as_str().expect("uuid").to_owned();
    let table = cluster.gantry(&["jobs"]);
    let short: String = uuid.trim_start_matches("GPU-").chars().take(8).collect();
    assert!(table.contains(&short) && !table.contains(&uuid), "{table}");
    assert!(table.lines().next().expect("header").contains("ELAPSED"), "{table}");
    assert!(cluster.gantry(&["jobs", "-o", "wide"]).contains(&uuid));
    let submitted = job["submitted_rfc3339"].as_str().expect("rfc3339 time");
    assert!(submitted.ends_with('Z') && submitted.contains('T'), "{submitted}");
    assert!(job["submitted_at"].is_number(), "the epoch-ms field stays");

    assert!(cluster.gantry(&["cancel", &id]).contains("cancelling"));
    let table = cluster.gantry(&["jobs"]);
    assert!(table.contains("cancelling"), "a job whose process still runs shows as cancelling:\n{table}");
    eventually(Duration::from_secs(15), "the job to be cancelled", || {
        cluster.gantry(&["jobs"]).contains("cancelled").then_some(())
    });
}

/// A second `gantry up` sharing the first one's HOME, killed on drop.
struct SecondUp(std::process::Child);

impl Drop for SecondUp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_second_cluster_gets_its_own_context_and_the_first_stays_reachable() {
    use std::os::unix::fs::PermissionsExt;
    let first = Cluster::start(&["--no-agent"]);
    let home = first.home.path();
    first.gantry(&["submit", "--name", "on-first", "--", "true"]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let url = format!("https://127.0.0.1:{port}");
    let _second = SecondUp(
        command(home)
            .args(["up", "--no-agent", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(home.join("data2"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a second gantry up"),
    );
    assert!(crate::harness::wait_healthy(&url), "the second cluster answers");
    eventually(Duration::from_secs(10), "the second context to be current", || {
        first.try_gantry(&["config", "current-context"]).stdout.starts_with(b"local-2").then_some(())
    });
    assert_eq!(
        first.gantry(&["jobs", "-o", "json"]).trim(),
        "[]",
        "the current context is the second cluster"
    );
    let listed = first.gantry(&["config", "get-contexts"]);
    assert!(listed.contains(&first.url()) && listed.contains(&url), "{listed}");
    assert!(!listed.contains(&first.token()), "tokens are never listed");
    let on_first = first.gantry(&["jobs", "--context", "local", "-o", "json"]);
    assert!(on_first.contains("on-first"), "--context reaches the first cluster with its own token");
    first.gantry(&["config", "use-context", "local"]);
    assert!(first.gantry(&["jobs"]).contains("on-first"));
    let config = home.join(".config/gantry/config.toml");
    let mode = std::fs::metadata(&config).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn a_config_from_before_contexts_is_read_as_the_default_context() {
    let cluster = Cluster::start(&["--no-agent"]);
    let token = cluster.token();
    let config = cluster.home.path().join(".config/gantry/config.toml");
    let ca = cluster.ca_path();
    let legacy = format!("server = \"{}\"\ntoken = \"{token}\"\nca = \"{}\"\n", cluster.url(), ca.display());
    std::fs::write(&config, legacy).expect("write");
    assert!(cluster.try_gantry(&["jobs"]).status.success());
    assert_eq!(cluster.gantry(&["config", "current-context"]).trim(), "default");
    let out = command(cluster.home.path()).args(["jobs", "--token", "nonsense"]).output().expect("run");
    assert!(!out.status.success(), "--token overrides the context's token");
}

#[test]
fn a_job_past_its_time_limit_is_stopped_and_ends_in_timeout() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB", "--grace", "1"]);
    let script = cluster.home.path().join("long.sh");
    std::fs::write(&script, "#!/bin/sh\n#GANTRY --time 00:00:02 --name long\nsleep 60\n").expect("write");
    let started = std::time::Instant::now();
    let out = cluster.try_gantry(&["submit", "--wait", &script.display().to_string()]);
    assert_eq!(code(&out), Some(124), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "stopped long before the job would have ended");
    let job = job_named(&cluster, "long");
    assert_eq!(job["state"], "timeout", "{job}");
    assert!(job["reason"].as_str().unwrap_or_default().contains("time limit of 2s"), "{job}");
    assert_eq!(job["time_limit_s"], 2);
    let out = cluster.try_gantry(&["submit", "--time", "soon", "--", "true"]);
    assert!(text(&out.stderr).contains("is not a duration"), "{out:?}");
}

/// `gantry man | head`: the reader is gone before the first write. Before, the write panicked
/// ("failed printing to stdout: Broken pipe", exit 101); now the pipe ends it as it ends `cat`.
#[test]
fn a_closed_pipe_ends_a_printing_command_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("man")
        .env("GANTRY_CONFIG", "/nonexistent/gantry/config.toml")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gantry runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("gantry ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(13), "ended by SIGPIPE: {:?} {stderr}", out.status);
}

#[test]
fn completions_and_the_man_page_are_generated_from_the_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = crate::gantry(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        for word in ["submit", "audit", "usage", "token"] {
            assert!(text.contains(word), "{shell} completion lacks {word}");
        }
    }
    let bad = crate::gantry(&["completions", "tcsh"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("possible values"));
    let man = crate::gantry(&["man"]);
    assert!(String::from_utf8_lossy(&man.stdout).starts_with(".ie"), "roff");
    assert!(String::from_utf8_lossy(&man.stdout).contains(".TH gantry 1"));
}

#[test]
fn a_slurm_script_runs_with_its_sbatch_lines_and_names_the_options_it_does_not_apply() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    let script = cluster.home.path().join("slurm.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n#SBATCH --gres=gpu:2 -J x --time=00:01:00 --mem=2G\n#SBATCH --partition=gpu\n\
         echo \"on $CUDA_VISIBLE_DEVICES\"\n",
    )
    .expect("write script");
    let out = cluster.try_gantry(&["run", "--quiet", &script.display().to_string()]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    assert!(text(&out.stdout).starts_with("on GPU-"), "{out:?}");
    assert!(text(&out.stderr).contains("#SBATCH --partition is not applied"), "{out:?}");
    let job = job_named(&cluster, "x");
    let request = &job["request"];
    assert_eq!(
        (request["gpus"].as_i64(), request["memory_mib"].as_i64(), job["time_limit_s"].as_i64()),
        (Some(2), Some(2048), Some(60)),
        "{job}"
    );
    // Sizes take units on the command line too.
    let out = cluster.try_gantry(&["submit", "--gpu-memory", "20G", "--memory", "1GiB", "--", "true"]);
    assert_eq!(code(&out), Some(0), "{out:?}");
}

#[test]
fn queue_describe_and_the_job_filters_show_what_waits_and_why_newest_first() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let done = cluster.gantry(&["submit", "--wait", "--", "true"]).trim().to_owned();
    let script = cluster.home.path().join("train.sh");
    std::fs::write(&script, "#!/bin/sh\necho one\nsleep 60\n").expect("script");
    let running = cluster
        .gantry(&["submit", "--gpus", "1", "--time", "2m", &script.display().to_string()])
        .trim()
        .to_owned();
    eventually(Duration::from_secs(20), "the job to run", || {
        (job_named(&cluster, "train.sh")["state"] == "running").then_some(())
    });
    let waiting = cluster.gantry(&["submit", "--gpus", "1", "--", "true"]).trim().to_owned();
    let names = cluster.gantry(&["jobs", "--state", "pending,running", "-o", "name"]);
    assert_eq!(names, format!("job/{waiting}\njob/{running}\n"), "newest first");
    let all = cluster.gantry(&["jobs", "--since", "1h", "-o", "name"]);
    assert_eq!(all, format!("job/{waiting}\njob/{running}\njob/{done}\n"));
    assert_eq!(cluster.gantry(&["jobs", "--user", "nobody-here", "-o", "name"]), "");
    let queue = eventually(Duration::from_secs(10), "a reason for the waiting job", || {
        let q = cluster.gantry(&["queue"]);
        let line = q.lines().find(|l| l.starts_with(&waiting))?.to_owned();
        line.contains('(').then_some(q)
    });
    assert!(queue.lines().any(|l| l.starts_with(&running)), "{queue}");
    assert!(!queue.lines().any(|l| l.starts_with(&format!("{done} "))), "no ended job: {queue}");
    let job = cluster.gantry(&["job", &running]);
    assert!(
        job.contains("script    train.sh") && job.contains("  | sleep 60"),
        "the script as lines:\n{job}"
    );
    assert!(job.contains("time      at most 2m00s"), "{job}");
    let described = cluster.gantry(&["describe", "job", &running]);
    assert!(
        described.contains(&format!("job {running}")) && described.contains("events (newest first)"),
        "{described}"
    );
    let nodes: Vec<serde_json::Value> =
        serde_json::from_str(&cluster.gantry(&["nodes", "-o", "json"])).expect("nodes json");
    let node = nodes[0]["id"].as_str().expect("node id").to_owned();
    let described = cluster.gantry(&["describe", "node", &node]);
    assert!(described.contains(&format!("node {node}")), "{described}");
    assert!(described.contains("node.registered"), "its events: {described}");
    assert!(
        described.lines().any(|l| l.trim_start().starts_with(&format!("{running} train.sh"))),
        "{described}"
    );
    let missing = cluster.try_gantry(&["describe", "node", "no-such-node"]);
    assert!(!missing.status.success() && text(&missing.stderr).contains("not found"), "{missing:?}");
    cluster.gantry(&["cancel", &running]);
}

#[test]
fn logs_since_and_timestamps_date_each_line_by_when_the_job_wrote_it() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let script = "echo old; sleep 6; echo new; sleep 60";
    let id = cluster.gantry(&["submit", "--", "sh", "-c", script]).trim().to_owned();
    eventually(Duration::from_secs(30), "the second line", || {
        cluster.gantry(&["logs", &id]).contains("new").then_some(())
    });
    let recent = cluster.gantry(&["logs", &id, "--since", "4s"]);
    assert_eq!(recent, "new\n", "only what the last 4 s wrote");

    let dated = cluster.gantry(&["logs", &id, "--timestamps"]);
    let lines: Vec<(&str, &str)> = dated.lines().filter_map(|l| l.split_once(' ')).collect();
    assert_eq!(lines.iter().map(|(_, t)| *t).collect::<Vec<_>>(), ["old", "new"], "{dated}");
    let ms = |stamp: &str| -> i64 {
        // 2026-12-01T17:20:01.250Z: the seconds of the day suffice within one test.
        let time = stamp.split('T').nth(1).unwrap_or_default().trim_end_matches('Z');
        let parts: Vec<f64> = time.split(':').filter_map(|p| p.parse().ok()).collect();
        assert_eq!(parts.len(), 3, "an RFC 3339 time: {stamp}");
        ((parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]) * 1000.0) as i64
    };
    let gap = (ms(lines[1].0) - ms(lines[0].0)).rem_euclid(86_400_000);
    assert!((5_800..20_000).contains(&gap), "the job slept 6 s between its lines: {dated}");
    cluster.gantry(&["cancel", &id]);
}
