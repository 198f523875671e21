//! A member's data paths never reach what belongs to the node (issue 37, points 1 and 2), end
//! to end through `gantry up` with stand-ins on loopback: an S3 endpoint a member chose that
//! logs the credentials it is sent, a "metadata service" serving the node role's keys, and a
//! redirecting server. The node's own keys (the agent's environment) never sign a member's
//! request; no input is fetched from loopback, link-local or private addresses unless an admin
//! opened them (`--allow-source-net`), not even through a redirect; what an endpoint answers
//! never fills a job's reason (≤ 300 characters, the status and not the body).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Cluster, eventually};

/// An HTTP stand-in on `addr` answering every request with `answer(request head)`; it logs
/// every request head it receives.
struct Standin {
    url: String,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Standin {
    fn start(addr: &str, answer: impl Fn(&str) -> String + Send + 'static) -> Self {
        let listener = TcpListener::bind(addr).expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&heads);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(stream);
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).map_or(true, |n| n == 0) || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                    })
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; length.min(1 << 20)];
                let _ = reader.read_exact(&mut body);
                let response = answer(&head);
                log.lock().expect("log").push(head);
                let mut stream = reader.into_inner();
                let _ = stream.write_all(response.as_bytes());
                let _ = stream.flush();
            }
        });
        Self { url, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("log").clone()
    }
}

fn respond(status: &str, headers: &str, body: &str) -> String {
    format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n{headers}Connection: close\r\n\r\n{body}", body.len())
}

fn job(cluster: &Cluster, id: &str) -> Value {
    serde_json::from_str(&cluster.gantry(&["job", id, "-o", "json"])).expect("job json")
}

/// The job's reason once its staging has failed (it stays pending and is tried again).
fn staging_failure(cluster: &Cluster, id: &str) -> String {
    eventually(Duration::from_secs(60), "the staging to fail", || {
        let j = job(cluster, id);
        assert_eq!(j["job"]["state"], "pending", "never started, never lost: {j}");
        let r = j["job"]["reason"].as_str().unwrap_or_default().to_owned();
        r.contains("failed, retrying").then_some(r)
    })
}

fn submit_input(cluster: &Cluster, input: &str, secret: Option<&str>) -> String {
    let mut args = vec!["submit", "--no-upload", "--input", input];
    if let Some(s) = secret {
        args.extend(["--input-secret", s]);
    }
    args.extend(["--", "sh", "-c", "cat \"$GANTRY_INPUT_D\""]);
    cluster.gantry(&args).trim().to_owned()
}

const NODE_KEY: &str = "AKIANODEKEY000000000";
const NODE_TOKEN: &str = "NODESESSIONTOKENxyz";

#[test]
fn a_members_endpoint_never_receives_the_nodes_keys_and_its_answer_never_fills_a_reason() {
    // An endpoint that logs what it is sent and answers 403 with an exporter-sized body.
    let body = format!("<Error><Code>AccessDenied</Code>{}</Error>", "BODYTEXT".repeat(4_300));
    let s3 = Standin::start("127.0.0.1:0", move |_| respond("403 Forbidden", "", &body));
    // The node has credentials of its own (as an instance role or a profile would give it).
    let node_env = [
        ("AWS_ACCESS_KEY_ID", NODE_KEY),
        ("AWS_SECRET_ACCESS_KEY", "nodesecretnodesecret"),
        ("AWS_SESSION_TOKEN", NODE_TOKEN),
        ("AWS_REGION", "us-east-1"),
    ];
    // Loopback opened, so the stand-in is reached and what it receives can be read.
    let cluster = Cluster::start_with_env(&["--allow-source-net", "127.0.0.0/8"], &node_env);
    let endpoint = format!("AWS_ENDPOINT_URL={}", s3.url);
    cluster.gantry(&["secret", "set", "regiononly", "AWS_REGION=us-east-1", &endpoint, "--team", "default"]);

    // Outputs with a secret that holds no keys: refused at submission, with the sentence.
    let out = cluster.try_gantry(&[
        "submit",
        "--no-upload",
        "--output",
        "o=s3://shared-datasets/imagenet",
        "--output-secret",
        "regiononly",
        "--",
        "true",
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("AWS_ACCESS_KEY_ID"), "{said}");

    // Inputs through the member's endpoint: requests go out unsigned, never with the node's keys.
    let id = submit_input(&cluster, "d=s3://shared-datasets/imagenet", Some("regiononly"));
    let reason = staging_failure(&cluster, &id);
    assert!(reason.chars().count() <= 300, "{} characters: {reason}", reason.chars().count());
    assert!(!reason.contains("BODYTEXT"), "the endpoint's body entered the reason: {reason}");
    assert!(reason.contains("403"), "the status is said: {reason}");
    let heads = s3.heads();
    assert!(!heads.is_empty(), "the endpoint was reached");
    for h in &heads {
        assert!(!h.contains(NODE_KEY) && !h.contains(NODE_TOKEN), "the node's credentials were sent: {h}");
    }
    // The same source with no secret at all: unsigned to AWS's endpoint, never the node's keys
    // (not reachable here; what matters is that the stand-in saw nothing new signed).
    let listed = cluster.gantry(&["job", &id]);
    assert!(!listed.contains(NODE_KEY));
}

#[test]
fn no_input_reaches_the_nodes_loopback_or_metadata_service_directly_or_through_a_redirect() {
    // The "metadata service" with the node role's keys, on the node's loopback.
    let keys = "{\"AccessKeyId\":\"ASIANODEROLE\",\"SecretAccessKey\":\"rolesecret\"}";
    let metadata = Standin::start("127.0.0.1:0", move |_| respond("200 OK", "", keys));
    let role = format!("{}/latest/meta-data/iam/security-credentials/node-role", metadata.url);
    // An address an admin opened (as an internal file server), and on it a redirect to the
    // metadata service and a file.
    let target = role.clone();
    let opened = Standin::start("127.0.0.2:0", move |head| {
        if head.starts_with("GET /redirect") || head.starts_with("HEAD /redirect") {
            respond("302 Found", &format!("Location: {target}\r\n"), "")
        } else {
            respond("200 OK", "ETag: \"v1\"\r\n", "allowed-bytes")
        }
    });
    let cluster = Cluster::start(&["--allow-source-net", "127.0.0.2/32"]);

    let direct = submit_input(&cluster, &format!("d={role}"), None);
    let reason = staging_failure(&cluster, &direct);
    assert!(reason.contains("loopback") && reason.contains("--allow-source-net"), "{reason}");
    let redirected = submit_input(&cluster, &format!("d={}/redirect", opened.url), None);
    let reason = staging_failure(&cluster, &redirected);
    assert!(reason.contains("redirect") && reason.contains("loopback"), "{reason}");
    assert!(metadata.heads().is_empty(), "the metadata stand-in was reached: {:?}", metadata.heads());

    // What the admin opened is fetched, and the job reads it.
    let fine = submit_input(&cluster, &format!("d={}/data.bin", opened.url), None);
    let done = eventually(Duration::from_secs(90), "the job on an opened source to end", || {
        let j = job(&cluster, &fine);
        ["succeeded", "failed"].contains(&j["job"]["state"].as_str().unwrap_or_default()).then_some(j)
    });
    assert_eq!(done["job"]["state"], "succeeded", "{done}");
    assert_eq!(cluster.gantry(&["logs", &fine]).trim(), "allowed-bytes");
}
