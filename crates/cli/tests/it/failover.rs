//! Clients and agents given several server addresses: a dead first address is passed over, and
//! a server lost in the middle of `logs -f`, `jobs -w` or an agent's heartbeats is replaced by
//! the next one without losing the place. One `gantry up` stands for every replica (replicas
//! share a database, so each sees the same cluster); a TCP relay in front of it is the replica
//! that dies.

use std::io::Read;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::{Cluster, command, eventually};

/// An address where nothing listens (connections are refused).
fn dead_url(tls: bool) -> String {
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    format!("{}://127.0.0.1:{port}", if tls { "https" } else { "http" })
}

/// A TCP relay to `target_port`: a replica that [`Relay::die`] kills, with its connections.
struct Relay {
    port: u16,
    dead: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn to(target_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind relay");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let (dead, conns) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (dead2, conns2) = (Arc::clone(&dead), Arc::clone(&conns));
        std::thread::spawn(move || {
            while !dead2.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else { continue };
                let mut kept = conns2.lock().expect("lock");
                kept.extend([client.try_clone().expect("clone"), server.try_clone().expect("clone")]);
                drop(kept);
                pipe(client.try_clone().expect("clone"), server.try_clone().expect("clone"));
                pipe(server, client);
            }
            // The listener is dropped here: the port now refuses connections.
        });
        Self { port, dead, conns }
    }

    fn url(&self, tls: bool) -> String {
        format!("{}://127.0.0.1:{}", if tls { "https" } else { "http" }, self.port)
    }

    /// Closes the port and resets every connection through it.
    fn die(&self) {
        self.dead.store(true, Ordering::SeqCst);
        for conn in self.conns.lock().expect("lock").drain(..) {
            let _ = conn.shutdown(Shutdown::Both);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Both);
    });
}

/// Sets the current context's addresses to `server` then `servers` in the client config.
fn set_context_servers(cluster: &Cluster, server: &str, servers: &[String]) {
    let path = cluster.home.path().join(".config/gantry/config.toml");
    let mut config: toml::Table =
        toml::from_str(&std::fs::read_to_string(&path).expect("config")).expect("toml");
    let current = config["current-context"].as_str().expect("current").to_owned();
    let contexts = config.get_mut("contexts").and_then(|c| c.as_table_mut()).expect("contexts");
    let context = contexts.get_mut(&current).and_then(|c| c.as_table_mut()).expect("context");
    context.insert("server".into(), server.into());
    let list: Vec<toml::Value> = servers.iter().map(|s| toml::Value::from(s.as_str())).collect();
    context.insert("servers".into(), toml::Value::Array(list));
    std::fs::write(&path, toml::to_string(&config).expect("toml")).expect("write config");
}

fn spawn(cluster: &Cluster, args: &[&str]) -> Child {
    command(cluster.home.path())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gantry")
}

#[test]
fn every_command_works_when_the_first_server_of_the_context_is_down() {
    let cluster = Cluster::start(&[]);
    set_context_servers(&cluster, &dead_url(true), &[cluster.url()]);
    let id = cluster.gantry(&["submit", "--", "sh", "-c", "echo hello; sleep 30"]).trim().to_owned();
    eventually(Duration::from_secs(20), "the job to run", || {
        cluster.gantry(&["jobs", "-o", "json"]).contains("\"running\"").then_some(())
    });
    assert!(cluster.gantry(&["job", &id]).contains("running"));
    cluster.gantry(&["nodes"]);
    eventually(Duration::from_secs(10), "the output", || {
        cluster.gantry(&["logs", &id]).contains("hello").then_some(())
    });
    assert!(cluster.gantry(&["cancel", &id]).contains(&id));
    // GANTRY_SERVER takes the same list as --server.
    let by_env = command(cluster.home.path())
        .args(["jobs", "-o", "json"])
        .env("GANTRY_SERVER", format!("{},{}", dead_url(true), cluster.url()))
        .env("GANTRY_CA", cluster.ca_path())
        .output()
        .expect("gantry jobs");
    assert!(by_env.status.success(), "{}", String::from_utf8_lossy(&by_env.stderr));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&by_env.stdout).expect("jobs json");
    assert!(listed.iter().any(|j| j["id"].as_i64().map(|n| n.to_string()) == Some(id.clone())));
    let listed = cluster.gantry(&["config", "get-contexts"]);
    assert!(listed.contains(&format!(",{}", cluster.url())), "both addresses are listed: {listed}");
}

#[test]
fn logs_follow_carries_on_at_the_next_server_from_where_it_was() {
    let cluster = Cluster::start(&[]);
    let relay = Relay::to(cluster.port);
    let script = "for i in $(seq 1 50); do echo line $i; sleep 0.1; done";
    let id = cluster.gantry(&["submit", "--", "sh", "-c", script]).trim().to_owned();
    let servers = format!("{},{}", relay.url(true), cluster.url());
    let ca = cluster.ca_path().display().to_string();
    let mut follow = spawn(&cluster, &["logs", "-f", &id, "--server", &servers, "--ca", &ca]);
    let mut stdout = follow.stdout.take().expect("stdout");
    let mut first = [0u8; 12];
    stdout.read_exact(&mut first).expect("the first output, through the relay");
    relay.die();
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).expect("the rest");
    let status = follow.wait().expect("wait");
    let mut stderr = String::new();
    follow.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("stderr");
    let out = String::from_utf8_lossy(&[&first[..], &rest].concat()).into_owned();
    let job = cluster.gantry(&["job", &id]);
    assert!(status.success(), "logs -f ended with the job's success ({status}): {stderr}\n{out}\n{job}");
    let expected: String = (1..=50).map(|i| format!("line {i}\n")).collect();
    assert_eq!(out, expected, "every line once, in order, across the switch");
}

#[test]
fn jobs_watch_carries_on_at_the_next_server() {
    let cluster = Cluster::start(&["--no-agent"]);
    let relay = Relay::to(cluster.port);
    let first = cluster.gantry(&["submit", "--", "true"]).trim().to_owned();
    let servers = format!("{},{}", relay.url(true), cluster.url());
    let ca = cluster.ca_path().display().to_string();
    let mut watch = spawn(&cluster, &["jobs", "-w", "-o", "name", "--server", &servers, "--ca", &ca]);
    let mut stdout = watch.stdout.take().expect("stdout");
    let mut line = vec![0u8; format!("job/{first} pending\n").len()];
    stdout.read_exact(&mut line).expect("the first job, through the relay");
    assert_eq!(String::from_utf8_lossy(&line), format!("job/{first} pending\n"));
    relay.die();
    let second = cluster.gantry(&["submit", "--", "true"]).trim().to_owned();
    let mut next = vec![0u8; format!("job/{second} pending\n").len()];
    stdout.read_exact(&mut next).expect("the next change, from the other server");
    assert_eq!(String::from_utf8_lossy(&next), format!("job/{second} pending\n"), "nothing printed twice");
    let _ = watch.kill();
    let _ = watch.wait();
}

/// Starts `gantry agent --server <servers>` as node `gpu-2`, joining with `join`.
fn agent(cluster: &Cluster, servers: &str, join: &str) -> Child {
    let log = std::fs::File::create(cluster.home.path().join("agent.log")).expect("log");
    command(cluster.home.path())
        .args(["agent", "--server", servers, "--node-id", "gpu-2", "--backend", "simulated"])
        .args(["--simulated-gpus", "1xA100-80GB", "--grace", "1", "--data-dir"])
        .arg(cluster.home.path().join("node-gpu-2"))
        .arg("--ca")
        .arg(cluster.ca_path())
        .env("GANTRY_JOIN_TOKEN", join)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start agent")
}

fn job(cluster: &Cluster, id: &str) -> serde_json::Value {
    let jobs = cluster.jobs();
    jobs.into_iter()
        .find(|j| j["id"].as_i64().map(|n| n.to_string()).as_deref() == Some(id))
        .expect("the job is listed")
}

#[test]
fn an_agent_given_a_dead_server_first_joins_the_next_and_runs_a_job() {
    let cluster = Cluster::start_as("server", "127.0.0.1", &["--tls"]);
    let join = cluster.gantry(&["token", "create", "--role", "agent", "--node", "gpu-2"]).trim().to_owned();
    let mut agent = agent(&cluster, &format!("{},{}", dead_url(true), cluster.url()), &join);
    let id = cluster.gantry(&["submit", "--", "sh", "-c", "echo ran"]).trim().to_owned();
    eventually(Duration::from_secs(60), "the job to succeed", || {
        (job(&cluster, &id)["state"] == "succeeded").then_some(())
    });
    assert_eq!(job(&cluster, &id)["node_id"], "gpu-2");
    assert!(cluster.gantry(&["logs", &id]).contains("ran"));
    let _ = std::process::Command::new("kill").arg(agent.id().to_string()).status();
    let _ = agent.wait();
}

#[test]
fn an_agent_that_loses_its_server_keeps_its_running_job_through_the_next() {
    let cluster = Cluster::start_as("server", "127.0.0.1", &["--tls"]);
    let relay = Relay::to(cluster.port);
    let join = cluster.gantry(&["token", "create", "--role", "agent", "--node", "gpu-2"]).trim().to_owned();
    let mut agent = agent(&cluster, &format!("{},{}", relay.url(true), cluster.url()), &join);
    let id = cluster.gantry(&["submit", "--", "sh", "-c", "sleep 4; echo done"]).trim().to_owned();
    eventually(Duration::from_secs(30), "the job to run", || {
        (job(&cluster, &id)["state"] == "running").then_some(())
    });
    relay.die();
    eventually(Duration::from_secs(60), "the job to succeed", || {
        (job(&cluster, &id)["state"] == "succeeded").then_some(())
    });
    let ended = job(&cluster, &id);
    assert_eq!(ended["attempt"], 1, "the job ran once, never requeued: {ended}");
    assert!(cluster.gantry(&["logs", &id]).contains("done"));
    let log = std::fs::read_to_string(cluster.home.path().join("agent.log")).unwrap_or_default();
    assert!(!log.contains("fenced"), "the agent was not fenced off: {log}");
    let _ = std::process::Command::new("kill").arg(agent.id().to_string()).status();
    let _ = agent.wait();
}
