//! A network namespace per attempt, set up by the CNI plugins, against a real agent: a job's
//! loopback is its own both ways, abstract unix sockets follow the namespace, and CNI DEL leaves
//! nothing behind. They need root and the plugins (`containernetworking-plugins`); without them
//! they say so and pass as no-ops, but plugins that are there and broken make them fail. Traffic
//! goes only to loopback and to the bridge the agent made.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use gantry_agent::runner::network::{available_for_tests, bridge_name};
use gantry_store::{JobState, NewJob, Store, SubmitRequest};

use crate::runner::{Harness, Setup, job, start_with, until};
use crate::sandbox::{finished, log};
use crate::support::Running;

/// Whether the test must be skipped: it needs root and the CNI plugins (required under
/// `GANTRY_REQUIRE_NETNS_TESTS=1`).
pub fn needs_netns(test: &str) -> bool {
    !available_for_tests(test)
}

/// Tries each `host port` pair given as arguments; prints `reached` or `refused` for each.
const PROBE: &str = include_str!("../data/connect-probe.pl");

/// Listens on 127.0.0.1 and ::1 at port ARGV[0], says so in ARGV[1], and for 6 s prints
/// `accepted` for each connection that arrives.
const LISTEN: &str = r#"
use Socket qw(:all);
my ($port, $marker) = @ARGV;
socket(my $a, AF_INET, SOCK_STREAM, 0) or die; bind($a, pack_sockaddr_in($port, inet_aton("127.0.0.1"))) or die "bind4: $!"; listen($a, 5);
socket(my $b, AF_INET6, SOCK_STREAM, 0) or die; bind($b, pack_sockaddr_in6($port, inet_pton(AF_INET6, "::1"))) or die "bind6: $!"; listen($b, 5);
open(my $m, ">", $marker) or die; print $m "bound\n"; close $m;
my $end = time + 6;
while (time < $end) {
    my $r = ""; vec($r, fileno($a), 1) = 1; vec($r, fileno($b), 1) = 1;
    if (select(my $ready = $r, undef, undef, 0.2) > 0) {
        for my $l ($a, $b) { if (vec($ready, fileno($l), 1)) { accept(my $c, $l); print "accepted\n"; } }
    }
}
print "done\n";
"#;

/// Abstract unix sockets: `listen NAME MARKER` holds one for 6 s; `connect NAME` tries it.
const ABSTRACT: &str = r#"
use Socket qw(:all);
my ($what, $name, $marker) = @ARGV;
socket(my $s, AF_UNIX, SOCK_STREAM, 0) or die "socket: $!";
my $addr = pack_sockaddr_un("\0$name");
if ($what eq "listen") {
    bind($s, $addr) or die "bind: $!"; listen($s, 5);
    open(my $m, ">", $marker) or die; print $m "bound\n"; close $m;
    sleep 6;
} else {
    print(connect($s, $addr) ? "reached\n" : "refused: $!\n");
}
"#;

fn submit_perl(store: &dyn Store, team: &str, script: &str, args: &[String]) -> i64 {
    let mut command = vec!["perl".to_owned(), "-e".to_owned(), script.to_owned()];
    command.extend(args.iter().cloned());
    let job = NewJob {
        team: team.into(),
        name: "network".into(),
        spec: SubmitRequest { command, ..NewJob::default().spec },
        submitted_at: gantry_server::now_ms(),
        ..NewJob::default()
    };
    store.submit(&job).expect("submit").0
}

fn scope(h: &Harness) -> String {
    std::fs::read_to_string(h.dir.path().join("agent/sandbox-scope")).expect("scope").trim().to_owned()
}

/// The bridge's gateway from the agent's default conflist (`None`: the agent made none).
fn gateway(h: &Harness) -> Option<String> {
    let text = std::fs::read_to_string(h.dir.path().join("agent/cni/gantry.conflist")).ok()?;
    let conf: serde_json::Value = serde_json::from_str(&text).ok()?;
    let subnet = conf["plugins"][0]["ipam"]["ranges"][0][0]["subnet"].as_str()?;
    let base: std::net::Ipv4Addr = subnet.split('/').next()?.parse().ok()?;
    Some(std::net::Ipv4Addr::from(u32::from(base) + 1).to_string())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn reaches(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_reach_the_nodes_loopback_api_exporter_or_a_server_the_test_binds_on_loopback() {
    if needs_netns(
        "a_job_cannot_reach_the_nodes_loopback_api_exporter_or_a_server_the_test_binds_on_loopback",
    ) {
        return;
    }
    let h = start_with(Setup::default()).await;
    let api: SocketAddr = h.url().trim_start_matches("http://").parse().expect("the API's address");
    let exporter = Running::start("1xA100-80GB", Duration::from_millis(200), Default::default());
    let v4 = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let v6 = TcpListener::bind("[::1]:0").ok();
    let mut targets =
        vec![("127.0.0.1".to_owned(), api.port()), ("127.0.0.1".to_owned(), exporter.addr.port())];
    targets.push(("127.0.0.1".to_owned(), v4.local_addr().expect("addr").port()));
    if let Some(l) = &v6 {
        targets.push(("::1".to_owned(), l.local_addr().expect("addr").port()));
    }
    // The node as the job's namespace sees it: the bridge's gateway.
    let gateway = gateway(&h);
    for port in [api.port(), exporter.addr.port()] {
        targets.extend(gateway.clone().map(|g| (g, port)));
    }
    assert!(reaches(api) && reaches(exporter.addr), "the node itself reaches both");
    let args: Vec<String> = targets.iter().flat_map(|(h, p)| [h.clone(), p.to_string()]).collect();
    let id = submit_perl(&*h.store, "t", PROBE, &args);
    assert_eq!(finished(&h, id).await.state, JobState::Succeeded, "{}", log(&h, id, "stderr"));
    let out = log(&h, id, "stdout");
    assert_eq!(out.lines().count(), targets.len(), "{out}");
    assert!(out.lines().all(|l| l.starts_with("refused")), "a job reached the node's loopback:\n{out}");
    assert!(gateway.is_some(), "the agent wrote its conflist");
    for l in std::iter::once(&v4).chain(&v6) {
        l.set_nonblocking(true).expect("nonblocking");
        assert!(l.accept().is_err(), "the test's listener got a connection from the job");
    }
    let route_localnet = format!("/proc/sys/net/ipv4/conf/{}/route_localnet", bridge_name(&scope(&h)));
    assert_eq!(std::fs::read_to_string(&route_localnet).expect("the bridge exists").trim(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_a_job_binds_on_loopback_is_not_reachable_from_the_node() {
    if needs_netns("a_socket_a_job_binds_on_loopback_is_not_reachable_from_the_node") {
        return;
    }
    let h = start_with(Setup::default()).await;
    let port = free_port();
    let marker = h.shared.join("listening");
    let id = submit_perl(&*h.store, "t", LISTEN, &[port.to_string(), marker.display().to_string()]);
    until("the job to bind its loopback port", || marker.exists().then_some(())).await;
    // The squatter: while it holds 127.0.0.1:PORT and [::1]:PORT in its namespace, the node's
    // own loopback at that port is free, and nothing the node sends there reaches the job.
    assert!(!reaches(([127, 0, 0, 1], port).into()), "the node reached the job's 127.0.0.1:{port}");
    assert!(
        !reaches((std::net::Ipv6Addr::LOCALHOST, port).into()),
        "the node reached the job's [::1]:{port}"
    );
    let ours = TcpListener::bind(("127.0.0.1", port)).expect("the node's own 127.0.0.1 port is still free");
    drop(ours);
    assert_eq!(finished(&h, id).await.state, JobState::Succeeded, "{}", log(&h, id, "stderr"));
    assert_eq!(log(&h, id, "stdout"), "done\n", "no connection reached the job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_bs_job_cannot_connect_to_team_as_abstract_unix_socket() {
    if needs_netns("team_bs_job_cannot_connect_to_team_as_abstract_unix_socket") {
        return;
    }
    let h = start_with(Setup { fleet: "2xA100-80GB", ..Setup::default() }).await;
    let name = format!("gantry-test-{}", std::process::id());
    let marker = h.shared.join("abstract");
    let a =
        submit_perl(&*h.store, "a", ABSTRACT, &["listen".into(), name.clone(), marker.display().to_string()]);
    until("team a's socket", || marker.exists().then_some(())).await;
    let b = submit_perl(&*h.store, "b", ABSTRACT, &["connect".into(), name.clone()]);
    assert_eq!(finished(&h, b).await.state, JobState::Succeeded, "{}", log(&h, b, "stderr"));
    let out = log(&h, b, "stdout");
    assert!(out.starts_with("refused"), "team b reached team a's abstract socket: {out}");
    assert_eq!(finished(&h, a).await.state, JobState::Succeeded, "{}", log(&h, a, "stderr"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cni_del_leaves_no_veth_namespace_file_address_or_iptables_rule_of_the_attempt() {
    if needs_netns("cni_del_leaves_no_veth_namespace_file_address_or_iptables_rule_of_the_attempt") {
        return;
    }
    let h = start_with(Setup::default()).await;
    let scope = scope(&h);
    let marker = h.shared.join("attached");
    let script = format!("cat /sys/class/net/eth0/address > {}; sleep 3", marker.display());
    let id = crate::runner::submit(&*h.store, &script, 0);
    let container = format!("gantry-{scope}-{id}-1");
    let netns = h.dir.path().join(format!("agent/netns/{id}-1"));
    let ipam = h.dir.path().join("agent/cni/ipam").join(format!("gantry-{scope}"));
    let bridge_ports = PathBuf::from(format!("/sys/class/net/{}/brif", bridge_name(&scope)));
    let leases = || -> Vec<String> {
        std::fs::read_dir(&ipam)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter(|t| t.contains(&container))
            .collect()
    };
    let rules = || {
        let out = std::process::Command::new("iptables-save").output().expect("iptables-save");
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains(&container)).count()
    };
    until("the job to run in its namespace", || marker.exists().then_some(())).await;
    assert!(netns.exists(), "the namespace file is there while the job runs");
    assert_eq!(leases().len(), 1, "one address is leased to the attempt");
    assert!(rules() > 0, "the attempt has NAT rules while it runs");
    assert_eq!(std::fs::read_dir(&bridge_ports).expect("the bridge").count(), 1, "one veth on the bridge");
    assert_eq!(finished(&h, id).await.state, JobState::Succeeded, "{}", log(&h, id, "stderr"));
    let _ = job(&*h.store, id);
    assert!(!netns.exists() && !netns.with_extension("json").exists(), "the namespace file is gone");
    assert!(leases().is_empty(), "the address was released");
    assert_eq!(rules(), 0, "no iptables rule names the attempt");
    assert_eq!(
        std::fs::read_dir(&bridge_ports).expect("the bridge").count(),
        0,
        "no veth is left on the bridge"
    );
    let mut mounts = String::new();
    std::fs::File::open("/proc/self/mountinfo")
        .expect("mountinfo")
        .read_to_string(&mut mounts)
        .expect("read");
    assert!(!mounts.contains(&netns.display().to_string()), "the namespace is unmounted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_attempt_loses_its_network_when_it_ends_and_a_restart_removes_those_of_dead_attempts() {
    if needs_netns(
        "an_adopted_attempt_loses_its_network_when_it_ends_and_a_restart_removes_those_of_dead_attempts",
    ) {
        return;
    }
    let mut h = start_with(Setup { fleet: "3xA100-80GB", ..Setup::default() }).await;
    h.agent.abort();
    let _ = (&mut h.agent).await;
    let fleet = || {
        gantry_agent::runner::Gpus::open(
            &gantry_agent::runner::BackendChoice::Simulated("3xA100-80GB".into()),
            3,
        )
        .expect("fleet")
    };
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    h.agent = h.start_agent_until(fleet(), false, stop_rx);
    let go = h.shared.join("go");
    let adopted =
        crate::runner::submit(&*h.store, &format!("while [ ! -e {} ]; do sleep 0.1; done", go.display()), 1);
    // One dies with its shim and keeps its record (found dead), one also loses its record (an
    // orphan only the namespace directory still knows of).
    let dead = crate::runner::submit(&*h.store, "sleep 600", 1);
    let orphan = crate::runner::submit(&*h.store, "sleep 600", 1);
    let netns = |id: i64| h.dir.path().join(format!("agent/netns/{id}-1"));
    let record = |id: i64| h.dir.path().join(format!("agent/attempts/{id}-1.json"));
    for id in [adopted, dead, orphan] {
        until("the job to run", || Some(job(&*h.store, id)).filter(|j| j.state == JobState::Running)).await;
        until("its record", || record(id).exists().then_some(())).await;
        assert!(netns(id).exists(), "job {id} has its namespace");
    }
    let _ = stop.send(true);
    let _ = (&mut h.agent).await;
    for id in [dead, orphan] {
        let text = std::fs::read_to_string(record(id)).expect("record");
        let shim = serde_json::from_str::<serde_json::Value>(&text).expect("json")["shim_pid"].to_string();
        let _ = std::process::Command::new("kill").args(["-KILL", &shim]).status();
    }
    std::fs::remove_file(record(orphan)).expect("forget the orphan");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    h.agent = h.start_agent_until(fleet(), true, stop_rx);
    until("the dead attempts' namespaces to go", || {
        (!netns(dead).exists() && !netns(orphan).exists()).then_some(())
    })
    .await;
    assert!(netns(adopted).exists(), "the adopted attempt keeps its namespace");
    std::fs::write(&go, "").expect("go");
    assert_eq!(finished(&h, adopted).await.state, JobState::Succeeded, "{}", log(&h, adopted, "stderr"));
    assert!(!netns(adopted).exists(), "the adopted attempt's namespace went with it");
    // The dead jobs run again as attempt 2 (they had retries left); of attempt 1 nothing is left.
    let left: Vec<String> = std::fs::read_dir(h.dir.path().join("agent/netns"))
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.trim_end_matches(".json").ends_with("-1"))
        .collect();
    assert!(left.is_empty(), "attempt 1's namespaces are all gone: {left:?}");
    let _ = stop.send(true);
}

/// A replica: listens on 0.0.0.0 at `$PORT` and at ARGV[0] (a port it binds besides its
/// service port), says so in ARGV[1], and for 8 s accepts and closes connections.
const REPLICA: &str = r#"
use Socket qw(:all);
my ($other, $marker) = @ARGV;
my @l;
for my $port ($ENV{PORT}, $other) {
    socket(my $s, AF_INET, SOCK_STREAM, 0) or die; setsockopt($s, SOL_SOCKET, SO_REUSEADDR, 1);
    bind($s, pack_sockaddr_in($port, INADDR_ANY)) or die "bind $port: $!"; listen($s, 16); push @l, $s;
}
open(my $m, ">", $marker) or die; print $m "bound\n"; close $m;
my $end = time + 8;
while (time < $end) {
    my $r = ""; vec($r, fileno($_), 1) = 1 for @l;
    if (select(my $ready = $r, undef, undef, 0.2) > 0) {
        for my $s (@l) { if (vec($ready, fileno($s), 1)) { accept(my $c, $s); close $c; } }
    }
}
"#;

/// This machine's non-loopback address, the one the gateway reaches a local replica at
/// (`services::tick::own_address`: the source of its route toward a private address).
fn own_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind(("0.0.0.0", 0)).ok()?;
    socket.connect(("10.255.255.254", 9)).ok()?;
    Some(socket.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicas_port_answers_the_gateway_on_the_node_but_no_job_of_another_team_on_the_same_node() {
    if needs_netns(
        "a_replicas_port_answers_the_gateway_on_the_node_but_no_job_of_another_team_on_the_same_node",
    ) {
        return;
    }
    let Some(node) = own_address() else {
        eprintln!("note: this machine has no non-loopback address for the gateway to use; skipped");
        return;
    };
    let h = start_with(Setup { fleet: "2xA100-80GB", ..Setup::default() }).await;
    let (port, other) = (free_port(), free_port());
    let marker = h.shared.join("replica");
    let mut command = vec!["perl".to_owned(), "-e".to_owned(), REPLICA.to_owned()];
    command.extend([other.to_string(), marker.display().to_string()]);
    let replica = NewJob {
        team: "a".into(),
        name: "echo".into(),
        spec: SubmitRequest {
            command,
            env: [("PORT".to_owned(), port.to_string())].into(),
            ..NewJob::default().spec
        },
        submitted_at: gantry_server::now_ms(),
        service: Some(("echo".into(), 1)),
        ..NewJob::default()
    };
    // A replica is inserted only for a service that exists at its generation.
    let spec: gantry_store::ServiceSpec = serde_json::from_value(serde_json::json!({
        "name": "echo", "team": "a", "replicas": 1, "port": port, "command": ["sleep", "600"]
    }))
    .expect("a service file");
    let actor = gantry_store::Actor { name: "root".into(), role: "admin".into(), team: None, peer: None };
    let entry = gantry_store::AuditEntry {
        actor,
        action: "service.apply".into(),
        target: String::new(),
        at: 1,
        credential: None,
    };
    let apply = gantry_store::Change::ApplyService {
        team: "a".into(),
        digest: "echo".into(),
        desired: 1,
        spec: Box::new(spec),
    };
    h.store.apply(apply, entry).expect("the service");
    let id = h.store.submit(&replica).expect("submit").0;
    until("the replica to listen", || marker.exists().then_some(())).await;
    let cache = h.dir.path().join(format!("agent/netns/{id}-1.json"));
    let cached: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cache).expect("the attempt's result")).expect("json");
    let own = cached["result"]["ips"][0]["address"].as_str().expect("an address").split('/').next();
    let own = own.expect("an address").to_owned();
    // The gateway's path: the node's address, DNATed by portmap into the replica.
    assert!(reaches(SocketAddr::new(node, port)), "the gateway's path to {node}:{port} is refused");
    let bridge = gateway(&h).expect("the agent's conflist");
    let targets = [
        (own.clone(), port),
        (bridge, port),
        (node.to_string(), port),
        // The namespaces are connected: a port the replica binds besides `$PORT` answers.
        (own.clone(), other),
    ];
    let args: Vec<String> = targets.iter().flat_map(|(h, p)| [h.clone(), p.to_string()]).collect();
    let probe = submit_perl(&*h.store, "b", PROBE, &args);
    assert_eq!(finished(&h, probe).await.state, JobState::Succeeded, "{}", log(&h, probe, "stderr"));
    let out = log(&h, probe, "stdout");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), targets.len(), "{out}");
    assert!(lines[..3].iter().all(|l| l.starts_with("refused")), "team b reached the replica's port:\n{out}");
    assert!(lines[3].starts_with("reached"), "team b's job reaches the replica's other port:\n{out}");
}

#[test]
fn a_port_one_attempt_publishes_cannot_be_published_by_another_until_it_is_detached() {
    use gantry_agent::runner::network::{Network, NetworkConfig};
    if needs_netns("a_port_one_attempt_publishes_cannot_be_published_by_another_until_it_is_detached") {
        return;
    }
    let state = tempfile::tempdir().expect("state");
    let scope = format!("{:012x}", 0xfe00_0000_0000_u64 + u64::from(std::process::id()));
    let network = Network::build(&NetworkConfig::default(), state.path(), &scope, true)
        .expect("built")
        .expect("namespaces");
    let port = free_port();
    let first = network.attach(1, 1, &[port], &[]).expect("the first attempt publishes the port");
    let err = network.attach(2, 1, &[port], &[]).expect_err("the port is taken");
    assert!(err.to_string().contains(&format!("port {port} is already published")), "{err}");
    assert!(!state.path().join("netns/2-1").exists(), "the refused attempt left nothing");
    // Bound on port 0 so that no other test can take it between choosing and binding; the
    // kernel may hand out the published port itself (nothing listens there), so try again then.
    let (_busy, taken) = loop {
        let busy = TcpListener::bind(("0.0.0.0", 0)).expect("a node service");
        let taken = busy.local_addr().expect("addr").port();
        if taken != port {
            break (busy, taken);
        }
    };
    let err = network.attach(3, 1, &[taken], &[]).expect_err("a node service holds it");
    assert!(err.to_string().contains("in use on this node"), "{err}");
    first.net.detach().expect("detach");
    let again = network.attach(4, 1, &[port], &[]).expect("free again once detached");
    again.net.detach().expect("detach");
    network.release();
    assert!(!PathBuf::from("/sys/class/net").join(bridge_name(&scope)).exists(), "the bridge is removed");
}
