//! Declared inputs staged while the job waits (issue 22, points 2 and 3), end to end against a
//! real S3 implementation on loopback (moto's server, from PyPI; `scripts/test.sh` installs
//! it): a 50 MiB input is staged while the job is pending, its digest matches inside the job, a
//! second job with the same input starts with a cache hit and no copy, and a job of another
//! team cannot read the cached copy. Hostile sources (a fake S3 endpoint in this file): one that
//! sends more than the object it declared is stopped there, one that breaks off mid-copy keeps
//! the job pending with its reason, and neither leaves anything visible as cached.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Cluster, eventually};
use crate::moto::{moto, put_object};

fn job(cluster: &Cluster, id: &str) -> Value {
    serde_json::from_str(&cluster.gantry(&["job", id, "-o", "json"])).expect("job json")
}

fn ended(cluster: &Cluster, id: &str) -> Value {
    eventually(Duration::from_secs(120), "the job ends", || {
        let j = job(cluster, id);
        let state = j["job"]["state"].as_str().unwrap_or_default().to_owned();
        ["succeeded", "failed", "cancelled"].contains(&state.as_str()).then_some(j)
    })
}

fn logs(cluster: &Cluster, id: &str) -> String {
    cluster.gantry(&["logs", id])
}

#[test]
fn an_s3_input_is_staged_while_the_job_waits_then_found_cached_and_kept_from_other_teams() {
    let Some(moto) = moto() else { return };
    let digest = put_object(&moto, "datasets", "train/big.bin", 50 << 20);
    let cluster = Cluster::start(&["--cache-size", "1GiB", "--allow-source-net", "127.0.0.0/8"]);
    let vision = cluster.gantry(&["token", "create", "--team", "vision"]).trim().to_owned();
    let nlp = cluster.gantry(&["token", "create", "--team", "nlp"]).trim().to_owned();
    let endpoint = format!("AWS_ENDPOINT_URL={}", moto.url);
    let as_team = |token: &str, args: &[&str]| {
        let mut c = crate::harness::command(cluster.home.path());
        let out = c.env("GANTRY_TOKEN", token).args(args).output().expect("gantry");
        assert!(out.status.success(), "gantry {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let set = ["secret", "set", "s3", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test"];
    as_team(&vision, &[&set[..], &["AWS_REGION=us-east-1", &endpoint]].concat());
    let listed = as_team(&vision, &["secret", "list"]);
    assert!(
        listed.contains("AWS_ACCESS_KEY_ID") && !listed.contains("=test"),
        "values never shown: {listed}"
    );

    let read = "sha256sum $GANTRY_INPUT_DATA | cut -d' ' -f1; echo $GANTRY_INPUT_DATA";
    let submit = ["submit", "--no-upload", "--gpus", "1", "--input", "data=s3://datasets/train/big.bin"];
    let first = as_team(&vision, &[&submit[..], &["--input-secret", "s3", "--", "sh", "-c", read]].concat());
    // While it copies, the job is pending with the copy as its reason; no GPU is held for it.
    let mut seen_staging = false;
    let done = eventually(Duration::from_secs(120), "the first job ends", || {
        let j = job(&cluster, &first);
        let (state, reason) = (j["job"]["state"].as_str().unwrap_or_default(), j["job"]["reason"].as_str());
        if state == "pending" && reason.is_some_and(|r| r.contains("staging")) {
            assert!(j["job"]["gpu_uuids"].as_array().is_none_or(Vec::is_empty), "{j}");
            seen_staging = true;
        }
        ["succeeded", "failed"].contains(&state).then_some(j)
    });
    assert!(seen_staging, "the job was seen pending while its input was staged");
    assert_eq!(done["job"]["state"], "succeeded", "{done}");
    let out = logs(&cluster, &first);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some(digest.as_str()), "the digest inside the job matches: {out}");
    let cached = lines.next().expect("the input's path").to_owned();
    let input = &done["job"]["inputs"][0];
    assert_eq!((input["name"].as_str(), input["bytes"].as_u64()), (Some("data"), Some(50 << 20)), "{done}");
    assert_eq!(input["cache_hit"], false, "{done}");
    assert!(input["staged_s"].as_f64().is_some(), "{done}");

    // The same input again: a cache hit, nothing copied.
    let second = as_team(&vision, &[&submit[..], &["--input-secret", "s3", "--", "sh", "-c", read]].concat());
    let done = ended(&cluster, &second);
    assert_eq!(done["job"]["state"], "succeeded", "{done}");
    assert_eq!(done["job"]["inputs"][0]["cache_hit"], true, "{done}");
    assert_eq!(logs(&cluster, &second).lines().next(), Some(digest.as_str()));
    let cache: Vec<Value> = serde_json::from_str(&as_team(&vision, &["cache", "-o", "json"])).expect("cache");
    assert_eq!(cache.len(), 1, "one copy: {cache:?}");
    assert_eq!(
        (cache[0]["hits"].as_u64(), cache[0]["bytes"].as_u64()),
        (Some(1), Some(50 << 20)),
        "{cache:?}"
    );
    let nlp_sees: Vec<Value> = serde_json::from_str(&as_team(&nlp, &["cache", "-o", "json"])).expect("cache");
    assert!(nlp_sees.is_empty(), "another team is not shown vision's datasets: {nlp_sees:?}");

    // The control plane's metrics, from the agents' reports.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let metrics = rt.block_on(async {
        let resp = cluster
            .http()
            .get(format!("{}/metrics", cluster.url()))
            .bearer_auth(cluster.token())
            .send()
            .await;
        resp.expect("metrics").text().await.expect("text")
    });
    assert!(metrics.contains("gantry_cache_hits_total 1"), "{metrics}");
    assert!(metrics.contains(&format!("gantry_stage_bytes_total {}", 50 << 20)), "{metrics}");
    assert!(metrics.contains(&format!("team=\"vision\"}} {}", 50 << 20)), "gantry_cache_bytes: {metrics}");
    assert!(metrics.contains("gantry_stage_duration_seconds_count 2"), "{metrics}");
    // The node's own exporter has them too, with the node's name.
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", cluster.metrics_port).parse().expect("address");
    let node = eventually(Duration::from_secs(30), "the node exporter's cache metrics", || {
        let body = gantry_agent::exporter::client::get(addr, "/metrics", Duration::from_secs(5)).ok()?.body;
        (body.contains("gantry_cache_hits_total 1\n")
            && body.contains("gantry_stage_duration_seconds_count 2\n"))
        .then_some(body)
    });
    assert!(node.contains(&format!("gantry_stage_bytes_total {}\n", 50 << 20)), "{node}");
    assert!(
        node.contains(&format!(",team=\"vision\"}} {}", 50 << 20)),
        "gantry_cache_bytes on the node: {node}"
    );
    assert!(node.contains("gantry_cache_bytes{node=\""), "{node}");

    // Another team's job cannot read the cached copy.
    let peek = format!("cat {cached} > /dev/null && echo READ || echo DENIED");
    let other = as_team(&nlp, &["submit", "--no-upload", "--", "sh", "-c", &peek]);
    ended(&cluster, &other);
    assert_eq!(logs(&cluster, &other).trim(), "DENIED", "another team's job reads nothing of the cache");
}

/// A fake S3 endpoint: HEAD declares `declared` bytes; GET says it sends the larger of
/// `declared` and `sent`, sends `sent` bytes and closes.
fn fake_s3(declared: usize, sent: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut first = String::new();
            if reader.read_line(&mut first).is_err() {
                continue;
            }
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).map_or(true, |n| n == 0) || line == "\r\n" {
                    break;
                }
            }
            let mut stream = reader.into_inner();
            let length = if first.starts_with("GET") { declared.max(sent) } else { declared };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nETag: \"fake\"\r\n\
                 Last-Modified: Tue, 01 Dec 2026 00:00:00 GMT\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(head.as_bytes());
            if first.starts_with("GET") {
                let _ = stream.write_all(&vec![7u8; sent]);
            }
            let _ = stream.flush();
            let _ = stream.shutdown(std::net::Shutdown::Both);
            let _ = stream.read(&mut [0u8; 1]);
        }
    });
    url
}

#[test]
fn a_source_that_sends_more_than_it_declared_is_stopped_and_one_over_the_quota_refused() {
    let more = fake_s3(1 << 20, 8 << 20);
    let big = fake_s3(4 << 20, 4 << 20);
    let cluster = Cluster::start(&[
        "--cache-size",
        "64MiB",
        "--cache-team-quota",
        "2MiB",
        "--allow-source-net",
        "127.0.0.0/8",
    ]);
    let mut ids = Vec::new();
    for (name, url) in [("more", &more), ("big", &big)] {
        let endpoint = format!("AWS_ENDPOINT_URL={url}");
        let args =
            ["secret", "set", name, "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_REGION=us-east-1"];
        cluster.gantry(&[&args[..], &["--team", "default", &endpoint]].concat());
        let input = format!("data=s3://bucket/{name}.bin");
        let id = cluster.gantry(&[
            "submit",
            "--no-upload",
            "--input",
            &input,
            "--input-secret",
            name,
            "--",
            "true",
        ]);
        ids.push(id.trim().to_owned());
    }
    let reason = |id: &str| job(&cluster, id)["job"]["reason"].as_str().unwrap_or_default().to_owned();
    let more_said = eventually(Duration::from_secs(60), "the first source is refused", || {
        let r = reason(&ids[0]);
        r.contains("failed, retrying").then_some(r)
    });
    assert!(more_said.contains("sent more than the declared size"), "{more_said}");
    let big_said = eventually(Duration::from_secs(90), "the second source is refused", || {
        let r = reason(&ids[1]);
        r.contains("failed, retrying").then_some(r)
    });
    assert!(big_said.contains("over the cache's limits"), "4 MiB declared, over the 2 MiB quota: {big_said}");
    for id in &ids {
        assert_eq!(job(&cluster, id)["job"]["state"], "pending", "never lost: {id}");
    }
    let cache: Vec<Value> = serde_json::from_str(&cluster.gantry(&["cache", "-o", "json"])).expect("cache");
    assert!(cache.is_empty(), "nothing partial is cached: {cache:?}");
}

#[test]
fn a_source_that_breaks_off_mid_copy_leaves_no_partial_copy_visible() {
    let short = fake_s3(1 << 20, 256 << 10);
    let cluster = Cluster::start(&["--cache-size", "64MiB", "--allow-source-net", "127.0.0.0/8"]);
    let endpoint = format!("AWS_ENDPOINT_URL={short}");
    let args =
        ["secret", "set", "short", "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_REGION=us-east-1"];
    cluster.gantry(&[&args[..], &["--team", "default", &endpoint]].concat());
    let id = cluster.gantry(&[
        "submit",
        "--no-upload",
        "--input",
        "data=s3://bucket/x.bin",
        "--input-secret",
        "short",
        "--",
        "true",
    ]);
    let id = id.trim();
    let said = eventually(Duration::from_secs(90), "the copy fails", || {
        let r = job(&cluster, id)["job"]["reason"].as_str().unwrap_or_default().to_owned();
        r.contains("failed, retrying").then_some(r)
    });
    assert!(said.starts_with("staging its inputs on "), "{said}");
    assert_eq!(job(&cluster, id)["job"]["state"], "pending");
    let cache: Vec<Value> = serde_json::from_str(&cluster.gantry(&["cache", "-o", "json"])).expect("cache");
    assert!(cache.is_empty(), "{cache:?}");
    // Nothing but the team directory (no `.tmp-` copy left behind) under the cache.
    let work = cluster.outside.path().join("work");
    let leftovers: Vec<String> =
        walk(&work).into_iter().filter(|p| p.contains(".cache/") && p.contains(".tmp-")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        out.push(p.display().to_string());
        if p.is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}
