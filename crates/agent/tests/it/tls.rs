//! The agent's side of TLS: joining by CA hash, pinning the CA, mutual TLS.

use std::sync::Arc;

use gantry_agent::runner::AgentError;
use gantry_agent::runner::client::{self, Client};
use gantry_server::api::types::RegisterRequest;
use gantry_server::tls::Pki;
use gantry_server::{Server, ServerConfig};
use gantry_store::{SqliteStore, Store};

struct TlsServer {
    url: String,
    pki: Arc<Pki>,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn tls_server() -> TlsServer {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("store")).expect("store"));
    let sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let pki = Arc::new(Pki::load_or_create(&dir.path().join("tls"), &sans).expect("pki"));
    let mut config = ServerConfig::local(dir.path().join("logs"));
    config.listen = ([127, 0, 0, 1], 0).into();
    config.pki = Some(Arc::clone(&pki));
    let server = Server::bind(config, Arc::clone(&store)).await.expect("bind");
    let url = server.url().expect("url");
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(async move {
        let _ = rx.await;
    }));
    TlsServer { url, pki, store, _dir: dir, _stop: stop }
}

#[tokio::test]
async fn fetch_ca_returns_the_ca_only_when_its_hash_matches() {
    let s = tls_server().await;
    let pem = client::fetch_ca(&s.url, &s.pki.ca_sha256()).await.expect("right hash");
    assert_eq!(pem.trim(), s.pki.ca_pem().trim());
    let prefixed = format!("sha256:{}", s.pki.ca_sha256().to_uppercase());
    assert!(client::fetch_ca(&s.url, &prefixed).await.is_ok(), "sha256: prefix and upper case accepted");
    let wrong = "0".repeat(64);
    match client::fetch_ca(&s.url, &wrong).await {
        Err(AgentError::CaMismatch { expected, got }) => {
            assert_eq!((expected, got), (wrong, s.pki.ca_sha256()));
        }
        other => panic!("a wrong hash must fail with CaMismatch, got {other:?}"),
    }
    assert!(matches!(client::fetch_ca(&s.url, "abc").await, Err(AgentError::Tls(_))), "malformed hash");
}

fn registration() -> RegisterRequest {
    RegisterRequest {
        attempts: Vec::new(),
        node_id: "node-a".into(),
        hostname: "node-a".into(),
        advertise_addr: None,
        network: Default::default(),
        job_defaults: None,
        labels: Default::default(),
        cpu_milli: 1000,
        memory_mib: 1024,
        gpus: vec![],
    }
}

#[tokio::test]
async fn an_agent_pinning_the_ca_registers_with_or_without_a_client_certificate() {
    let s = tls_server().await;
    let token = gantry_server::create_node_credential(&*s.store, "node-a").expect("credential");
    let (cert, key) = s.pki.issue_client("node-a").expect("client cert");
    let mutual = Client::with_tls(&s.url, &token, Some(s.pki.ca_pem()), Some((&cert, &key))).expect("client");
    assert!(mutual.register(&registration()).await.expect("mutual TLS").epoch > 0);
    let pinned = Client::with_tls(&s.url, &token, Some(s.pki.ca_pem()), None).expect("client");
    assert!(pinned.register(&registration()).await.is_ok());
    // Another node's certificate does not go with node-a's credential.
    let (cert_b, key_b) = s.pki.issue_client("node-b").expect("client cert");
    let crossed =
        Client::with_tls(&s.url, &token, Some(s.pki.ca_pem()), Some((&cert_b, &key_b))).expect("client");
    assert!(matches!(crossed.register(&registration()).await, Err(AgentError::Status { status: 403, .. })));
}

#[tokio::test]
async fn an_agent_that_does_not_trust_the_ca_gets_a_tls_error_naming_the_cause() {
    let s = tls_server().await;
    let other_dir = tempfile::tempdir().expect("dir");
    let other = Pki::load_or_create(other_dir.path(), &["127.0.0.1".to_owned()]).expect("other CA");
    let wrong = Client::with_tls(&s.url, "gty_x", Some(other.ca_pem()), None).expect("client");
    match wrong.register(&registration()).await {
        Err(AgentError::Tls(why)) => assert!(why.contains("UnknownIssuer"), "{why}"),
        other => panic!("expected a TLS error, got {other:?}"),
    }
    assert!(Client::with_tls(&s.url, "gty_x", Some("not a pem"), None).is_err());
}
