//! Services end to end through `gantry up`: a small Python replica (`tests/data/replica.py`:
//! sleeps per request, streams, fails its probe on demand) behind the gateway. Each test keeps
//! its windows short (`sync_s: 1`, a probe every 0.2 s). Traffic goes only to loopback.
//!
//! The local agent gives jobs network namespaces where this machine can (root, the CNI
//! plugins): the agent publishes `$PORT` with `portmap` and the gateway reaches it through one of
//! the machine's own non-loopback addresses. One test runs with `--job-network shared`, where
//! the gateway reaches a replica at the node's loopback.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::harness::{Cluster, eventually};

const REPLICA: &str = include_str!("../data/replica.py");

/// A cluster with a gateway on a free loopback port, and what a test needs of it.
pub(crate) struct Serving {
    pub(crate) cluster: Cluster,
    pub(crate) gateway: u16,
    /// A member token of team `ml`.
    pub(crate) token: String,
    pub(crate) rt: tokio::runtime::Runtime,
    http: reqwest::Client,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Namespaces where this machine can give them (root and the CNI plugins), else shared.
fn network() -> &'static str {
    if gantry_agent::runner::network::available_for_tests("services in network namespaces") {
        "cni"
    } else {
        "shared"
    }
}

impl Serving {
    pub(crate) fn start(extra: &[&str]) -> Self {
        Self::start_in(network(), extra)
    }

    /// A cluster whose agent runs jobs with `--job-network network`.
    fn start_in(network: &str, extra: &[&str]) -> Self {
        // Clusters of parallel tests share this machine's ports: each gets its own 100.
        static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
        let lo = 30000 + 100 * NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self::start_with_ports(network, &format!("{lo}-{}", lo + 99), extra)
    }

    /// A cluster whose replicas get ports of `ports` (`LO-HI`).
    fn start_with_ports(network: &str, ports: &str, extra: &[&str]) -> Self {
        let gateway = free_port();
        let listen = format!("127.0.0.1:{gateway}");
        let ports = ports.to_owned();
        let mut args = vec![
            "--gateway-listen",
            &listen,
            "--service-ports",
            &ports,
            "--job-network",
            network,
            "--grace",
            "1",
        ];
        args.extend_from_slice(extra);
        let cluster = Cluster::start(&args);
        std::fs::write(cluster.shared().join("replica.py"), REPLICA).expect("replica script");
        let token = cluster.gantry(&["token", "create", "--team", "ml"]).trim().to_owned();
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
        let http = s_client();
        eventually(Duration::from_secs(20), "the local node", || {
            cluster.gantry(&["nodes"]).contains("ready").then_some(())
        });
        Self { cluster, gateway, token, rt, http }
    }

    /// A service file for `name` of team `ml` with `extra` YAML lines.
    pub(crate) fn file(&self, name: &str, extra: &str) -> std::path::PathBuf {
        let shared = self.cluster.shared();
        let text = format!(
            "name: {name}\nteam: ml\nport: 8000\nupload: false\ncommand: [python3, {}]\nenv: {{UNREADY_DIR: {}}}\n\
             readiness: {{path: /health, interval_s: 0.2, timeout_s: 1, failure_threshold: 2}}\n{extra}",
            shared.join("replica.py").display(),
            shared.display()
        );
        let path = shared.join(format!("{name}.yaml"));
        std::fs::write(&path, text).expect("service file");
        path
    }

    pub(crate) fn apply(&self, file: &std::path::Path) -> String {
        self.cluster.gantry(&["service", "apply", "-f", &file.display().to_string()])
    }

    pub(crate) fn view(&self, name: &str) -> serde_json::Value {
        let text = self.cluster.gantry(&["service", "get", name, "--team", "ml", "-o", "json"]);
        serde_json::from_str(&text).expect("service json")
    }

    /// Waits until `check` holds for the service's view; returns that view.
    pub(crate) fn until(
        &self,
        name: &str,
        what: &str,
        secs: u64,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        eventually(Duration::from_secs(secs), what, || Some(self.view(name)).filter(|v| check(v)))
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.gateway)
    }

    /// One GET through the gateway: (status, body), or the transport error.
    pub(crate) fn get(&self, path: &str, token: &str) -> Result<(u16, String), String> {
        let req = self.http.get(self.url(path)).bearer_auth(token);
        self.rt.block_on(async move {
            let r = req.send().await.map_err(|e| e.to_string())?;
            let status = r.status().as_u16();
            Ok((status, r.text().await.map_err(|e| e.to_string())?))
        })
    }

    /// `clients` concurrent loops of GET `path` for `secs`; (answers by status, failures).
    pub(crate) fn load(&self, path: &str, clients: usize, secs: f64) -> Load {
        self.rt.block_on(self.spawn_load(path, clients, secs)).expect("load")
    }

    /// [`Serving::load`], running in the background.
    fn spawn_load(&self, path: &str, clients: usize, secs: f64) -> tokio::task::JoinHandle<Load> {
        let url = self.url(path);
        let token = self.token.clone();
        let http = self.http.clone();
        self.rt.spawn(async move {
            let until = Instant::now() + Duration::from_secs_f64(secs);
            let tasks: Vec<_> = (0..clients)
                .map(|_| {
                    let (url, token, http) = (url.clone(), token.clone(), http.clone());
                    tokio::spawn(async move {
                        let mut out = Vec::new();
                        while Instant::now() < until {
                            let r = http.get(&url).bearer_auth(&token).send().await;
                            out.push(match r {
                                Ok(r) => {
                                    let status = r.status().as_u16();
                                    r.text().await.map(|_| status).map_err(|e| e.to_string())
                                }
                                Err(e) => Err(e.to_string()),
                            });
                        }
                        out
                    })
                })
                .collect();
            let mut codes = std::collections::BTreeMap::new();
            let mut failures = Vec::new();
            for t in tasks {
                for r in t.await.expect("client task") {
                    match r {
                        Ok(code) => *codes.entry(code).or_default() += 1,
                        Err(e) => failures.push(e),
                    }
                }
            }
            (codes, failures)
        })
    }

    /// The server's metrics text (the admin token).
    fn metrics(&self) -> String {
        let req = self
            .cluster
            .http()
            .get(format!("{}/metrics", self.cluster.url()))
            .bearer_auth(self.cluster.token());
        self.rt.block_on(async move { req.send().await.expect("metrics").text().await.expect("text") })
    }
}

/// Answers by status, and requests that got no answer.
type Load = (std::collections::BTreeMap<u16, usize>, Vec<String>);

pub(crate) fn ready(v: &serde_json::Value) -> u64 {
    v["replicas"]["ready"].as_u64().unwrap_or(0)
}

#[test]
fn a_service_applied_from_a_file_answers_through_the_gateway_and_the_same_file_again_changes_nothing() {
    let s = Serving::start(&[]);
    let file = s.file("echo", "replicas: 1\nmax_concurrency: 4\n");
    assert_eq!(s.apply(&file).trim(), "service ml/echo created (generation 1)");
    let v = s.until("echo", "a ready replica", 30, |v| ready(v) == 1);
    for field in ["name", "team", "endpoint", "replicas", "decisions"] {
        assert!(v.get(field).is_some(), "service get -o json has {field}: {v}");
    }
    assert_eq!((v["name"].as_str(), v["team"].as_str()), (Some("echo"), Some("ml")));
    let counts = &v["replicas"];
    assert_eq!(
        (counts["desired"].as_u64(), counts["min"].as_u64(), counts["max"].as_u64()),
        (Some(1), Some(1), Some(1))
    );
    assert!(v["endpoint"].as_str().is_some_and(|e| e.ends_with(&format!(":{}/ml/echo/", s.gateway))), "{v}");
    let job = v["replica_list"][0]["job"].as_i64().expect("a replica job");

    let (code, body) = s.get("/ml/echo/hello", &s.token).expect("through the gateway");
    assert_eq!((code, body.as_str()), (200, format!("{job} 1\n").as_str()));
    // The replica is a job of kind service: listed with its service.
    let listed =
        s.cluster.jobs().into_iter().find(|j| j["id"].as_i64() == Some(job)).expect("the replica job");
    assert_eq!(listed["service"], "echo", "{listed}");

    assert_eq!(s.apply(&file).trim(), "service ml/echo unchanged (generation 1)");
    // Another team's member: the gateway answers as for a service that does not exist, and so
    // does the API.
    let other = s.cluster.gantry(&["token", "create", "--team", "vision"]).trim().to_owned();
    assert_eq!(s.get("/ml/echo/hello", &other).map(|r| r.0), Ok(404));
    let api = s.cluster.try_gantry(&["service", "get", "echo", "--team", "ml", "--token", &other]);
    assert!(!api.status.success() && String::from_utf8_lossy(&api.stderr).contains("not found"));
    let delete = s.cluster.try_gantry(&["service", "delete", "echo", "--team", "ml", "--token", &other]);
    assert!(!delete.status.success(), "another team cannot delete it");

    // A bad file: a sentence, exit status not 0, nothing sent.
    let bad = s.cluster.shared().join("bad.yaml");
    std::fs::write(&bad, "name: bad\nport: 8000\ncommand: [x]\nreplicas: 4..1\n").expect("file");
    let out = s.cluster.try_gantry(&["service", "apply", "-f", &bad.display().to_string()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the range 4..1 is empty"), "{out:?}");

    let streamed = s.get("/ml/echo/stream", &s.token).expect("stream");
    assert_eq!(streamed, (200, "data: token 0\n\ndata: token 1\n\ndata: token 2\n\ndata: [DONE]\n\n".into()));

    s.cluster.gantry(&["service", "delete", "echo", "--team", "ml"]);
    eventually(Duration::from_secs(20), "the replica to stop", || {
        let j = s.cluster.jobs().into_iter().find(|j| j["id"].as_i64() == Some(job))?;
        (j["state"] == "cancelled").then_some(())
    });
    assert_eq!(s.get("/ml/echo/hello", &s.token).map(|r| r.0), Ok(404));
}

#[test]
fn a_replica_failing_its_readiness_probe_gets_no_traffic_and_is_restarted_once_it_stopped_answering() {
    let s = Serving::start(&[]);
    s.apply(&s.file("pair", "replicas: 2\n"));
    let v = s.until("pair", "two ready replicas", 30, |v| ready(v) == 2);
    let jobs: Vec<i64> =
        v["replica_list"].as_array().expect("list").iter().filter_map(|r| r["job"].as_i64()).collect();
    std::fs::write(s.cluster.shared().join(format!("unready-{}", jobs[0])), "").expect("marker");
    s.until("pair", "one replica unready", 20, |v| ready(v) == 1);
    for _ in 0..20 {
        let (code, body) = s.get("/ml/pair/", &s.token).expect("answer");
        // The other replica, or (once liveness restarted it) its replacement; never it.
        assert_eq!(code, 200);
        assert_ne!(body, format!("{} 1\n", jobs[0]), "a replica failing its probe got a request");
    }
    // It was ready and keeps failing: liveness restarts it (a new job replaces it).
    let v = s.until("pair", "the failing replica replaced", 30, |v| {
        ready(v) == 2
            && v["replica_list"]
                .as_array()
                .is_some_and(|l| l.iter().all(|r| r["job"].as_i64() != Some(jobs[0])))
    });
    assert!(v["replica_list"].as_array().is_some_and(|l| l.len() == 2), "{v}");
    let old = s.cluster.jobs().into_iter().find(|j| j["id"].as_i64() == Some(jobs[0])).expect("old job");
    assert_eq!(old["state"], "cancelled", "{old}");
}

#[test]
fn a_service_scales_up_to_its_max_under_concurrent_clients_and_back_down_after_its_window() {
    let s = Serving::start(&[]);
    let autoscale = "autoscale:\n  sync_s: 1\n  metrics: [{type: in_flight, target: 1}]\n  behavior:\n    \
                     scale_down: {stabilization_window_s: 2, policies: [{type: percent, value: 100, period_s: 1}]}\n";
    s.apply(&s.file("scaled", &format!("replicas: 1..3\n{autoscale}")));
    s.until("scaled", "one ready replica", 30, |v| ready(v) == 1);
    let (codes, failures) = s.load("/ml/scaled/slow?s=0.3", 6, 6.0);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(codes.keys().copied().collect::<Vec<_>>(), vec![200], "{codes:?}");
    let up = s.until("scaled", "three replicas", 20, |v| v["replicas"]["desired"] == 3);
    let reasons: Vec<&str> =
        up["decisions"].as_array().expect("decisions").iter().filter_map(|d| d["reason"].as_str()).collect();
    assert!(
        reasons.iter().any(|r| r.starts_with("scaled ") && r.contains("→ 3") && r.contains("over target 1")),
        "{reasons:?}"
    );
    let down =
        s.until("scaled", "back to one replica", 30, |v| v["replicas"]["desired"] == 1 && ready(v) == 1);
    assert_eq!(down["decisions"][0]["to"].as_u64(), Some(1), "{down}");
    let table = s.cluster.gantry(&["service", "get", "scaled", "--team", "ml"]);
    assert!(table.contains("scaled 3 → ") && table.contains("under target 1"), "{table}");
}

#[test]
fn gantrys_policy_sizes_a_service_on_its_arrivals_and_its_declared_replica_rate() {
    let s = Serving::start(&[]);
    let autoscale = "autoscale:\n  policy: gantry\n  replica_rps: 2\n  cold_start_s: 1\n  behavior:\n    \
                     scale_down: {stabilization_window_s: 2}\n";
    s.apply(&s.file("sized", &format!("replicas: 1..3\n{autoscale}")));
    s.until("sized", "one ready replica", 30, |v| ready(v) == 1);
    // Six clients at 0.3 s a request arrive at about 20 requests/s: ten replicas of 2 req/s.
    let (codes, failures) = s.load("/ml/sized/slow?s=0.3", 6, 6.0);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(codes.keys().copied().collect::<Vec<_>>(), vec![200], "{codes:?}");
    let up = s.until("sized", "three replicas", 20, |v| v["replicas"]["desired"] == 3);
    let reasons: Vec<&str> =
        up["decisions"].as_array().expect("decisions").iter().filter_map(|d| d["reason"].as_str()).collect();
    assert!(reasons.iter().any(|r| r.contains("→ 3") && r.contains("replicas of 2.0 req/s")), "{reasons:?}");
    s.until("sized", "back to one replica", 30, |v| v["replicas"]["desired"] == 1);
}

#[test]
fn gantry_says_when_busy_replicas_serve_far_less_than_the_declared_replica_rate() {
    let s = Serving::start(&[]);
    // One request at a time, 0.3 s each: about 3.3 requests/s, where the block declares 20.
    let autoscale = "autoscale:\n  policy: gantry\n  replica_rps: 20\n  cold_start_s: 1\n";
    s.apply(&s.file("rated", &format!("replicas: 1..2\nmax_concurrency: 1\n{autoscale}")));
    s.until("rated", "one ready replica", 30, |v| ready(v) == 1);
    let load = s.spawn_load("/ml/rated/slow?s=0.3", 4, 45.0);
    let v = s
        .until("rated", "the replica rate said", 60, |v| v["decisions"].to_string().contains("replica rate"));
    let said = v["decisions"].as_array().expect("decisions").iter().filter_map(|d| d["reason"].as_str());
    let said: Vec<&str> = said.filter(|r| r.starts_with("replica rate")).collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("replica_rps 20") && said[0].contains("too few replicas"), "{}", said[0]);
    let (codes, failures) = s.rt.block_on(load).expect("load");
    assert!(failures.is_empty() && codes.keys().all(|c| *c == 200), "{codes:?} {failures:?}");
}

#[test]
fn a_rolling_update_under_load_fails_no_request_and_ends_on_the_new_generation() {
    let s = Serving::start(&[]);
    let file = s.file("roll", "replicas: 2\n");
    s.apply(&file);
    s.until("roll", "two ready replicas", 30, |v| ready(v) == 2);
    let changed =
        std::fs::read_to_string(&file).expect("file").replace("UNREADY_DIR:", "VERSION: '2', UNREADY_DIR:");
    std::fs::write(&file, changed).expect("file");
    let load = s.spawn_load("/ml/roll/slow?s=0.05", 4, 15.0);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(s.apply(&file).trim(), "service ml/roll configured (generation 2)");
    let v = s.until("roll", "both replicas on generation 2", 40, |v| {
        let list = v["replica_list"].as_array().cloned().unwrap_or_default();
        ready(v) == 2 && list.len() == 2 && list.iter().all(|r| r["generation"] == 2)
    });
    let (codes, failures) = s.rt.block_on(load).expect("load");
    assert!(failures.is_empty(), "requests failed during the rolling update: {failures:?}");
    assert_eq!(codes.keys().copied().collect::<Vec<_>>(), vec![200], "every answer a 200: {codes:?}");
    assert!(codes[&200] > 50, "the load ran ({codes:?})");
    let (_, body) = s.get("/ml/roll/", &s.token).expect("answer");
    assert!(body.ends_with(" 2\n"), "the new generation answers: {body} {v}");
}

#[test]
fn a_service_scales_to_zero_when_idle_and_the_next_request_is_answered_after_the_cold_start() {
    let s = Serving::start(&[]);
    s.apply(&s.file("lazy", "replicas: 0..1\nscale_to_zero_after: 3s\n"));
    s.until("lazy", "a ready replica", 30, |v| ready(v) == 1);
    assert_eq!(s.get("/ml/lazy/", &s.token).map(|r| r.0), Ok(200));
    let v = s.until("lazy", "zero replicas", 30, |v| {
        v["replicas"]["desired"] == 0 && v["replica_list"].as_array().is_some_and(|l| l.is_empty())
    });
    assert!(
        v["decisions"][0]["reason"].as_str().is_some_and(|r| r.contains("→ 0: no request for 3s")),
        "{v}"
    );
    let started = Instant::now();
    let (code, _) = s.get("/ml/lazy/", &s.token).expect("held, then answered");
    assert_eq!(code, 200, "the request waited for the cold start");
    assert!(started.elapsed() > Duration::from_millis(200), "it was a cold start");
    let v = s.until("lazy", "the cold start recorded", 10, |v| {
        v["decisions"].as_array().is_some_and(|d| {
            d.iter().any(|d| {
                d["reason"].as_str().is_some_and(|r| r.contains("cold start: the first replica was ready"))
            })
        })
    });
    let reasons = v["decisions"].to_string();
    assert!(reasons.contains("scaled 0 → 1: cold start"), "{reasons}");
    let metrics = s.metrics();
    assert!(
        metrics.contains("gantry_service_cold_start_seconds_count{service=\"lazy\",team=\"ml\"} 1"),
        "the cold start is measured: {}",
        metrics.lines().filter(|l| l.contains("cold_start")).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_service_holds_no_more_replicas_than_its_teams_guarantee_and_says_why() {
    let s = Serving::start(&["--simulated-gpus", "2xA100-80GB"]);
    s.cluster.gantry(&["team", "set", "ml", "--guarantee", "1"]);
    s.apply(&s.file("big", "replicas: 2\ngpus: 1\n"));
    let v = s.until("big", "one replica and why not two", 30, |v| {
        ready(v) == 1 && v["reason"].as_str().is_some_and(|r| r.contains("guarantee is 1 GPU(s)"))
    });
    assert_eq!(v["replica_list"].as_array().map(Vec::len), Some(1), "{v}");
    let table = s.cluster.gantry(&["service", "get", "big", "--team", "ml"]);
    assert!(table.contains("waiting   team ml's guarantee is 1 GPU(s)"), "{table}");
}

#[test]
fn a_replica_that_holds_an_idle_gpu_without_becoming_ready_is_stopped_as_failed_and_a_ready_one_is_left() {
    let s = Serving::start(&["--simulated-gpus", "2xA100-80GB"]);
    let policy = ["team", "idle", "ml", "--kind", "service", "--warn-after", "2s", "--act-after", "6s"];
    s.cluster.gantry(&[&policy[..], &["--action", "cancel"]].concat());
    // Both replicas leave their GPU idle; one never answers its probe.
    let stuck = s.cluster.shared().join("stuck.yaml");
    std::fs::write(
        &stuck,
        "name: stuck\nteam: ml\nport: 8000\nupload: false\ncommand: [sleep, \"600\"]\ngpus: 1\n\
         env: {GANTRY_SIM_PROFILE: idle}\nreadiness: {path: /health, interval_s: 0.2, timeout_s: 1}\n",
    )
    .expect("file");
    s.apply(&stuck);
    s.apply(&s.file("fine", "gpus: 1\nenv: {GANTRY_SIM_PROFILE: idle}\n"));
    s.until("fine", "the ready service", 30, |v| ready(v) == 1);
    let first = s.until("stuck", "the stuck replica to run", 30, |v| {
        v["replica_list"].as_array().is_some_and(|l| l.iter().any(|r| r["state"] == "running"))
    });
    let id = first["replica_list"][0]["job"].as_i64().expect("replica id").to_string();
    let events = eventually(Duration::from_secs(60), "the stuck replica to be stopped", || {
        let events = s.cluster.gantry(&["events", "--job", &id]);
        events.contains("job.idle-stopped").then_some(events)
    });
    assert!(events.contains("without being ready"), "{events}");
    let job = eventually(Duration::from_secs(30), "the replica to end", || {
        let j: serde_json::Value =
            serde_json::from_str(&s.cluster.gantry(&["job", &id, "-o", "json"])).expect("json");
        j["job"]["state"].as_str().is_some_and(|st| st != "running").then_some(j)
    });
    assert_eq!(job["job"]["state"], "failed", "{job}");
    // The service counts the failure: a request gets 503 at once with its words. The ready one
    // keeps its replica.
    let (code, body) = s.get("/ml/stuck/", &s.token).expect("an answer");
    assert!(code == 503 && body.contains("without being ready"), "{code} {body}");
    let fine = s.view("fine");
    assert_eq!(ready(&fine), 1, "{fine}");
    let fine_id = fine["replica_list"][0]["job"].as_i64().expect("replica id");
    let events = s.cluster.gantry(&["events", "--job", &fine_id.to_string()]);
    assert!(!events.contains("idle"), "a ready replica is serving, idle or not:\n{events}");
}

#[test]
fn a_teams_services_and_replicas_stop_at_its_caps_and_say_why() {
    let s = Serving::start(&["--simulated-gpus", "4xA100-80GB"]);
    s.cluster.gantry(&["team", "set", "ml", "--max-services", "2", "--max-replicas", "3"]);
    let teams = s.cluster.gantry(&["teams"]);
    assert!(teams.contains("2/3"), "gantry teams shows the caps:\n{teams}");
    s.apply(&s.file("one", "replicas: 2\n"));
    s.apply(&s.file("two", "replicas: 2\n"));
    // A third service is refused with the figures; the same file again is no new service.
    let third = s.file("three", "replicas: 1\n");
    let out = s.cluster.try_gantry(&["service", "apply", "-f", &third.display().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("team ml has 2 services and may have 2"), "{err}");
    s.apply(&s.file("two", "replicas: 2\n"));
    // Four replicas asked for, three held; the one short says why.
    let held = |v: &serde_json::Value| v["replica_list"].as_array().map_or(0, Vec::len);
    s.until("two", "the team's three replicas", 30, |_| held(&s.view("one")) + held(&s.view("two")) == 3);
    let short = [s.view("one"), s.view("two")];
    assert!(
        short.iter().any(|v| v["reason"].as_str().is_some_and(|r| r.contains("may hold 3"))),
        "{short:?}"
    );
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(held(&s.view("one")) + held(&s.view("two")), 3, "no fourth replica later either");
}

#[test]
fn a_service_of_a_team_without_a_guarantee_holds_no_more_replicas_than_the_schedulers_cap_and_says_why() {
    let s = Serving::start(&["--simulated-gpus", "2xA100-80GB"]);
    s.apply(&s.file("wide", "replicas: 3\ngpus: 1\n"));
    let v = s.until("wide", "two replicas and why not three", 30, |v| {
        ready(v) == 2
            && v["reason"].as_str().is_some_and(|r| r.contains("no guarantee and may hold at most 2 GPU(s)"))
    });
    assert_eq!(v["replica_list"].as_array().map(Vec::len), Some(2), "no third replica waits pending: {v}");
}

#[test]
fn a_request_held_past_the_services_cold_start_timeout_gets_503_with_a_sentence() {
    let s = Serving::start(&[]);
    // A replica that never listens: the request waits for a readiness that never comes.
    let file = s.cluster.shared().join("stuck.yaml");
    std::fs::write(
        &file,
        "name: stuck\nteam: ml\nport: 8000\ncommand: [sleep, \"600\"]\nreplicas: 0..1\n\
         cold_start_timeout: 2s\nreadiness: {path: /health, interval_s: 0.2, timeout_s: 1}\n",
    )
    .expect("file");
    s.apply(&file);
    s.until("stuck", "its replica, never ready", 20, |v| {
        v["replica_list"].as_array().is_some_and(|l| l.len() == 1) && ready(v) == 0
    });
    let started = Instant::now();
    let (status, body) = s.get("/ml/stuck/", &s.token).expect("an answer");
    let held = started.elapsed();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("the request was held 2 s while one started, and none became ready"), "{body}");
    assert!(
        held >= Duration::from_secs(2) && held < Duration::from_secs(30),
        "held {held:?}, not 10 minutes"
    );
}

#[test]
fn the_autoscaler_scales_on_a_series_scraped_from_the_replicas_own_metrics() {
    let s = Serving::start(&[]);
    let block = "replicas: 1..3\nautoscale: {sync_s: 1, metrics: [{type: prometheus, series: replica_waiting, target: 1}], \
                 behavior: {scale_down: {stabilization_window_s: 2}}}\n";
    s.apply(&s.file("scraped", block));
    s.until("scraped", "a ready replica", 30, |v| ready(v) == 1);
    // The replica's /metrics says 3 requests wait in it: 3 per replica over target 1.
    std::fs::write(s.cluster.shared().join("waiting"), "3").expect("waiting");
    let v = s.until("scraped", "three replicas wanted", 30, |v| v["replicas"]["desired"] == 3);
    // HPA reads the window's mean since its last sync, so the first step may be 1 → 2.
    let reasons = v["decisions"].to_string();
    assert!(reasons.contains("→ 3") && reasons.contains(": prometheus replica_waiting "), "{reasons}");
    assert!(reasons.contains(" per replica over target 1"), "{reasons}");
    std::fs::write(s.cluster.shared().join("waiting"), "0").expect("waiting");
    s.until("scraped", "back to one", 40, |v| v["replicas"]["desired"] == 1);
}

#[test]
fn the_autoscaler_scales_on_gpu_utilization_and_sm_active_from_the_agents_gpu_samples() {
    // Each replica's simulated GPU runs at 90 % (SM activity 0.81): over both targets.
    let s = Serving::start(&["--simulated-gpus", "4xA100-80GB"]);
    for (name, metric) in [("util", "gpu_utilization"), ("sm", "sm_active")] {
        let block = format!(
            "replicas: 1..2\ngpus: 1\nautoscale: {{sync_s: 1, metrics: [{{type: {metric}, target: 0.5}}]}}\n"
        );
        s.apply(&s.file(name, &block));
    }
    for (name, metric) in [("util", "gpu_utilization 0."), ("sm", "sm_active 0.")] {
        let v = s.until(name, "two replicas wanted", 40, |v| v["replicas"]["desired"] == 2);
        let reasons = v["decisions"].to_string();
        assert!(reasons.contains(&format!("scaled 1 → 2: {metric}")), "{name}: {reasons}");
    }
}

/// A plain-HTTP client for the gateway (built the way the cluster's client is, so the crypto
/// provider is installed).
fn s_client() -> reqwest::Client {
    gantry_agent::runner::client::builder(None, None)
        .expect("client")
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

#[test]
fn killing_a_replica_under_load_fails_only_the_requests_it_had_in_flight_and_it_is_replaced() {
    let s = Serving::start(&[]);
    s.apply(&s.file("sturdy", "replicas: 2\nmax_concurrency: 2\n"));
    let v = s.until("sturdy", "two ready replicas", 30, |v| ready(v) == 2);
    let victim = v["replica_list"][0]["job"].as_i64().expect("a replica");
    let pid = std::fs::read_to_string(s.cluster.shared().join(format!("pid-{victim}"))).expect("pid file");
    // 4 clients, each replica at most 2 in flight: at most 2 requests are on the victim.
    let load = s.spawn_load("/ml/sturdy/slow?s=0.3", 4, 5.0);
    std::thread::sleep(Duration::from_millis(1500));
    let killed = std::process::Command::new("kill").args(["-9", pid.trim()]).status().expect("kill");
    assert!(killed.success());
    let (codes, failures) = s.rt.block_on(load).expect("load");
    let failed: usize =
        codes.iter().filter(|(c, _)| **c != 200).map(|(_, n)| n).sum::<usize>() + failures.len();
    assert!(failed <= 2, "only the victim's in-flight requests fail: {codes:?} {failures:?}");
    assert!(codes.get(&200).is_some_and(|n| *n > 20), "the others were answered: {codes:?}");
    let v = s.until("sturdy", "the killed replica replaced", 30, |v| {
        ready(v) == 2 && v["replica_list"].as_array().is_some_and(|l| l.iter().all(|r| r["job"] != victim))
    });
    let old = s.cluster.jobs().into_iter().find(|j| j["id"].as_i64() == Some(victim)).expect("the victim");
    // Its exit (failed) or its probe (stopped: cancelled), whichever the controller saw first.
    assert!(["failed", "cancelled"].contains(&old["state"].as_str().unwrap_or("")), "{old} {v}");
}

#[test]
fn a_replica_that_exits_is_never_succeeded_and_is_restarted_with_back_off() {
    let s = Serving::start(&[]);
    let file = s.cluster.shared().join("quits.yaml");
    std::fs::write(&file, "name: quits\nteam: ml\nport: 8000\ncommand: [sh, -c, 'exit 0']\n").expect("file");
    s.apply(&file);
    let v = s.until("quits", "the back-off said", 30, |v| {
        v["reason"].as_str().is_some_and(|r| r.contains("failed in a row; the next starts in"))
    });
    let terminal = |j: &serde_json::Value| {
        ["failed", "succeeded", "cancelled"].contains(&j["state"].as_str().unwrap_or(""))
    };
    let replicas = eventually(Duration::from_secs(30), "a second replica to end", || {
        let r: Vec<serde_json::Value> =
            s.cluster.jobs().into_iter().filter(|j| j["service"] == "quits").collect();
        (r.iter().filter(|j| terminal(j)).count() >= 2).then_some(r)
    });
    let ended: Vec<&serde_json::Value> = replicas.iter().filter(|j| terminal(j)).collect();
    assert!(
        !ended.is_empty() && ended.iter().all(|j| j["state"] == "failed"),
        "a replica is never succeeded: {ended:?} {v}"
    );
    assert!(
        ended[0]["reason"].as_str().is_some_and(|r| r.contains("replicas serve until stopped")),
        "{:?}",
        ended[0]
    );
}

#[test]
fn an_invoke_token_calls_its_own_service_through_the_gateway_and_nothing_else() {
    // Jobs sharing the node's network: the gateway reaches replicas on the node's loopback.
    let s = Serving::start_in("shared", &[]);
    s.apply(&s.file("inv", "replicas: 1\n"));
    // The second one from flags instead of a file.
    let script = s.cluster.shared().join("replica.py").display().to_string();
    let created = s.cluster.gantry(&[
        "service",
        "create",
        "other",
        "--team",
        "ml",
        "--replicas",
        "1..2",
        "--port",
        "8000",
        "--readiness-path",
        "/health",
        "--target-in-flight",
        "4",
        "--",
        "python3",
        &script,
    ]);
    assert_eq!(created.trim(), "service ml/other created (generation 1)");
    s.until("inv", "a ready replica", 30, |v| ready(v) == 1);
    s.until("other", "a ready replica", 30, |v| ready(v) == 1);
    // A member of the team makes it (not only an admin).
    let out = s.cluster.gantry(&["token", "create", "--service", "inv", "--team", "ml", "--token", &s.token]);
    let invoke = out.lines().next().expect("the secret").trim().to_owned();
    assert_eq!(s.get("/ml/inv/", &invoke).map(|r| r.0), Ok(200));
    assert_eq!(s.get("/ml/other/", &invoke).map(|r| r.0), Ok(404), "another service of the same team");
    let api = s.cluster.try_gantry(&["services", "--token", &invoke]);
    assert!(!api.status.success(), "the API refuses an invoke token");
    assert!(String::from_utf8_lossy(&api.stderr).contains("invoke token"), "{api:?}");
    let foreign = s.cluster.gantry(&["token", "create", "--team", "vision"]).trim().to_owned();
    let refused =
        s.cluster.try_gantry(&["token", "create", "--service", "inv", "--team", "ml", "--token", &foreign]);
    assert!(
        !refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("not found"),
        "{refused:?}"
    );
    // The team's viewers and operators may read the service, not call it: only members do.
    for role in ["viewer", "operator"] {
        let out = s.cluster.gantry(&["token", "create", "--team", "ml", "--role", role]);
        let token = out.lines().next().expect("the secret").trim().to_owned();
        assert_eq!(s.get("/ml/inv/", &token).map(|r| r.0), Ok(404), "a {role} of the team");
    }
    assert_eq!(s.get("/ml/inv/", &s.token).map(|r| r.0), Ok(200), "a member");

    // Another member of the team lists the team's invoke tokens and revokes one.
    let bob = s.cluster.gantry(&["token", "create", "--team", "ml", "--user", "bob"]).trim().to_owned();
    let listed = s.cluster.gantry(&["token", "list", "-o", "json", "--token", &bob]);
    let tokens: Vec<serde_json::Value> = serde_json::from_str(&listed).expect("json");
    let id = tokens.iter().find(|t| t["kind"] == "invoke").and_then(|t| t["id"].as_i64()).expect("listed");
    s.cluster.gantry(&["token", "revoke", &id.to_string(), "--token", &bob]);
    assert_eq!(s.get("/ml/inv/", &invoke).map(|r| r.0), Ok(404), "revoked by a member of the team");
    // An invoke token stops working when its creator leaves the team.
    let carol = s.cluster.gantry(&["token", "create", "--team", "ml", "--user", "carol"]).trim().to_owned();
    let out = s.cluster.gantry(&["token", "create", "--service", "inv", "--team", "ml", "--token", &carol]);
    let hers = out.lines().next().expect("the secret").trim().to_owned();
    assert_eq!(s.get("/ml/inv/", &hers).map(|r| r.0), Ok(200));
    s.cluster.gantry(&["user", "set", "carol", "--team", "vision"]);
    let gone = eventually(Duration::from_secs(10), "carol's invoke token refused", || {
        let code = s.get("/ml/inv/", &hers).map(|r| r.0).ok()?;
        (code == 404).then_some(code)
    });
    assert_eq!(gone, 404);
}

/// A browser on the Services page showing the sign-in form. The page reloads itself when a
/// network change beside the replicas' namespaces cut off its scripts (`boot.js`); a load that
/// still stalls is tried again in a fresh browser, as a user would open a new window, and what
/// the stalled page had loaded and logged is printed, so a failure says which request failed.
fn sign_in_page(spki: Option<&str>, url: &str, wait: Duration) -> Option<crate::browser::Browser> {
    let form = "!document.getElementById('login').hidden";
    for attempt in 1..=3 {
        let browser = crate::browser::Browser::start(spki)?;
        browser.goto(&format!("{url}/#/services"));
        if browser.try_wait_for(form, wait).is_some() {
            return Some(browser);
        }
        let loaded = browser.js(
            "return JSON.stringify({state: document.readyState, \
             resources: performance.getEntriesByType('resource').map(e => [e.name, Math.round(e.startTime), Math.round(e.duration), e.responseStatus])});",
            serde_json::json!([]),
        );
        eprintln!(
            "attempt {attempt}: no sign-in form after {wait:?}; loaded {loaded}; console {}",
            browser.console()
        );
        if attempt == 3 {
            browser.wait_for("the sign-in form", form, Duration::ZERO);
        }
    }
    unreachable!("the third attempt panics")
}

#[test]
fn in_a_browser_the_services_page_shows_a_service_its_replicas_and_decisions() {
    let s = Serving::start(&[]);
    s.apply(
        &s.file("web", "replicas: 1..2\nautoscale: {sync_s: 1, metrics: [{type: in_flight, target: 4}]}\n"),
    );
    let v = s.until("web", "a ready replica", 30, |v| ready(v) == 1);
    let job = v["replica_list"][0]["job"].as_i64().expect("a replica");
    let url = s.cluster.url();
    let wait = Duration::from_secs(30);
    let Some(browser) = sign_in_page(s.cluster.ca_spki().as_deref(), &url, wait) else { return };
    browser.type_into("#token", &s.token);
    browser.click("#login-form button[type=submit]");
    let text = browser.wait_for(
        "the service on the page",
        &format!(
            "document.querySelector('[data-service=\"ml/web\"] tr[data-job=\"{job}\"]') && \
             document.querySelector('[data-service=\"ml/web\"]').innerText"
        ),
        wait,
    );
    let text = text.as_str().unwrap_or_default();
    assert!(text.contains("1/1") && text.contains("ready") && text.contains("/ml/web/"), "{text}");
    browser.screenshot(&crate::browser::screenshot_dir(), "services");
    // Signed out and in again as another team's member: no service.
    let other = s.cluster.gantry(&["token", "create", "--team", "vision"]).trim().to_owned();
    browser.click("#logout");
    browser.wait_for("the sign-in form after signing out", "!document.getElementById('login').hidden", wait);
    browser.type_into("#token", &other);
    browser.click("#login-form button[type=submit]");
    browser.wait_for("no services", "document.querySelector('#services-body .empty')", wait);
}

#[test]
fn after_gantry_up_restarts_the_same_replica_is_probed_again_and_answers_through_the_gateway() {
    let mut s = Serving::start(&[]);
    s.apply(&s.file("steady", "replicas: 1\n"));
    let v = s.until("steady", "a ready replica", 30, |v| ready(v) == 1);
    let job = v["replica_list"][0]["job"].as_i64().expect("a replica");
    s.cluster.interrupt();
    s.cluster.restart();
    let v = s.until("steady", "the replica ready again", 30, |v| ready(v) == 1);
    assert_eq!(v["replica_list"][0]["job"].as_i64(), Some(job), "the replica outlived the restart: {v}");
    let (code, body) = s.get("/ml/steady/", &s.token).expect("through the gateway");
    assert_eq!((code, body), (200, format!("{job} 1\n")));
}

#[test]
fn a_service_edited_from_two_replicas_to_one_converges_on_the_new_generation() {
    // The rollout that stuck for good: more old replicas than desired and no new one ready
    // (neither retiring an old one nor starting a new one fired).
    let s = Serving::start(&[]);
    let file = s.file("shrink", "replicas: 2\n");
    s.apply(&file);
    s.until("shrink", "two ready replicas", 30, |v| ready(v) == 2);
    let edited = std::fs::read_to_string(&file).expect("file").replace("replicas: 2", "replicas: 1");
    std::fs::write(&file, edited).expect("file");
    assert_eq!(s.apply(&file).trim(), "service ml/shrink configured (generation 2)");
    let v = s.until("shrink", "one ready replica of generation 2", 40, |v| {
        let list = v["replica_list"].as_array().cloned().unwrap_or_default();
        let live: Vec<&serde_json::Value> = list
            .iter()
            .filter(|r| ["pending", "scheduled", "running"].contains(&r["state"].as_str().unwrap_or("")))
            .collect();
        ready(v) == 1 && live.len() == 1 && live[0]["generation"] == 2 && live[0]["ready"] == true
    });
    assert_eq!(v["replicas"]["desired"], 1, "{v}");
    assert!(v.get("rollout").is_none(), "not stuck: {v}");
    let (code, body) = s.get("/ml/shrink/", &s.token).expect("answer");
    assert_eq!(code, 200, "{body}");
}

#[test]
fn a_broken_rollout_backs_off_says_it_is_stuck_with_the_replicas_error_and_the_old_generation_serves() {
    let s = Serving::start(&[]);
    let file = s.file("broken", "replicas: 1\nprogress_deadline_s: 3\n");
    s.apply(&file);
    s.until("broken", "a ready replica", 30, |v| ready(v) == 1);
    let text = std::fs::read_to_string(&file).expect("file");
    let broken = text.replace(
        "command: [python3, ",
        "command: [python3, -c, 'import sys; sys.exit(\"replica says: no model weights at /models/x\")', ",
    );
    assert_ne!(broken, text);
    std::fs::write(&file, broken).expect("file");
    assert_eq!(s.apply(&file).trim(), "service ml/broken configured (generation 2)");
    let v = s.until("broken", "the rollout reported stuck", 60, |v| {
        v["rollout"].as_str().is_some_and(|r| r.starts_with("rollout stuck: generation 2 failed readiness"))
    });
    let said = v["rollout"].as_str().unwrap_or_default();
    assert!(said.contains("no model weights at /models/x"), "the replica's last words: {said}");
    // The old generation keeps serving throughout.
    let (code, _) = s.get("/ml/broken/", &s.token).expect("answer");
    assert_eq!(code, 200);
    let shown = s.cluster.gantry(&["service", "get", "broken", "--team", "ml"]);
    assert!(shown.contains("rollout   rollout stuck: generation 2"), "{shown}");
    let events = s.cluster.gantry(&["events"]);
    assert!(events.contains("rollout stuck: generation 2"), "{events}");
    // The rollout path backs off: over 12 s, a handful of failed replicas, not dozens.
    std::thread::sleep(Duration::from_secs(12));
    let failed =
        s.cluster.jobs().into_iter().filter(|j| j["service"] == "broken" && j["state"] == "failed").count();
    assert!((1..=10).contains(&failed), "{failed} failed replicas: no back-off on the rollout path");
    // Fixing the file starts afresh and ends on generation 3.
    std::fs::write(&file, text.replace("replicas: 1", "replicas: 1\nlabels: {fixed: 'yes'}")).expect("file");
    assert_eq!(s.apply(&file).trim(), "service ml/broken configured (generation 3)");
    s.until("broken", "generation 3 ready and the rollout no longer stuck", 40, |v| {
        let list = v["replica_list"].as_array().cloned().unwrap_or_default();
        ready(v) == 1
            && v.get("rollout").is_none()
            && list.iter().any(|r| r["generation"] == 3 && r["ready"] == true)
    });
}

#[test]
fn two_hundred_streams_through_a_rolling_update_and_a_scale_down_are_never_cut() {
    // Server-sent events of 2.5 s each (25 events, 0.1 s apart) while the service rolls to a
    // new generation and then drops from 2 replicas to 1: a retired replica leaves the table
    // first and is stopped only once its streams ended.
    let s = Serving::start(&[]);
    let file = s.file("sse", "replicas: 2\n");
    s.apply(&file);
    s.until("sse", "two ready replicas", 30, |v| ready(v) == 2);
    let url = format!("http://127.0.0.1:{}/ml/sse/stream?n=25&gap=0.1", s.gateway);
    let streams = {
        let (token, http) = (s.token.clone(), s_client());
        s.rt.spawn(async move {
            let tasks: Vec<_> = (0..20)
                .map(|c| {
                    let (url, token, http) = (url.clone(), token.clone(), http.clone());
                    tokio::spawn(async move {
                        let mut out = Vec::new();
                        for k in 0..10 {
                            // Spread the starts so that some streams span every step.
                            tokio::time::sleep(Duration::from_millis(((c * 7 + k * 3) % 10) * 30)).await;
                            let r = http.get(&url).bearer_auth(&token).send().await;
                            out.push(match r {
                                Ok(r) if r.status() == 200 => match r.text().await {
                                    Ok(body)
                                        if body.matches("data: token").count() == 25
                                            && body.ends_with("data: [DONE]\n\n") =>
                                    {
                                        Ok(())
                                    }
                                    Ok(body) => Err(format!(
                                        "cut after {} events",
                                        body.matches("data: token").count()
                                    )),
                                    Err(e) => Err(format!("cut: {e}")),
                                },
                                Ok(r) => Err(format!("status {}", r.status())),
                                Err(e) => Err(e.to_string()),
                            });
                        }
                        out
                    })
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.expect("client"));
            }
            all
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    let text = std::fs::read_to_string(&file).expect("file");
    std::fs::write(&file, text.replace("UNREADY_DIR:", "VERSION: '2', UNREADY_DIR:")).expect("file");
    assert_eq!(s.apply(&file).trim(), "service ml/sse configured (generation 2)");
    s.until("sse", "both replicas on generation 2", 40, |v| {
        let list = v["replica_list"].as_array().cloned().unwrap_or_default();
        let live: Vec<_> = list.iter().filter(|r| r["state"] == "running").collect();
        ready(v) == 2 && live.len() == 2 && live.iter().all(|r| r["generation"] == 2)
    });
    let text = std::fs::read_to_string(&file).expect("file");
    std::fs::write(&file, text.replace("replicas: 2", "replicas: 1")).expect("file");
    s.apply(&file);
    let results = s.rt.block_on(streams).expect("streams");
    let cut: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(results.len(), 200);
    assert!(cut.is_empty(), "{} of 200 streams cut: {cut:?}", cut.len());
}

#[test]
fn a_request_to_a_crash_looping_service_gets_503_at_once_with_the_replicas_error() {
    let s = Serving::start(&[]);
    let file = s.cluster.shared().join("crashy.yaml");
    let text = "name: crashy\nteam: ml\nport: 8000\n\
                command: [sh, -c, 'echo \"torch.OutOfMemoryError: CUDA out of memory\" >&2; exit 1']\n";
    std::fs::write(&file, text).expect("file");
    s.apply(&file);
    s.until("crashy", "a failed replica", 30, |v| {
        v["reason"].as_str().is_some_and(|r| r.contains("failed in a row"))
    });
    let started = Instant::now();
    let (code, body) = s.get("/ml/crashy/generate", &s.token).expect("answer");
    let waited = started.elapsed();
    assert_eq!(code, 503, "{body}");
    assert!(waited < Duration::from_secs(2), "held {waited:?} instead of failing fast");
    assert!(body.contains("its replicas keep failing") && body.contains("CUDA out of memory"), "{body}");
    let events = s.cluster.gantry(&["events"]);
    assert!(
        events.contains("service.replica_failed") && events.contains("service crashy: replica"),
        "{events}"
    );
}

#[test]
fn a_service_file_beside_its_server_runs_it_after_apply_and_an_unchanged_directory_is_no_new_generation() {
    let s = Serving::start(&[]);
    let dir = s.cluster.shared().join("app");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("server.py"), REPLICA).expect("server.py");
    let file = dir.join("svc.yaml");
    std::fs::write(
        &file,
        "name: beside\nteam: ml\nport: 8000\ncommand: [python3, server.py]\nreadiness: {path: /health, interval_s: 0.2}\n",
    )
    .expect("file");
    assert_eq!(s.apply(&file).trim(), "service ml/beside created (generation 1)");
    s.until("beside", "a ready replica running server.py from the upload", 40, |v| ready(v) == 1);
    let (code, body) = s.get("/ml/beside/", &s.token).expect("answer");
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        s.apply(&file).trim(),
        "service ml/beside unchanged (generation 1)",
        "the same directory again"
    );
    std::fs::write(dir.join("server.py"), format!("{REPLICA}\n# changed\n")).expect("server.py");
    assert_eq!(
        s.apply(&file).trim(),
        "service ml/beside configured (generation 2)",
        "a changed directory rolls"
    );
    // upload: false starts replicas in an empty directory, where server.py is not.
    let bare = dir.join("bare.yaml");
    std::fs::write(&bare, "name: bare\nteam: ml\nport: 8000\nupload: false\ncommand: [python3, server.py]\n")
        .expect("file");
    s.apply(&bare);
    let v = s.until("bare", "the replica to fail", 40, |v| {
        v["reason"].as_str().is_some_and(|r| r.contains("failed in a row"))
    });
    assert_eq!(ready(&v), 0);
}

#[test]
fn a_replicas_port_held_by_another_process_of_the_node_is_refused_and_the_next_replica_gets_another() {
    // Jobs on the node's own network: a port some other process listens on is not a $PORT.
    let taken = TcpListener::bind("0.0.0.0:0").expect("a process of the node");
    let port = taken.local_addr().expect("addr").port();
    let (Some(next), true) = (port.checked_add(1), port > 1024) else { return };
    if TcpListener::bind(("0.0.0.0", next)).is_err() {
        return; // the next port is not free either: nothing to show here
    }
    // The controller's first port is the one after the range's start: the taken one.
    let s = Serving::start_with_ports("shared", &format!("{}-{next}", port - 1), &[]);
    let file = s.file("ports", "replicas: 1\n");
    s.apply(&file);
    let v = s.until("ports", "a ready replica on the free port", 40, |v| ready(v) == 1);
    let list = v["replica_list"].as_array().cloned().unwrap_or_default();
    let running = list.iter().find(|r| r["ready"] == true).expect("the ready replica");
    assert!(running["address"].as_str().is_some_and(|a| a.ends_with(&format!(":{next}"))), "{v}");
    let failed = s.cluster.jobs().into_iter().find(|j| j["service"] == "ports" && j["state"] == "failed");
    let reason = failed.and_then(|j| j["reason"].as_str().map(str::to_owned)).unwrap_or_default();
    assert!(
        reason.contains(&format!("port {port} ($PORT) is in use on node")),
        "{reason} {:?}",
        s.cluster.jobs()
    );
    drop(taken);
}

#[test]
fn a_services_replicas_mount_its_teams_volume_read_only_and_serve_what_a_job_wrote_there() {
    if !gantry_agent::runner::sandbox::running_as_root() {
        eprintln!("skipped: volumes need a root agent");
        return;
    }
    let s = Serving::start(&[]);
    s.cluster.gantry(&["volume", "create", "site", "--team", "ml"]);
    let wrote = s.cluster.try_gantry(&[
        "run",
        "--team",
        "ml",
        "--volume",
        "site:/mnt/site",
        "--",
        "sh",
        "-c",
        "echo hello-volume > /mnt/site/index.txt",
    ]);
    assert!(wrote.status.success(), "{}", String::from_utf8_lossy(&wrote.stderr));
    let file = s.cluster.shared().join("site.yaml");
    std::fs::write(
        &file,
        "name: site\nteam: ml\nport: 8000\nupload: false\nvolumes: ['site:/mnt/site:ro']\n\
         command: [sh, -c, 'exec python3 -m http.server $PORT --directory /mnt/site']\n\
         env: {PYTHONUNBUFFERED: '1'}\nreadiness: {path: /index.txt, interval_s: 0.2, timeout_s: 1}\n",
    )
    .expect("file");
    s.apply(&file);
    s.until("site", "a ready replica", 60, |v| ready(v) == 1);
    let (code, body) = s.get("/ml/site/index.txt", &s.token).expect("through the gateway");
    assert_eq!((code, body.trim()), (200, "hello-volume"));
}
