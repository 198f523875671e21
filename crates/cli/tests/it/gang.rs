//! Gangs end to end through the real binary: `gantry up` without its local agent and two
//! `gantry agent` nodes of 2 simulated GPUs each. Every worker of a 4 × 1-GPU gang is started
//! with the rendezvous torchrun expects; one failed worker stops the others (SIGTERM through the
//! agents' normal stop path) and ends the gang.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Child;
use std::time::Duration;

use gantry_store::Store;

use crate::gantry;
use crate::harness::{Cluster, command, eventually};

/// A `gantry agent` joining `cluster` as `node` with 2 simulated GPUs (a seed per node, so the
/// two fleets' GPU UUIDs differ), advertising the address `10.0.0.<seed>` to its peers.
fn start_agent(cluster: &Cluster, node: &str, seed: u64) -> Child {
    // Stopping it also removes its jobs' bridge when it made one.
    start_agent_at(cluster, node, seed, &format!("10.0.0.{seed}"), &["--stop-jobs-on-exit"])
}

/// Like [`start_agent`], advertising `addr`, with `extra` flags.
fn start_agent_at(cluster: &Cluster, node: &str, seed: u64, addr: &str, extra: &[&str]) -> Child {
    let join = cluster.gantry(&["token", "create", "--role", "agent", "--name", node]).trim().to_owned();
    let dir = cluster.home.path().join(format!("node-{node}"));
    let fleet = cluster.home.path().join(format!("fleet-{node}.toml"));
    std::fs::write(&fleet, format!("seed = {seed}\ngpus = \"2xA100-80GB\"\n")).expect("fleet file");
    command(cluster.home.path())
        .args(["agent", "--server", &cluster.url(), "--node-id", node, "--backend", "simulated"])
        .arg("--ca")
        .arg(cluster.ca_path())
        .arg("--simulated-gpus")
        .arg(&fleet)
        .args(["--advertise-addr", addr])
        .args(extra)
        .args(["--grace", "1", "--data-dir"])
        .arg(&dir)
        .arg("--work-dir")
        .arg(cluster.outside.path().join(format!("node-{node}-work")))
        .env("GANTRY_JOIN_TOKEN", join)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start agent")
}

fn stop_agent(mut agent: Child) {
    let _ = std::process::Command::new("kill").arg(agent.id().to_string()).status();
    let _ = agent.wait();
}

/// Gang tests run one at a time. Each test's control plane hands out rendezvous ports from
/// 29500 by gang id, and with namespaces on every agent on this machine publishes rank 0's port
/// through the same host's portmap rules: two clusters' gangs running at once would be given the
/// same port, and the second rank 0 would (rightly) be refused it.
fn one_gang_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static GANGS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GANGS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A cluster of two 2-GPU nodes, n1 and n2, both registered.
fn two_nodes() -> (Cluster, Vec<Child>) {
    let cluster = Cluster::start(&["--no-agent"]);
    let agents = vec![start_agent(&cluster, "n1", 1), start_agent(&cluster, "n2", 2)];
    eventually(Duration::from_secs(20), "both nodes to register", || {
        let nodes = cluster.gantry(&["nodes"]);
        (nodes.contains("n1") && nodes.contains("n2")).then_some(())
    });
    let nodes = cluster.gantry(&["nodes"]);
    assert!(nodes.contains("ADDRESS") && nodes.contains("10.0.0.1") && nodes.contains("10.0.0.2"), "{nodes}");
    (cluster, agents)
}

fn job(cluster: &Cluster, id: i64) -> serde_json::Value {
    cluster.jobs().into_iter().find(|j| j["id"].as_i64() == Some(id)).expect("job listed")
}

fn workers_of(cluster: &Cluster, gang: i64) -> Vec<serde_json::Value> {
    let mut workers: Vec<serde_json::Value> =
        cluster.jobs().into_iter().filter(|j| j["gang"]["id"] == gang && j["id"] != gang).collect();
    workers.sort_by_key(|w| w["gang"]["rank"].as_u64());
    workers
}

/// `NAME=value` lines as a map.
fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

#[test]
fn a_gang_of_four_workers_on_two_two_gpu_nodes_runs_with_the_rendezvous_variables_set() {
    let _one = one_gang_test_at_a_time();
    let (cluster, agents) = two_nodes();
    let out = cluster.shared();
    let script = format!("env > {}/worker-$GANTRY_JOB_ID.env; echo hello from rank $RANK", out.display());
    let gang: i64 = cluster
        .gantry(&["submit", "--replicas", "4", "--gpus", "1", "--name", "ddp", "--", "sh", "-c", &script])
        .trim()
        .parse()
        .expect("a job id");
    let done = eventually(Duration::from_secs(60), "the gang to succeed", || {
        let j = job(&cluster, gang);
        matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")).then_some(j)
    });
    assert_eq!(done["state"], "succeeded", "{done}");
    let workers = workers_of(&cluster, gang);
    assert_eq!(workers.len(), 4, "{workers:?}");
    let mut ranks = BTreeSet::new();
    let mut rendezvous = BTreeSet::new();
    let mut local_by_node: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for w in &workers {
        assert_eq!(w["state"], "succeeded", "{w}");
        let id = w["id"].as_i64().expect("id");
        let text =
            std::fs::read_to_string(out.join(format!("worker-{id}.env"))).expect("the worker wrote its env");
        let env = parse_env(&text);
        assert_eq!(env["WORLD_SIZE"], "4");
        assert_eq!(env["RANK"], w["gang"]["rank"].to_string(), "RANK is the worker's rank");
        assert!(env["CUDA_VISIBLE_DEVICES"].starts_with("GPU-"), "one GPU each: {text}");
        assert!(!env["CUDA_VISIBLE_DEVICES"].contains(','), "one GPU each: {text}");
        ranks.insert(env["RANK"].clone());
        rendezvous.insert((env["MASTER_ADDR"].clone(), env["MASTER_PORT"].clone()));
        // Each worker sees one GPU: its LOCAL_RANK names it (torch.cuda.set_device(LOCAL_RANK)),
        // and it is one launcher's node (torchrun reads PET_*); Slurm's LOCALID is its place
        // among the gang's workers on its node.
        assert_eq!((env["LOCAL_RANK"].as_str(), env["LOCAL_WORLD_SIZE"].as_str()), ("0", "1"), "{text}");
        let local: usize = env["LOCAL_RANK"].parse().expect("a number");
        assert!(local < env["CUDA_VISIBLE_DEVICES"].split(',').count(), "{text}");
        assert_eq!(env["PET_NNODES"], "4");
        assert_eq!(env["PET_NODE_RANK"], env["RANK"]);
        assert_eq!(env["PET_NPROC_PER_NODE"], "1");
        assert_eq!(
            (env["PET_MASTER_ADDR"].as_str(), env["PET_MASTER_PORT"].as_str()),
            (env["MASTER_ADDR"].as_str(), env["MASTER_PORT"].as_str())
        );
        assert_eq!(env["SLURM_JOB_ID"], gang.to_string());
        assert_eq!((env["SLURM_JOB_NAME"].as_str(), env["SLURM_NTASKS"].as_str()), ("ddp", "4"));
        assert_eq!(env["SLURM_PROCID"], env["RANK"]);
        assert_eq!((env["SLURM_JOB_NUM_NODES"].as_str(), env["SLURM_GPUS_ON_NODE"].as_str()), ("2", "1"));
        let rank0_node = workers[0]["node_id"].as_str().expect("rank 0's node");
        let node = w["node_id"].as_str().expect("placed on a node").to_owned();
        assert_eq!(env["SLURM_NODEID"], if node == rank0_node { "0" } else { "1" }, "{text}");
        assert!(
            local_by_node.entry(node).or_default().insert(env["SLURM_LOCALID"].clone()),
            "SLURM_LOCALID repeats"
        );
    }
    assert_eq!(ranks, ["0", "1", "2", "3"].map(String::from).into_iter().collect());
    assert_eq!(rendezvous.len(), 1, "one rendezvous for the gang: {rendezvous:?}");
    let (addr, port) = rendezvous.into_iter().next().expect("one");
    assert!(port.parse::<u16>().is_ok_and(|p| p >= 29_500), "{addr}:{port}");
    let rank0 = workers[0]["node_id"].as_str().expect("rank 0's node");
    let advertised = if rank0 == "n1" { "10.0.0.1" } else { "10.0.0.2" };
    assert_eq!(addr, advertised, "MASTER_ADDR is the address rank 0's node ({rank0}) advertises");
    let two: BTreeSet<String> = ["0", "1"].map(String::from).into_iter().collect();
    assert_eq!(local_by_node.len(), 2, "two workers on each node: {local_by_node:?}");
    assert!(
        local_by_node.values().all(|l| *l == two),
        "SLURM_LOCALID 0 and 1 on each node: {local_by_node:?}"
    );
    let detail = cluster.gantry(&["job", &gang.to_string()]);
    assert!(
        detail.contains("4 workers") && detail.contains("rank   3"),
        "gantry job shows the gang:\n{detail}"
    );
    let listing = cluster.gantry(&["jobs"]);
    assert!(listing.contains("4x1 GPU"), "gantry jobs shows the gang's size:\n{listing}");
    let logs = eventually(Duration::from_secs(20), "every rank's output", || {
        let logs = cluster.gantry(&["logs", &gang.to_string()]);
        logs.contains("[rank 3] hello from rank 3").then_some(logs)
    });
    for rank in 0..4 {
        assert!(logs.contains(&format!("[rank {rank}] hello from rank {rank}\n")), "{logs}");
    }
    assert_eq!(cluster.gantry(&["logs", &gang.to_string(), "--rank", "2"]), "hello from rank 2\n");
    assert_eq!(
        cluster.gantry(&["logs", &gang.to_string(), "--tail", "1"]).lines().count(),
        4,
        "a line a rank"
    );
    cluster.assert_no_double_allocation();
    agents.into_iter().for_each(stop_agent);
}

/// Rank 0 listens on `MASTER_PORT` and prints what it is sent; rank 1 connects to
/// `MASTER_ADDR:MASTER_PORT` (retrying while rank 0 starts) and sends a line.
const RENDEZVOUS: &str = r#"
use Socket qw(:all);
my ($addr, $port, $rank) = @ENV{qw(MASTER_ADDR MASTER_PORT RANK)};
socket(my $s, AF_INET, SOCK_STREAM, 0) or die "socket: $!";
if ($rank == 0) {
    setsockopt($s, SOL_SOCKET, SO_REUSEADDR, 1);
    bind($s, pack_sockaddr_in($port, INADDR_ANY)) or die "bind: $!";
    listen($s, 5) or die "listen: $!";
    accept(my $c, $s) or die "accept: $!";
    my $line = <$c>;
    print "rank 0 got: $line";
} else {
    my $to = pack_sockaddr_in($port, inet_aton($addr) // die "no address $addr");
    for (1 .. 100) {
        last if connect($s, $to);
        close $s; select(undef, undef, undef, 0.2);
        socket($s, AF_INET, SOCK_STREAM, 0) or die "socket: $!";
    }
    print $s "hello from rank 1\n" or die "rank 1 could not reach $addr:$port: $!";
    close $s;
    print "rank 1 reached $addr:$port\n";
}
"#;

#[test]
fn a_gang_of_two_on_two_agents_rendezvous_through_rank_zeros_published_port_with_namespaces_on() {
    let _one = one_gang_test_at_a_time();
    if !gantry_agent::runner::network::available_for_tests("the namespaced gang test") {
        return;
    }
    let cluster = Cluster::start(&["--no-agent"]);
    // Both agents on this machine advertise its loopback: each maps that MASTER_ADDR to its
    // bridge's gateway, and rank 0's agent publishes MASTER_PORT there with portmap.
    let flags = ["--job-network", "cni", "--stop-jobs-on-exit"];
    let agents = vec![
        start_agent_at(&cluster, "n1", 1, "127.0.0.1", &flags),
        start_agent_at(&cluster, "n2", 2, "127.0.0.1", &flags),
    ];
    let nodes = eventually(Duration::from_secs(20), "both nodes to register", || {
        let nodes = cluster.gantry(&["nodes"]);
        (nodes.contains("n1") && nodes.contains("n2")).then_some(nodes)
    });
    assert!(nodes.contains("NETWORK") && nodes.matches(" cni ").count() == 2, "{nodes}");
    let listed: serde_json::Value =
        serde_json::from_str(&cluster.gantry(&["nodes", "-o", "json"])).expect("json");
    let networks: Vec<&str> =
        listed.as_array().expect("nodes").iter().filter_map(|n| n["network"].as_str()).collect();
    assert_eq!(networks, ["cni", "cni"], "/v1/nodes says how each node runs its jobs' network: {listed}");
    let gang: i64 = cluster
        .gantry(&[
            "submit",
            "--replicas",
            "2",
            "--gpus",
            "2",
            "--max-retries",
            "0",
            "--",
            "perl",
            "-e",
            RENDEZVOUS,
        ])
        .trim()
        .parse()
        .expect("a job id");
    let done = eventually(Duration::from_secs(60), "the gang to end", || {
        let j = job(&cluster, gang);
        matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")).then_some(j)
    });
    let logs = cluster.gantry(&["logs", &gang.to_string()]);
    assert_eq!(done["state"], "succeeded", "{done}\n{logs}");
    let workers = workers_of(&cluster, gang);
    assert_ne!(workers[0]["node_id"], workers[1]["node_id"], "one worker per node: {workers:?}");
    assert!(logs.contains("rank 0 got: hello from rank 1"), "{logs}");
    let rank1 = cluster.gantry(&["logs", &workers[1]["id"].to_string()]);
    let reached = rank1.trim().strip_prefix("rank 1 reached ").unwrap_or_default();
    assert!(
        !reached.is_empty() && !reached.starts_with("127."),
        "rank 1 went through its bridge's gateway, not its own loopback: {rank1}"
    );
    let bridges = |dir: &str| {
        let scope = std::fs::read_to_string(cluster.home.path().join(dir).join("agent/sandbox-scope"));
        gantry_agent::runner::network::bridge_name(scope.expect("scope").trim())
    };
    let (b1, b2) = (bridges("node-n1"), bridges("node-n2"));
    let rules = String::from_utf8_lossy(
        &std::process::Command::new("iptables-save").output().expect("iptables-save").stdout,
    )
    .into_owned();
    for w in &workers {
        let id = format!("-{}-1\"", w["id"]);
        let left: Vec<&str> = rules.lines().filter(|l| l.contains("gantry-") && l.contains(&id)).collect();
        assert!(left.is_empty(), "CNI DEL removed the worker's NAT and published port: {left:?}");
    }
    assert!(std::path::Path::new("/sys/class/net").join(&b1).exists(), "n1's bridge {b1}");
    agents.into_iter().for_each(stop_agent);
    for b in [b1, b2] {
        assert!(
            !std::path::Path::new("/sys/class/net").join(&b).exists(),
            "a stopped agent removes its bridge {b}"
        );
    }
}

#[test]
fn one_failed_worker_stops_the_others_and_the_gang_fails_when_no_retry_is_left() {
    let _one = one_gang_test_at_a_time();
    let (cluster, agents) = two_nodes();
    let out = cluster.shared();
    // Rank 3 fails at once; the others wait for SIGTERM and record that they got it.
    let script = format!(
        "trap 'touch {d}/term-$RANK; exit 143' TERM; [ \"$RANK\" = 3 ] && exit 1; sleep 600 & wait",
        d = out.display()
    );
    let gang: i64 = cluster
        .gantry(&[
            "submit",
            "--replicas",
            "4",
            "--gpus",
            "1",
            "--max-retries",
            "0",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .trim()
        .parse()
        .expect("a job id");
    let done = eventually(Duration::from_secs(60), "the gang to end", || {
        let j = job(&cluster, gang);
        matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")).then_some(j)
    });
    assert_eq!(done["state"], "failed", "{done}");
    let reason = done["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("worker 3") && reason.contains("retry budget"), "{reason}");
    let workers = workers_of(&cluster, gang);
    assert_eq!(workers[3]["state"], "failed", "{:?}", workers[3]);
    for w in &workers[..3] {
        assert_eq!(w["state"], "cancelled", "stopped with its gang: {w}");
        let rank = w["gang"]["rank"].to_string();
        assert!(out.join(format!("term-{rank}")).exists(), "rank {rank} was sent SIGTERM");
    }
    assert!(cluster.store().allocations(true).expect("held").is_empty(), "every GPU is released");
    agents.into_iter().for_each(stop_agent);
}

#[test]
fn a_failed_worker_with_a_retry_left_requeues_the_whole_gang_and_cancel_stops_every_worker() {
    let _one = one_gang_test_at_a_time();
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB", "--grace", "1"]);
    let out = cluster.shared();
    // The first attempt's rank 1 fails; the second attempt runs until cancelled.
    let script = format!(
        "if [ \"$RANK\" = 1 ] && [ ! -e {d}/failed-once ]; then touch {d}/failed-once; exit 1; fi; sleep 600",
        d = out.display()
    );
    let gang: i64 = cluster
        .gantry(&[
            "submit",
            "--replicas",
            "2",
            "--gpus",
            "1",
            "--max-retries",
            "1",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .trim()
        .parse()
        .expect("a job id");
    let back = eventually(Duration::from_secs(60), "the gang to run a second time", || {
        let j = job(&cluster, gang);
        (j["state"] == "running" && j["attempt"] == 2).then_some(j)
    });
    assert_eq!(back["gang"]["replicas"], 2, "{back}");
    let workers = workers_of(&cluster, gang);
    assert!(workers.iter().all(|w| w["attempt"] == 2), "both workers placed again: {workers:?}");
    // Cancelling one worker cancels the gang and every worker.
    let worker = workers[0]["id"].to_string();
    cluster.gantry(&["cancel", &worker]);
    eventually(Duration::from_secs(30), "the gang and its workers to be cancelled", || {
        let all = std::iter::once(job(&cluster, gang)).chain(workers_of(&cluster, gang));
        all.into_iter().all(|j| j["state"] == "cancelled").then_some(())
    });
    cluster.assert_no_double_allocation();
}

#[test]
fn a_gang_is_refused_with_a_sentence_when_it_cannot_ever_fit_or_asks_for_no_gpus() {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    eventually(Duration::from_secs(20), "the local node to register", || {
        cluster.gantry(&["nodes"]).contains("ready").then_some(())
    });
    let out = cluster.try_gantry(&["submit", "--replicas", "3", "--gpus", "1", "--", "true"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 workers of 1 GPUs") && err.contains("hold 2"), "{err}");
    let out = cluster.try_gantry(&["submit", "--replicas", "2", "--", "true"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("whole GPUs"));
    let out = cluster.try_gantry(&["submit", "--replicas", "2", "--gpus", "1", "-e", "RANK=0", "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("set by Gantry"), "RANK cannot be forged");
}

#[test]
fn an_advertised_address_that_is_neither_a_host_name_nor_an_ip_is_refused_with_a_sentence() {
    for bad in ["a b", "http://h", "10.0.0.999"] {
        let out = gantry(&["agent", "--server", "http://127.0.0.1:1", "--advertise-addr", bad]);
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--advertise-addr") && err.contains("host name"), "{bad}: {err}");
    }
}

#[test]
fn nodes_and_gpus_per_node_start_one_launcher_per_node_with_its_gpus_or_one_worker_per_gpu() {
    let _one = one_gang_test_at_a_time();
    let (cluster, agents) = two_nodes();
    let out = cluster.shared();
    let script = format!("env > {}/launcher-$GANTRY_JOB_ID.env", out.display());
    let run = |extra: &[&str]| -> i64 {
        let args = [&["submit"], extra, &["--", "sh", "-c", &script]].concat();
        let gang: i64 = cluster.gantry(&args).trim().parse().expect("a job id");
        let done = eventually(Duration::from_secs(60), "the gang to end", || {
            let j = job(&cluster, gang);
            matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")).then_some(j)
        });
        assert_eq!(done["state"], "succeeded", "{done}");
        gang
    };
    // One launcher per node, each with its node's two GPUs: torchrun --nnodes 2 --nproc-per-node 2.
    let gang = run(&["--nodes", "2", "--gpus-per-node", "2", "--per-node"]);
    let workers = workers_of(&cluster, gang);
    assert_eq!(workers.len(), 2, "{workers:?}");
    assert_ne!(workers[0]["node_id"], workers[1]["node_id"], "one per node: {workers:?}");
    for w in &workers {
        let id = w["id"].as_i64().expect("id");
        let env = parse_env(&std::fs::read_to_string(out.join(format!("launcher-{id}.env"))).expect("env"));
        let seen = env["CUDA_VISIBLE_DEVICES"].split(',').count();
        assert_eq!(seen, 2, "the node's GPUs: {env:?}");
        assert_eq!((env["PET_NNODES"].as_str(), env["PET_NPROC_PER_NODE"].as_str()), ("2", "2"), "{env:?}");
        assert_eq!(env["PET_NODE_RANK"], w["gang"]["rank"].to_string());
        assert!(env["LOCAL_RANK"].parse::<usize>().expect("a number") < seen, "{env:?}");
    }
    // Without --per-node: a worker per GPU, four of one GPU each.
    let gang = run(&["--nodes", "2", "--gpus-per-node", "2"]);
    let workers = workers_of(&cluster, gang);
    assert_eq!(workers.len(), 4, "{workers:?}");
    let refused =
        cluster.try_gantry(&["submit", "--nodes", "2", "--gpus-per-node", "2", "--gpus", "1", "--", "true"]);
    assert!(!refused.status.success(), "--gpus beside --gpus-per-node is refused");
    agents.into_iter().for_each(stop_agent);
}
