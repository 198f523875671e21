//! Job networks through `gantry up`: with namespaces, a job reaches neither the API nor the
//! exporter on the node's loopback, and a job that binds `[::1]:<API port>` (the server binds
//! only `127.0.0.1`) answers nobody on the node; with `--job-network shared` the node says so.
//! Traffic goes only to loopback.

use std::net::TcpStream;
use std::time::Duration;

use crate::harness::{Cluster, eventually};

/// Tries each `host port` pair given as arguments; prints `reached` or `refused` for each (the
/// agent's network tests use the same probe).
const PROBE: &str = include_str!("../../../agent/tests/data/connect-probe.pl");

/// Binds `[::1]:ARGV[0]`, says so in the file ARGV[1], and waits 5 s for a connection.
const SQUAT: &str = r#"
use Socket qw(:all);
my ($port, $marker) = @ARGV;
socket(my $l, AF_INET6, SOCK_STREAM, 0) or die "socket: $!";
bind($l, pack_sockaddr_in6($port, inet_pton(AF_INET6, "::1"))) or die "bind: $!";
listen($l, 5) or die "listen: $!";
open(my $m, ">", $marker) or die; print $m "bound\n"; close $m;
my $r = ""; vec($r, fileno($l), 1) = 1;
print((select($r, undef, undef, 5) > 0 ? "a client came\n" : "nobody came\n"));
"#;

fn ended(cluster: &Cluster, id: &str) -> serde_json::Value {
    eventually(Duration::from_secs(60), "the job to end", || {
        cluster.jobs().into_iter().find(|j| {
            j["id"].as_i64() == id.parse().ok()
                && ["succeeded", "failed", "cancelled"].contains(&j["state"].as_str().unwrap_or_default())
        })
    })
}

#[test]
fn under_gantry_up_a_job_reaches_neither_the_api_nor_the_exporter_and_its_ipv6_loopback_squat_answers_nobody()
{
    if !gantry_agent::runner::network::available_for_tests("the gantry up network test") {
        return;
    }
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB"]);
    let nodes = eventually(Duration::from_secs(20), "the local node to register", || {
        let nodes = cluster.gantry(&["nodes"]);
        nodes.contains("ready").then_some(nodes)
    });
    assert!(nodes.contains(" cni "), "the local node runs jobs in namespaces: {nodes}");
    let (api, exporter) = (cluster.port.to_string(), cluster.metrics_port.to_string());
    let probe = cluster.gantry(&[
        "submit",
        "--",
        "perl",
        "-e",
        PROBE,
        "127.0.0.1",
        &api,
        "127.0.0.1",
        &exporter,
        "::1",
        &api,
    ]);
    let job = ended(&cluster, probe.trim());
    let out = cluster.gantry(&["logs", probe.trim()]);
    assert_eq!(job["state"], "succeeded", "{job}\n{out}");
    assert_eq!(out.matches("refused").count(), 3, "a job reached the node's API or exporter:\n{out}");

    let marker = cluster.shared().join("squatting");
    let squat = cluster.gantry(&["submit", "--", "perl", "-e", SQUAT, &api, &marker.display().to_string()]);
    eventually(Duration::from_secs(30), "the job to bind [::1]:<API port>", || marker.exists().then_some(()));
    let node_v6 = TcpStream::connect_timeout(
        &(std::net::Ipv6Addr::LOCALHOST, cluster.port).into(),
        Duration::from_secs(1),
    );
    // `gantry up` holds [::1]:PORT itself (both loopback families); what answers there is the
    // server, never the job bound to the same address inside its own namespace.
    assert!(node_v6.is_ok(), "gantry up holds the node's [::1]:{api}");
    let job = ended(&cluster, squat.trim());
    let out = cluster.gantry(&["logs", squat.trim()]);
    assert_eq!(job["state"], "succeeded", "{job}\n{out}");
    assert_eq!(out, "nobody came\n", "no client of the node reached the squatter");
}

#[test]
fn with_job_network_shared_the_node_says_it_shares_its_network() {
    let cluster = Cluster::start(&["--simulated-gpus", "1xA100-80GB", "--job-network", "shared"]);
    let nodes = eventually(Duration::from_secs(20), "the local node to register", || {
        let nodes = cluster.gantry(&["nodes"]);
        nodes.contains("ready").then_some(nodes)
    });
    assert!(nodes.contains("NETWORK") && nodes.contains(" shared "), "{nodes}");
}
