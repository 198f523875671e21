//! `gantry extender`: the benchmark mode prints its figures; a bad node list exits non-zero with
//! a sentence; the mode (API server or `--no-kube`) is said on stderr, and no API server without
//! `--no-kube` is an error that names the flag.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};

use crate::gantry;

#[test]
fn extender_bench_prints_p99_and_the_ratio_against_best_fit() {
    let out = gantry(&["extender", "--bench-nodes", "50"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("on 50 nodes") && stdout.contains("p99 ratio"), "{stdout}");
}

#[test]
fn extender_with_a_malformed_node_list_exits_non_zero_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nodes.json");
    std::fs::write(&path, "[{\"name\": 1}]").expect("write fixture");
    let out =
        gantry(&["extender", "--no-kube", "--listen", "127.0.0.1:0", "--nodes", &path.display().to_string()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a JSON list of nodes"));
}

#[test]
fn extender_nodes_without_no_kube_is_refused_by_the_parser() {
    let out = gantry(&["extender", "--nodes", "nodes.json"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-kube"));
}

#[test]
fn extender_without_an_api_server_exits_non_zero_and_names_no_kube() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["extender", "--listen", "127.0.0.1:0"])
        .env("HOME", home.path())
        .env("KUBECONFIG", home.path().join("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .expect("gantry runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("needs a Kubernetes API server; pass --no-kube"), "{stderr}");
}

#[test]
fn extender_with_no_kube_says_so_and_answers_kube_schedulers_filter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = dir.path().join("nodes.json");
    std::fs::write(
        &nodes,
        r#"[{"name": "n1", "cpu_milli": 64000, "memory_mib": 262144, "gpus": 8, "gpu_model": "A100", "gpu_memory_mib": 81920}]"#,
    )
    .expect("write fixture");
    let port = TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["extender", "--no-kube", "--listen", &listen, "--nodes", &nodes.display().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .expect("gantry runs");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("a line on stderr");
    assert!(line.contains("no API server (--no-kube)") && line.contains("creates no Binding"), "{line}");
    let body = r#"{"Pod": {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {"gantry.dev/gpu": "2"}}}]}}, "NodeNames": ["n1", "n2"]}"#;
    let mut answer = String::new();
    for _ in 0..100 {
        if let Ok(mut s) = TcpStream::connect(&listen) {
            write!(
                s,
                "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .expect("send");
            s.read_to_string(&mut answer).expect("answer");
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""NodeNames":["n1"]"#) && answer.contains("\"n2\""), "{answer}");
}
