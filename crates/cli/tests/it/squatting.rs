//! The port-squatting attack of issue 17, end to end: a local process (what a job can do: it
//! shares the node's network) that takes the API's port, on the other loopback family while
//! `gantry up` runs or on the port itself while it restarts, must never receive the admin's token.
//!
//! The impostors here are threads of the test: one records the raw bytes clients send, as a
//! plain HTTP server would see them; one completes TLS with its own certificate for `localhost`
//! (what an attacker without the cluster CA's key can do at best) and records what it decrypts.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::harness::{Cluster, command};

/// What an impostor answers every request with: a plausible empty job list.
const ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]";

/// A process of the test listening where the server should be, recording what it is sent.
pub struct Impostor {
    stop: Arc<AtomicBool>,
    received: Arc<Mutex<Vec<u8>>>,
    connections: Arc<Mutex<usize>>,
    thread: Option<JoinHandle<()>>,
}

impl Impostor {
    /// Binds `addr`, retrying for 10 s as a squatting job loops on `bind`; `tls` makes it
    /// complete TLS handshakes with a certificate of its own for localhost.
    pub fn start(addr: SocketAddr, tls: bool) -> Self {
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match TcpListener::bind(addr) {
                Ok(l) => break l,
                Err(e) => assert!(Instant::now() < deadline, "the impostor could not bind {addr}: {e}"),
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        listener.set_nonblocking(true).expect("nonblocking");
        let config = tls.then(impostor_tls);
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let thread = {
            let (stop, received, connections) =
                (Arc::clone(&stop), Arc::clone(&received), Arc::clone(&connections));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            *connections.lock().expect("lock") += 1;
                            let got = serve(conn, config.clone());
                            received.lock().expect("lock").extend(got);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        };
        Self { stop, received, connections, thread: Some(thread) }
    }

    /// Stops it; returns every byte it was sent (decrypted, for a TLS impostor) and how many
    /// connections it accepted.
    pub fn finish(mut self) -> (Vec<u8>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let received = std::mem::take(&mut *self.received.lock().expect("lock"));
        (received, *self.connections.lock().expect("lock"))
    }
}

/// Reads what one connection sends (with TLS: after the handshake, decrypted) and answers it.
fn serve(mut conn: TcpStream, tls: Option<Arc<rustls::ServerConfig>>) -> Vec<u8> {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    match tls {
        None => {
            if let Ok(n) = conn.read(&mut buf) {
                got.extend_from_slice(&buf[..n]);
                let _ = conn.write_all(ANSWER);
            }
        }
        Some(config) => {
            let Ok(server) = rustls::ServerConnection::new(config) else { return got };
            let mut stream = rustls::StreamOwned::new(server, conn);
            if let Ok(n) = stream.read(&mut buf) {
                got.extend_from_slice(&buf[..n]);
                let _ = stream.write_all(ANSWER);
            }
        }
    }
    got
}

/// A certificate for localhost, 127.0.0.1 and ::1 from a CA that is not the cluster's.
fn impostor_tls() -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(names).expect("params").self_signed(&key).expect("cert");
    let key = PrivateKeyDer::try_from(key.serialize_der()).expect("key der");
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(cert.der().to_vec())], key)
        .expect("impostor TLS config");
    Arc::new(config)
}

pub fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Stops `gantry up` as a restart would, puts an impostor on its port, runs `gantry jobs` with
/// the client config `up` wrote; returns its output and what the impostor got.
fn jobs_against_an_impostor(tls: bool) -> (std::process::Output, String, Vec<u8>, usize) {
    let mut cluster = Cluster::start(&["--no-agent"]);
    let token = cluster.token();
    assert!(cluster.terminate().success());
    let impostor = Impostor::start(SocketAddr::from(([127, 0, 0, 1], cluster.port)), tls);
    let out = cluster.try_gantry(&["jobs"]);
    let (received, connections) = impostor.finish();
    (out, token, received, connections)
}

#[test]
fn a_process_that_takes_the_port_while_up_restarts_gets_no_token_from_the_cli() {
    let (out, token, received, connections) = jobs_against_an_impostor(false);
    assert!(connections > 0, "the CLI never reached the impostor, so this proves nothing");
    assert!(
        !contains(&received, &token),
        "the impostor received the admin token:\n{}",
        String::from_utf8_lossy(&received)
    );
    assert!(!contains(&received, "authorization"), "{}", String::from_utf8_lossy(&received));
    assert!(!out.status.success(), "gantry jobs believed the impostor");
    let stderr = stderr_of(&out);
    assert!(stderr.contains("TLS with https://127.0.0.1:") && stderr.contains("failed"), "{stderr}");
}

#[test]
fn an_impostor_with_its_own_certificate_for_localhost_is_refused_before_any_request() {
    let (out, token, received, connections) = jobs_against_an_impostor(true);
    assert!(connections > 0, "the CLI never reached the impostor, so this proves nothing");
    assert!(
        received.is_empty(),
        "the CLI sent a request to the impostor: {}",
        String::from_utf8_lossy(&received)
    );
    assert!(!contains(&received, &token));
    assert!(!out.status.success(), "gantry jobs believed the impostor");
    let stderr = stderr_of(&out);
    assert!(stderr.contains("TLS with") && stderr.contains("cluster's CA"), "{stderr}");
}

pub fn ipv6_loopback() -> bool {
    TcpListener::bind("[::1]:0").is_ok()
}

/// Binds `addr` as an attacker would try hardest: `SO_REUSEADDR` and `SO_REUSEPORT`.
fn bind_with_reuseport(addr: SocketAddr) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let socket =
            if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        socket.bind(addr)?;
        socket.listen(16).map(drop)
    })
}

#[test]
fn while_up_runs_no_process_can_take_the_port_on_either_loopback_family_and_localhost_reaches_up() {
    let cluster = Cluster::start(&["--no-agent"]);
    if !ipv6_loopback() {
        eprintln!("note: this machine has no IPv6 loopback: only the IPv4 half is checked");
    }
    for ip in ["127.0.0.1", "::1"] {
        if ip == "::1" && !ipv6_loopback() {
            continue;
        }
        let addr = SocketAddr::new(ip.parse().expect("ip"), cluster.port);
        let squat = TcpListener::bind(addr);
        assert!(squat.is_err(), "a process bound {addr} beside gantry up");
        let err = bind_with_reuseport(addr).expect_err("SO_REUSEPORT does not share the port");
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{addr}: {err}");
    }
    // What a browser or the CLI reaches as localhost, in either family, is gantry up itself:
    // its certificate is checked against the cluster CA.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    if ipv6_loopback() {
        hosts.push("[::1]".to_owned());
    }
    for host in hosts {
        let url = format!("https://{host}:{}/healthz", cluster.port);
        let status = rt.block_on(async { cluster.http().get(&url).send().await.map(|r| r.status()) });
        assert_eq!(status.map_err(|e| e.to_string()), Ok(reqwest::StatusCode::OK), "{url}");
    }
}

#[test]
fn up_refuses_to_start_when_the_other_loopback_family_of_its_port_is_taken() {
    if !ipv6_loopback() {
        eprintln!("note: skipped: this machine has no IPv6 loopback");
        return;
    }
    let squatter = TcpListener::bind("[::1]:0").expect("bind");
    let port = squatter.local_addr().expect("addr").port();
    let home = tempfile::tempdir().expect("home");
    let mut child = command(home.path())
        .args(["server", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(home.path().join("data"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run gantry server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("output");
    assert!(!out.status.success(), "gantry server started beside a process holding [::1]:{port}");
    let stderr = stderr_of(&out);
    assert!(stderr.contains(&format!("[::1]:{port}")) && stderr.contains("another process"), "{stderr}");
}

#[test]
fn a_port_in_use_is_said_once_with_the_flag_that_moves_it() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let home = tempfile::tempdir().expect("home");
    let out = command(home.path())
        .args(["server", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(home.path().join("data"))
        .output()
        .expect("run gantry server");
    assert!(!out.status.success());
    let stderr = stderr_of(&out);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("another process already uses it") && last.contains("--listen"), "{stderr}");
    assert!(!last.contains("os error 98"), "no raw errno, and not twice: {last}");
}

#[test]
fn up_serves_loopback_over_tls_by_default_and_no_tls_warns_of_the_threat() {
    let tls = Cluster::start(&["--no-agent"]);
    let log = std::fs::read_to_string(tls.home.path().join("up.log")).expect("output");
    assert!(tls.url().starts_with("https://"), "{log}");
    assert!(log.contains(&format!("dashboard: https://localhost:{}/", tls.port)), "{log}");
    let config = std::fs::read_to_string(tls.home.path().join(".config/gantry/config.toml")).expect("config");
    assert!(config.contains("https://127.0.0.1:") && config.contains("tls/ca.pem"), "{config}");

    let plain = Cluster::start(&["--no-agent", "--no-tls"]);
    let log = std::fs::read_to_string(plain.home.path().join("up.log")).expect("output");
    assert!(log.contains("warning: --no-tls") && log.contains("receives the token"), "{log}");
    plain.gantry(&["jobs"]);
    // https:// against it says what the server speaks (not "pin a CA"); the flag may come first.
    let https = format!("https://127.0.0.1:{}", plain.port);
    let out = plain.try_gantry(&["--server", &https, "jobs"]);
    assert!(!out.status.success());
    let said = stderr_of(&out);
    assert!(said.contains("answered in plain HTTP") && said.contains(&plain.url()), "{said}");
    assert!(!said.contains("--ca"), "{said}");
    plain.gantry(&["--server", &plain.url(), "jobs", "--state", "running"]);

    let home = tempfile::tempdir().expect("home");
    let out = command(home.path())
        .args(["server", "--no-tls", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(home.path().join("data"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(stderr_of(&out).contains("--no-tls is for loopback addresses only"), "{}", stderr_of(&out));
}

#[test]
fn gantry_ca_show_names_the_fingerprint_up_printed_and_install_says_what_it_would_do() {
    let cluster = Cluster::start(&["--no-agent"]);
    let log = std::fs::read_to_string(cluster.home.path().join("up.log")).expect("output");
    let shown = cluster.gantry(&["ca", "show"]);
    let sha = shown.lines().find_map(|l| l.strip_prefix("sha256:")).expect("sha256 line").trim().to_owned();
    assert_eq!(sha.len(), 64, "{shown}");
    assert!(log.contains(&format!("sha256 {sha}")), "up printed another CA: {log}\n{shown}");
    let pin = cluster.ca_spki().expect("pin");
    assert!(shown.contains(&format!("--ignore-certificate-errors-spki-list={pin}")), "{shown}");

    let dry = cluster.gantry(&["ca", "install", "--dry-run", "--nss-db", "/nonexistent/nssdb"]);
    assert!(
        dry.contains(&format!("gantry-{}.crt", &sha[..12])) || dry.contains("no system trust store"),
        "{dry}"
    );
    assert!(dry.contains("certutil"), "{dry}");

    let plain = Cluster::start(&["--no-agent", "--no-tls"]);
    let out = plain.try_gantry(&["ca", "show"]);
    assert!(!out.status.success());
    assert!(stderr_of(&out).contains("the context pins no CA"), "{}", stderr_of(&out));
}
