//! Services on two replicas of one PostgreSQL ([`crate::pg_harness`]): the leader's service
//! controller alone scales, submits and stops replicas, so a service gets the replicas it asked
//! for once, not once per server replica, and a follower's gateway routes to them; the leader's
//! autoscaler counts the requests through the follower's gateway (load there scales a service
//! up, its times to first byte join the leader's `ttft_p95`, a service used there stays up, and
//! a request held there starts one scaled to zero).

use std::time::Duration;

use crate::harness::Cluster;
use crate::pg_harness;
use crate::services::{Serving, ready};

/// Replica jobs of `service` that have not ended.
fn live_replicas(s: &Serving, service: &str) -> usize {
    let ended = ["succeeded", "failed", "cancelled"];
    s.cluster
        .jobs()
        .iter()
        .filter(|j| j["service"] == service && !ended.iter().any(|e| j["state"] == *e))
        .count()
}

#[test]
fn on_two_replicas_a_service_gets_its_replicas_once_and_a_followers_gateway_routes_to_them() {
    let Some(server) = pg_harness::shared() else { return };
    let url = server.create_database();
    // The leader first: it serves no gateway and runs no agent.
    let _leader = Cluster::start_as(
        "server",
        "127.0.0.1",
        &["--db", &url, "--lease-ttl", "2s", "--gateway-listen", "none"],
    );
    // The follower: the fleet's agent, and the gateway the test sends to.
    let s = Serving::start(&["--db", &url, "--lease-ttl", "2s"]);
    let healthz = s.cluster.http().get(format!("{}/healthz", s.cluster.url()));
    let health: serde_json::Value =
        s.rt.block_on(async { healthz.send().await?.json().await }).expect("healthz");
    assert_eq!(health["role"], "follower", "the second replica follows: {health}");

    s.apply(&s.file("pair", "replicas: 2\n"));
    s.until("pair", "two ready replicas", 90, |v| ready(v) == 2);
    // Both replicas' controllers have ticked many times since (every 250 ms): still two jobs.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(live_replicas(&s, "pair"), 2, "one set of replicas, not one per server replica");
    assert_eq!(s.get("/ml/pair/hello", &s.token).map(|r| r.0), Ok(200), "through the follower's gateway");
    // A replica that dies is replaced once.
    let v = s.view("pair");
    let victim = v["replica_list"][0]["job"].as_i64().expect("a replica");
    let pid = std::fs::read_to_string(s.cluster.shared().join(format!("pid-{victim}"))).expect("pid file");
    let killed = std::process::Command::new("kill").args(["-9", pid.trim()]).status().expect("kill");
    assert!(killed.success());
    s.until("pair", "the killed replica replaced", 60, |v| {
        ready(v) == 2 && v["replica_list"].as_array().is_some_and(|l| l.iter().all(|r| r["job"] != victim))
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(live_replicas(&s, "pair"), 2, "replaced by one replica, not one per server replica");

    // The leader's autoscaler counts the follower's requests: load only through the follower
    // scales a service up ...
    let autoscale = "autoscale:\n  sync_s: 1\n  metrics: [{type: in_flight, target: 1}]\n";
    s.apply(&s.file("scaled", &format!("replicas: 1..3\n{autoscale}")));
    s.until("scaled", "one ready replica", 90, |v| ready(v) == 1);
    let (codes, failures) = s.load("/ml/scaled/slow?s=0.3", 6, 6.0);
    assert!(failures.is_empty() && codes.keys().all(|c| *c == 200), "{codes:?} {failures:?}");
    let up = s.until("scaled", "three replicas", 30, |v| v["replicas"]["desired"] == 3);
    assert!(up["decisions"].to_string().contains("over target 1"), "{up}");
    // ... and so does a time to first byte that only the follower's gateway measured (the
    // leader's own gateway answers nothing, so without the follower's figures it has no data).
    let ttft = "autoscale:\n  sync_s: 1\n  metrics: [{type: ttft_p95, target: 0.1}]\n";
    s.apply(&s.file("ttft", &format!("replicas: 1..2\n{ttft}")));
    s.until("ttft", "one ready replica", 90, |v| ready(v) == 1);
    let (codes, failures) = s.load("/ml/ttft/slow?s=0.3", 2, 6.0);
    assert!(failures.is_empty() && codes.keys().all(|c| *c == 200), "{codes:?} {failures:?}");
    let up = s.until("ttft", "two replicas", 30, |v| v["replicas"]["desired"] == 2);
    assert!(up["decisions"].to_string().contains("ttft_p95"), "{up}");
    // ... a service used only through the follower stays up past its idle window ...
    s.apply(&s.file("lazy", "replicas: 0..1\nscale_to_zero_after: 3s\n"));
    s.until("lazy", "a ready replica", 90, |v| ready(v) == 1);
    let until = std::time::Instant::now() + Duration::from_secs(6);
    while std::time::Instant::now() < until {
        assert_eq!(s.get("/ml/lazy/", &s.token).map(|r| r.0), Ok(200));
        std::thread::sleep(Duration::from_millis(500));
        let v = s.view("lazy");
        assert_eq!(v["replicas"]["desired"], 1, "requests through the follower keep it up: {v}");
    }
    // ... scales to zero once they stop, and a request the follower holds starts it again.
    s.until("lazy", "zero replicas", 60, |v| {
        v["replicas"]["desired"] == 0 && v["replica_list"].as_array().is_some_and(|l| l.is_empty())
    });
    let (code, _) = s.get("/ml/lazy/", &s.token).expect("held, then answered");
    assert_eq!(code, 200, "answered after the cold start");
    let v = s.view("lazy");
    assert!(v["decisions"].to_string().contains("scaled 0 → 1: cold start"), "{v}");
    assert_eq!(live_replicas(&s, "lazy"), 1);
}
