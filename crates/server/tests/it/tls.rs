//! The cluster CA on disk, TLS on the listener, and client certificates.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::{Extension, Router};
use gantry_server::tls::{PeerCert, Pki};
use gantry_server::transport::{self, Limits};
use reqwest::StatusCode;

use crate::{TestServer, client};

fn sans() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

#[test]
fn the_pki_keeps_keys_private_and_reuses_everything_on_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let tls = dir.path().join("tls");
    let first = Pki::load_or_create(&tls, &sans()).expect("create");
    assert_eq!(mode(&tls), 0o700);
    assert_eq!((mode(&tls.join("ca.key")), mode(&tls.join("server.key"))), (0o600, 0o600));
    let server_pem = std::fs::read(tls.join("server.pem")).expect("server.pem");
    let again = Pki::load_or_create(&tls, &sans()).expect("reload");
    assert_eq!(again.ca_sha256(), first.ca_sha256());
    assert_eq!(again.ca_pem(), first.ca_pem());
    assert_eq!(std::fs::read(tls.join("server.pem")).expect("server.pem"), server_pem);
    assert_eq!(first.ca_sha256().len(), 64);
    assert!(format!("{first:?}").contains("ca_sha256"), "Debug shows no key: {first:?}");
}

#[test]
fn the_ca_key_pin_is_the_sha256_of_the_public_key_in_the_ca_certificate() {
    let dir = tempfile::tempdir().expect("dir");
    let pki = Pki::load_or_create(&dir.path().join("tls"), &sans()).expect("create");
    let from_certificate = gantry_server::tls::spki_sha256_base64(pki.ca_der()).expect("readable");
    assert_eq!(pki.ca_spki_sha256_base64(), from_certificate);
    assert_eq!(from_certificate.len(), 44, "{from_certificate}");
}

#[test]
fn new_names_reissue_the_server_certificate_under_the_same_ca() {
    let dir = tempfile::tempdir().expect("dir");
    let tls = dir.path().join("tls");
    let first = Pki::load_or_create(&tls, &sans()).expect("create");
    let server_pem = std::fs::read(tls.join("server.pem")).expect("server.pem");
    let mut more = sans();
    more.push("gantry.example".into());
    let second = Pki::load_or_create(&tls, &more).expect("reload");
    assert_eq!(second.ca_sha256(), first.ca_sha256());
    assert_ne!(std::fs::read(tls.join("server.pem")).expect("server.pem"), server_pem);
    assert_eq!(second.sans(), more.as_slice());
}

#[test]
fn a_lone_ca_file_is_an_error_rather_than_a_silent_new_ca() {
    let dir = tempfile::tempdir().expect("dir");
    let tls = dir.path().join("tls");
    Pki::load_or_create(&tls, &sans()).expect("create");
    std::fs::remove_file(tls.join("ca.key")).expect("remove");
    let err = Pki::load_or_create(&tls, &sans()).expect_err("one CA file only");
    assert!(err.to_string().contains("ca.key"), "{err}");
}

#[test]
fn client_certificates_name_their_node_and_refuse_empty_names() {
    let dir = tempfile::tempdir().expect("dir");
    let pki = Pki::load_or_create(&dir.path().join("tls"), &sans()).expect("create");
    let (cert, key) = pki.issue_client("node-a").expect("issue");
    assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(key.contains("PRIVATE KEY"));
    let der = rustls::pki_types::pem::PemObject::from_pem_slice(cert.as_bytes())
        .map(|d: rustls::pki_types::CertificateDer<'static>| gantry_server::tls::common_name(&d));
    assert_eq!(der.expect("pem"), Some("node-a".to_owned()));
    assert!(pki.issue_client("").is_err());
    assert!(pki.issue_client("a\nb").is_err());
}

/// Serves a route that answers with the peer address and certificate name it was given.
async fn echo_server(pki: Option<&Pki>) -> (String, tokio::sync::oneshot::Sender<()>) {
    async fn who(ConnectInfo(peer): ConnectInfo<SocketAddr>, cert: Option<Extension<PeerCert>>) -> String {
        format!("{peer} {}", cert.map_or_else(|| "-".to_owned(), |Extension(c)| c.common_name))
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let tls = pki.map(|p| p.server_config().expect("server config"));
    let scheme = if tls.is_some() { "https" } else { "http" };
    let limits = Limits {
        max_connections: 64,
        max_connections_per_address: 64,
        loopback_is_one_source: true,
        header_read_timeout: Duration::from_secs(5),
        tls_handshake_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(30),
        shutdown_grace: Duration::from_secs(5),
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let router = Router::new().route("/who", get(who));
    tokio::spawn(transport::serve(vec![listener], None, router, tls, limits, async move {
        let _ = rx.await;
    }));
    (format!("{scheme}://{addr}"), tx)
}

#[tokio::test]
async fn a_client_certificate_from_the_cluster_ca_names_its_node_in_every_request() {
    let dir = tempfile::tempdir().expect("dir");
    let pki = Pki::load_or_create(&dir.path().join("tls"), &sans()).expect("pki");
    let (url, _stop) = echo_server(Some(&pki)).await;
    let (cert, key) = pki.issue_client("node-a").expect("issue");
    let http = client(Some(pki.ca_pem()), Some((&cert, &key)));
    for _ in 0..2 {
        let text = http.get(format!("{url}/who")).send().await.expect("send").text().await.expect("text");
        let (peer, name) = text.split_once(' ').expect("two fields");
        assert_eq!(name, "node-a");
        assert!(peer.parse::<SocketAddr>().expect("peer address").ip().is_loopback());
    }
    let anonymous = client(Some(pki.ca_pem()), None);
    let text = anonymous.get(format!("{url}/who")).send().await.expect("send").text().await.expect("text");
    assert!(text.ends_with(" -"), "no certificate, no PeerCert: {text}");
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused_at_the_handshake() {
    let dir = tempfile::tempdir().expect("dir");
    let pki = Pki::load_or_create(&dir.path().join("tls"), &sans()).expect("pki");
    let other = Pki::load_or_create(&dir.path().join("other"), &sans()).expect("other pki");
    let (url, _stop) = echo_server(Some(&pki)).await;
    let (cert, key) = other.issue_client("node-a").expect("issue");
    let http = client(Some(pki.ca_pem()), Some((&cert, &key)));
    let result = http.get(format!("{url}/who")).send().await;
    assert!(result.is_err(), "a foreign client certificate was accepted: {result:?}");
}

#[tokio::test]
async fn the_peer_address_reaches_handlers_over_plain_http_too() {
    let (url, _stop) = echo_server(None).await;
    let text =
        client(None, None).get(format!("{url}/who")).send().await.expect("send").text().await.expect("text");
    let (peer, name) = text.split_once(' ').expect("two fields");
    assert!(peer.parse::<SocketAddr>().is_ok(), "{text}");
    assert_eq!(name, "-");
}

async fn tls_server() -> TestServer {
    TestServer::start_with(|config, dir| {
        config.pki = Some(Arc::new(Pki::load_or_create(&dir.join("tls"), &sans()).expect("pki")));
    })
    .await
}

#[tokio::test]
async fn a_client_pinning_the_ca_is_served_and_one_without_it_is_refused() {
    let s = tls_server().await;
    assert!(s.url.starts_with("https://127.0.0.1:"), "{}", s.url);
    let resp = s.get("/v1/jobs").send().await.expect("pinned client");
    assert_eq!(resp.status(), StatusCode::OK);
    let other_dir = tempfile::tempdir().expect("dir");
    let other = Pki::load_or_create(other_dir.path(), &sans()).expect("other pki");
    let err = client(Some(other.ca_pem()), None).get(format!("{}/healthz", s.url)).send().await;
    let err = err.expect_err("a client pinning another CA must fail");
    assert!(format!("{err:?}").contains("UnknownIssuer"), "{err:?}");
}

#[tokio::test]
async fn plain_http_to_the_tls_port_gets_a_400_saying_to_use_https() {
    let s = tls_server().await;
    let plain = s.url.replace("https://", "http://");
    let resp = client(None, None).get(format!("{plain}/healthz")).send().await.expect("an answer");
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body = resp.text().await.expect("text");
    assert!(body.contains("https://"), "{body}");
}

#[tokio::test]
async fn the_ca_is_served_without_a_token_and_only_with_tls() {
    let s = tls_server().await;
    let resp = s.http.get(format!("{}/v1/ca.pem", s.url)).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.text().await.expect("text").starts_with("-----BEGIN CERTIFICATE-----"));
    let plain = TestServer::start().await;
    let resp = plain.http.get(format!("{}/v1/ca.pem", plain.url)).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_node_credential_from_a_join_over_tls_is_refused_without_the_certificate_issued_with_it() {
    // Before, the credential alone was enough: one copied off a node acted for it from anywhere.
    let s = tls_server().await;
    let join =
        gantry_server::create_join_token(&*s.store, Some("node-a"), Duration::from_secs(600)).expect("join");
    let joined: serde_json::Value = crate::json_of(
        s.http
            .post(format!("{}/v1/agent/join", s.url))
            .bearer_auth(&join)
            .json(&serde_json::json!({"node_id": "node-a"})),
    )
    .await;
    let credential = joined["credential"].as_str().expect("credential");
    let (cert, key) =
        (joined["client_cert_pem"].as_str().expect("cert"), joined["client_key_pem"].as_str().expect("key"));
    let register = serde_json::json!({"node_id": "node-a", "hostname": "a", "cpu_milli": 1000, "memory_mib": 1024, "gpus": []});
    let send = |http: &reqwest::Client| {
        http.post(format!("{}/v1/agent/register", s.url)).bearer_auth(credential).json(&register).send()
    };
    let bare = send(&s.http).await.expect("send");
    assert_eq!(bare.status(), StatusCode::FORBIDDEN);
    let error = bare.text().await.expect("text");
    assert!(error.contains("only with the client certificate issued with it"), "{error}");
    // Another certificate for the same node, from the same CA, is not the one issued with it.
    let pki = s.app.pki.as_ref().expect("pki");
    let (other_cert, other_key) = pki.issue_client("node-a").expect("issue");
    let other = client(Some(pki.ca_pem()), Some((&other_cert, &other_key)));
    assert_eq!(send(&other).await.expect("send").status(), StatusCode::FORBIDDEN);
    let paired = client(Some(pki.ca_pem()), Some((cert, key)));
    assert_eq!(send(&paired).await.expect("send").status(), StatusCode::OK);
}
