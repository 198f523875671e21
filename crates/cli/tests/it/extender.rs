//! `gantry extender`: the benchmark mode prints its figures; a bad node list exits non-zero with
//! a sentence; the mode (API server or `--no-kube`) is said on stderr, and no API server without
//! `--no-kube` is an error that names the flag. The listener: a non-loopback address without TLS
//! or `--insecure-listen` is refused; with mutual TLS, a client without a certificate signed by
//! the client CA is refused and one with such a certificate is answered.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

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

#[test]
fn extender_on_a_non_loopback_address_without_tls_is_refused_with_a_sentence() {
    let out = gantry(&["extender", "--no-kube", "--listen", "0.0.0.0:0"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without TLS")
            && stderr.contains("--tls-cert, --tls-key and --client-ca")
            && stderr.contains("--insecure-listen"),
        "{stderr}"
    );
}

#[test]
fn extender_tls_flags_must_come_together() {
    let out = gantry(&["extender", "--no-kube", "--tls-cert", "tls.crt"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--tls-key") && stderr.contains("--client-ca"), "{stderr}");
}

#[test]
fn extender_with_insecure_listen_serves_plain_http_on_any_address() {
    let port = TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
    let mut child = spawn_extender(&["--listen", &format!("0.0.0.0:{port}"), "--insecure-listen"]);
    let answer = filter_plain(&format!("127.0.0.1:{port}"));
    stop(&mut child);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// A CA, a certificate it signs for `localhost` (server) and one for a client, as PEM files; and
/// a client certificate from another CA. The test's TLS client uses rustls like the extender.
struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    client: (String, String),
    stranger: (String, String),
}

fn issue(issuer: &rcgen::Issuer<'_, rcgen::KeyPair>, sans: &[&str], client: bool) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
        .expect("params");
    params.extended_key_usages = vec![if client {
        rcgen::ExtendedKeyUsagePurpose::ClientAuth
    } else {
        rcgen::ExtendedKeyUsagePurpose::ServerAuth
    }];
    let cert = params.signed_by(&key, issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

fn ca() -> (rcgen::Certificate, rcgen::Issuer<'static, rcgen::KeyPair>) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
    let cert = params.self_signed(&key).expect("ca");
    (cert, rcgen::Issuer::new(params, key))
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca_cert, issuer) = ca();
    let (cert, key) = issue(&issuer, &["localhost"], false);
    std::fs::write(dir.path().join("tls.crt"), cert).expect("write");
    std::fs::write(dir.path().join("tls.key"), key).expect("write");
    std::fs::write(dir.path().join("ca.crt"), ca_cert.pem()).expect("write");
    let client = issue(&issuer, &["kube-scheduler"], true);
    let (_, other) = ca();
    let stranger = issue(&other, &["kube-scheduler"], true);
    Pki { dir, ca: ca_cert, client, stranger }
}

fn spawn_extender(extra: &[&str]) -> Child {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = dir.path().join("nodes.json");
    std::fs::write(
        &nodes,
        r#"[{"name": "n1", "cpu_milli": 64000, "memory_mib": 262144, "gpus": 8, "gpu_model": "A100", "gpu_memory_mib": 81920}]"#,
    )
    .expect("write fixture");
    let mut args = vec!["extender", "--no-kube", "--nodes"];
    let nodes = nodes.display().to_string();
    args.push(&nodes);
    args.extend_from_slice(extra);
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(&args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("gantry runs");
    // The first stderr line comes once the node list is read (the file may then go).
    let mut line = String::new();
    BufReader::new(child.stderr.as_mut().expect("stderr")).read_line(&mut line).expect("a line on stderr");
    assert!(line.contains("--no-kube"), "{line}");
    child
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

const FILTER: &str = r#"{"Pod": {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {"gantry.dev/gpu": "2"}}}]}}, "NodeNames": ["n1", "n2"]}"#;

fn filter_request() -> String {
    format!(
        "POST /filter HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{FILTER}",
        FILTER.len()
    )
}

/// Connects, retrying while the extender starts.
fn connect(addr: &str) -> TcpStream {
    for _ in 0..200 {
        if let Ok(s) = TcpStream::connect(addr) {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the extender never listened on {addr}");
}

fn filter_plain(addr: &str) -> String {
    let mut s = connect(addr);
    s.write_all(filter_request().as_bytes()).expect("send");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("answer");
    answer
}

/// POSTs /filter over TLS, trusting `ca` for the server and presenting `client` if any: the
/// answer, or the TLS error that ended the exchange.
fn filter_tls(
    addr: &str,
    ca: &rcgen::Certificate,
    client: Option<&(String, String)>,
) -> Result<String, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).expect("root");
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).expect("cert")],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key"),
            )
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    };
    let conn = rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().expect("name"))
        .expect("connection");
    let mut tls = rustls::StreamOwned::new(conn, connect(addr));
    tls.write_all(filter_request().as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    match tls.read_to_end(&mut answer) {
        Ok(_) if answer.is_empty() => Err("closed without an answer".to_owned()),
        Ok(_) => Ok(String::from_utf8_lossy(&answer).into_owned()),
        Err(e) => Err(e.to_string()),
    }
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

#[test]
fn extender_with_mutual_tls_answers_only_clients_with_a_certificate_from_the_client_ca() {
    let pki = pki();
    let d = pki.dir.path();
    let port = TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
    let (listen, addr) = (format!("0.0.0.0:{port}"), format!("127.0.0.1:{port}"));
    let (cert, key, ca) = (path(d, "tls.crt"), path(d, "tls.key"), path(d, "ca.crt"));
    let mut child =
        spawn_extender(&["--listen", &listen, "--tls-cert", &cert, "--tls-key", &key, "--client-ca", &ca]);
    let anonymous = filter_tls(&addr, &pki.ca, None);
    let stranger = filter_tls(&addr, &pki.ca, Some(&pki.stranger));
    let plain = filter_plain(&addr);
    let scheduler = filter_tls(&addr, &pki.ca, Some(&pki.client));
    stop(&mut child);
    let anonymous = anonymous.expect_err("a client without a certificate is refused");
    assert!(anonymous.contains("CertificateRequired") || anonymous.contains("alert"), "{anonymous}");
    let stranger = stranger.expect_err("a certificate from another CA is refused");
    assert!(!stranger.contains("HTTP/1.1"), "{stranger}");
    assert!(plain.starts_with("HTTP/1.1 400") && !plain.contains("NodeNames"), "{plain}");
    let answer = scheduler.expect("kube-scheduler's certificate is accepted");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""NodeNames":["n1"]"#) && answer.contains("\"n2\""), "{answer}");
}
