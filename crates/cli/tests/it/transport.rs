//! TLS between the CLI, agents and the server as `gantry up` and `gantry server` set it up, and
//! the server's log file.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::harness::{Cluster, command, eventually};

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn up_with_tls_serves_the_cli_through_the_pinned_ca_and_tells_other_clients_what_is_wrong() {
    let cluster = Cluster::start(&["--tls", "--backend", "simulated", "--simulated-gpus", "1xA100-80GB"]);
    let config =
        std::fs::read_to_string(cluster.home.path().join(".config/gantry/config.toml")).expect("config");
    assert!(config.contains(&format!("server = \"{}\"", cluster.url())), "{config}");
    assert!(config.contains("ca = ") && config.contains("tls/ca.pem"), "{config}");
    // The local agent joined over mutual TLS, and the CLI reaches the server through the pinned CA.
    eventually(Duration::from_secs(20), "the local agent to register", || {
        cluster.gantry(&["nodes"]).contains("ready").then_some(())
    });
    assert!(cluster.gantry(&["submit", "--", "true"]).trim().parse::<i64>().is_ok());

    let token = cluster.token();
    let unpinned = command(cluster.home.path())
        .args(["jobs", "--server", &cluster.url()])
        .env("GANTRY_CONFIG", "/nonexistent/config.toml")
        .env("GANTRY_TOKEN", &token)
        .output()
        .expect("run");
    assert!(!unpinned.status.success());
    assert!(stderr_of(&unpinned).contains("--ca"), "{}", stderr_of(&unpinned));
    let ca = cluster.data_dir().join("tls/ca.pem");
    let pinned = command(cluster.home.path())
        .args(["jobs", "--server", &cluster.url(), "--ca"])
        .arg(&ca)
        .env("GANTRY_CONFIG", "/nonexistent/config.toml")
        .env("GANTRY_TOKEN", &token)
        .output()
        .expect("run");
    assert!(pinned.status.success(), "{}", stderr_of(&pinned));
    let plain = cluster.url().replace("https://", "http://");
    let out = cluster.try_gantry(&["jobs", "--server", &plain]);
    assert!(!out.status.success());
    assert!(stderr_of(&out).contains("this port serves HTTPS"), "{}", stderr_of(&out));
}

#[test]
fn a_server_on_a_non_loopback_address_turns_tls_on_and_says_so() {
    let cluster = Cluster::start_as("server", "0.0.0.0", &[]);
    let log = std::fs::read_to_string(cluster.home.path().join("up.log")).expect("output");
    assert!(log.contains("serving HTTPS"), "{log}");
    assert!(log.contains(&format!("gantry server is up at https://127.0.0.1:{}", cluster.port)), "{log}");
    cluster.gantry(&["jobs"]); // the client config `server` wrote (URL and CA) works as is
}

fn start_agent(cluster: &Cluster, join: &str, ca: &std::path::Path) -> Child {
    command(cluster.home.path())
        .args(["agent", "--server", &cluster.url(), "--node-id", "n1", "--backend", "simulated"])
        .args(["--simulated-gpus", "1xA100-80GB", "--grace", "1", "--data-dir"])
        .arg(cluster.home.path().join("node-n1"))
        .arg("--ca")
        .arg(ca)
        .env("GANTRY_JOIN_TOKEN", join)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start agent")
}

#[test]
fn a_separate_agent_joins_a_tls_server_by_pinning_its_ca() {
    let cluster = Cluster::start_as("server", "127.0.0.1", &["--tls"]);
    let join = cluster.gantry(&["token", "create", "--role", "agent", "--name", "n1"]).trim().to_owned();
    let mut agent = start_agent(&cluster, &join, &cluster.data_dir().join("tls/ca.pem"));
    eventually(Duration::from_secs(20), "the agent to register", || {
        cluster.gantry(&["nodes"]).contains("n1").then_some(())
    });
    let _ = agent.kill();
    let _ = agent.wait();
    let agent_log = cluster.home.path().join("node-n1/gantry.log");
    assert!(agent_log.exists(), "the agent logs to its data dir");
}

#[test]
fn a_request_that_fails_with_500_is_logged_with_its_cause_in_the_data_dir() {
    let cluster = Cluster::start(&["--no-agent"]);
    let id = cluster.gantry(&["submit", "--", "true"]).trim().to_owned();
    // A directory where the job's stdout file should be: reading it fails inside the server.
    std::fs::create_dir_all(cluster.data_dir().join("logs").join(&id).join("stdout")).expect("mkdir");
    let out = cluster.try_gantry(&["logs", &id]);
    assert!(!out.status.success());
    assert!(stderr_of(&out).contains("internal error"), "{}", stderr_of(&out));
    let path = cluster.data_dir().join("gantry.log");
    let log = eventually(Duration::from_secs(5), "the error in gantry.log", || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        text.contains("request failed").then_some(text)
    });
    assert!(log.contains("Is a directory"), "the cause is logged: {log}");
    assert!(!log.contains(&cluster.token()), "the admin token leaked into the log");
    let mode = std::fs::metadata(&path).expect("log file").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn the_load_benchmark_reports_throughput_errors_and_server_memory_as_json() {
    let out = crate::gantry(&["bench", "load", "--clients", "4", "--duration", "2", "--idle", "0", "--json"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(report["requests"].as_u64().expect("requests") > 0, "{report}");
    assert_eq!(
        (report["server_errors"].as_u64(), report["failures"].as_u64()),
        (Some(0), Some(0)),
        "{report}"
    );
    for kind in ["submit", "get", "list"] {
        assert!(report["kinds"][kind]["p99_ms"].as_f64().is_some(), "{kind} missing: {report}");
    }
    assert!(report["rss_mib"]["start"].as_f64().expect("rss") > 1.0, "{report}");
}

/// Runs `gantry agent` with `args` after the common ones; its output goes to `<home>/agent.log`.
fn agent_with(cluster: &Cluster, args: &[&str]) -> Child {
    agent_with_env(cluster, args, ("GANTRY_UNUSED", ""))
}

/// [`agent_with`] with one more environment variable.
fn agent_with_env(cluster: &Cluster, args: &[&str], (name, value): (&str, &str)) -> Child {
    let log = std::fs::File::create(cluster.home.path().join("agent.log")).expect("log");
    command(cluster.home.path())
        .env(name, value)
        .args(["agent", "--server", &cluster.url(), "--node-id", "gpu-2", "--backend", "simulated"])
        .args(["--simulated-gpus", "1xA100-80GB", "--grace", "1", "--data-dir"])
        .arg(cluster.home.path().join("node-gpu-2"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start agent")
}

#[test]
fn a_machine_joins_with_the_printed_command_over_mutual_tls_and_restarts_without_the_token() {
    let cluster = Cluster::start_as("server", "127.0.0.1", &["--tls"]);
    let out = cluster.try_gantry(&["token", "create", "--role", "agent", "--node", "gpu-2"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let join = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let printed = stderr_of(&out);
    let command_line = printed.lines().find(|l| l.contains("gantry agent")).expect("a command");
    // The token travels in the environment, not on the command line `ps` shows everyone.
    assert!(
        command_line.trim_start().starts_with(&format!("GANTRY_JOIN_TOKEN={join} gantry agent")),
        "{printed}"
    );
    assert!(!command_line.contains("--join-token"), "{printed}");
    let hash = command_line.split("--ca-sha256 ").nth(1).expect("the CA hash").trim().to_owned();
    let wrong = "0".repeat(64);
    let mut refused = agent_with(&cluster, &["--join-token", &join, "--ca-sha256", &wrong]);
    let status = refused.wait().expect("wait");
    assert!(!status.success(), "a wrong CA hash must stop the agent");
    let mut agent = agent_with_env(&cluster, &["--ca-sha256", &hash], ("GANTRY_JOIN_TOKEN", &join));
    eventually(Duration::from_secs(20), "the agent to register", || {
        cluster.gantry(&["nodes"]).contains("gpu-2").then_some(())
    });
    let leaked: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&join))
        .collect();
    assert!(leaked.is_empty(), "the join token is on a command line: {leaked:?}");
    let state = cluster.home.path().join("node-gpu-2/agent");
    for file in ["credential", "client.pem", "client-key.pem", "ca.pem"] {
        let mode = std::fs::metadata(state.join(file)).expect(file).permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }
    let _ = std::process::Command::new("kill").arg(agent.id().to_string()).status();
    let _ = agent.wait();
    // The join token is spent; the node comes back on its own credential, certificate and CA.
    let tokens: Vec<serde_json::Value> =
        serde_json::from_str(&cluster.gantry(&["token", "list", "-o", "json"])).expect("json");
    let used = tokens.iter().find(|t| t["kind"] == "join").expect("the join token");
    assert!(used["used_at"].as_i64().is_some(), "the join token is marked used: {used}");
    let mut agent = agent_with(&cluster, &[]);
    let registered_twice = eventually(Duration::from_secs(20), "the agent to register again", || {
        let audit = cluster.gantry(&["audit", "-o", "json"]);
        let rows: Vec<serde_json::Value> = serde_json::from_str(&audit).expect("json");
        let n = rows.iter().filter(|r| r["action"] == "node.register" && r["outcome"] == "ok").count();
        (n >= 2).then_some(rows)
    });
    let join_row = registered_twice.iter().find(|r| r["action"] == "node.join").expect("the join is audited");
    assert_eq!((join_row["target"].as_str(), join_row["outcome"].as_str()), (Some("node/gpu-2"), Some("ok")));
    let register = registered_twice.iter().rfind(|r| r["action"] == "node.register").expect("register");
    assert_eq!(register["actor"], "node:gpu-2");
    let _ = std::process::Command::new("kill").arg(agent.id().to_string()).status();
    let _ = agent.wait();
}

#[test]
fn a_remote_agents_job_output_is_served_through_the_server_in_full_once_the_job_ends() {
    let cluster = Cluster::start_as("server", "127.0.0.1", &["--tls"]);
    let join = cluster.gantry(&["token", "create", "--role", "agent", "--node", "gpu-2"]).trim().to_owned();
    let ca = cluster.data_dir().join("tls/ca.pem");
    let mut agent = agent_with(&cluster, &["--join-token", &join, "--ca", &ca.display().to_string()]);
    // 600 KiB on stdout: more than one heartbeat carries (256 KiB), so the end waits for it.
    let script = "seq 1 200000 | head -c 614400; echo; echo to-stderr >&2";
    let id = cluster.gantry(&["submit", "--", "sh", "-c", script]).trim().to_owned();
    eventually(Duration::from_secs(60), "the job to succeed", || {
        let jobs = cluster.jobs();
        jobs.iter().any(|j| j["id"].as_i64() == id.parse().ok() && j["state"] == "succeeded").then_some(())
    });
    let logs = cluster.try_gantry(&["logs", &id]);
    let out = String::from_utf8_lossy(&logs.stdout);
    let expected: String =
        (1..=200_000).map(|n| format!("{n}\n")).collect::<String>()[..614_400].to_owned() + "\n";
    assert_eq!(out.len(), expected.len(), "all output arrived before the job was reported ended");
    assert!(out == expected, "the output arrived intact");
    assert!(stderr_of(&logs).contains("to-stderr"), "{}", stderr_of(&logs));
    let _ = std::process::Command::new("kill").arg(agent.id().to_string()).status();
    let _ = agent.wait();
}
