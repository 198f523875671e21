//! Integration tests of the control plane over HTTP, in process.

// Tests over real sockets measure real time (deadlines, latencies); the server they drive reads
// its clock only where `crates/server/clippy.toml` allows.
#![allow(clippy::disallowed_methods)]

mod api;
mod elastic;
mod fuzz;
mod gateway;
mod held;
mod incremental;
mod job_limits;
mod limits;
mod live;
mod locality;
mod outputs;
mod pools;
mod preemption;
mod priority;
mod queue;
mod quotas;
mod replay;
mod scheduling;
mod security;
mod services;
mod signin;
mod staging;
mod tls;
mod transport;
mod volumes;

use std::sync::Arc;

use gantry_server::{Server, ServerConfig};
use gantry_store::{SqliteStore, Store};

/// A server on a free port with a fresh store and an admin token.
#[derive(Debug)]
pub struct TestServer {
    pub url: String,
    pub token: String,
    pub store: Arc<dyn Store>,
    pub http: reqwest::Client,
    /// The server's shared state (its config, the output ledger).
    pub app: Arc<gantry_server::App>,
    pub dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(|_, _| {}).await
    }

    /// A server whose config `configure` adjusts (given the temp dir); with `config.pki` set it
    /// speaks TLS and `http` pins its CA.
    pub async fn start_with(configure: impl FnOnce(&mut ServerConfig, &std::path::Path)) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).expect("store"));
        let token = gantry_server::ensure_admin_token(&*store).expect("token").expect("new store");
        let mut config = ServerConfig::local(dir.path().join("logs"));
        config.listen = ([127, 0, 0, 1], 0).into();
        configure(&mut config, dir.path());
        let ca = config.pki.as_ref().map(|p| p.ca_pem().to_owned());
        let server = Server::bind(config, Arc::clone(&store)).await.expect("bind");
        let url = server.url().expect("url");
        let app = server.app();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(async move {
            let _ = rx.await;
        }));
        let http = client(ca.as_deref(), None);
        Self { url, token, store, http, app, dir, stop: Some(tx) }
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(format!("{}{path}", self.url)).bearer_auth(&self.token)
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(format!("{}{path}", self.url)).bearer_auth(&self.token)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A reqwest client that pins `ca` (PEM) when given and presents `identity` (certificate PEM,
/// key PEM) when given.
pub fn client(ca: Option<&str>, identity: Option<(&str, &str)>) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder();
    if let Some(ca) = ca {
        builder =
            builder.tls_certs_only(reqwest::Certificate::from_pem_bundle(ca.as_bytes()).expect("CA PEM"));
    }
    if let Some((cert, key)) = identity {
        let pem = format!("{cert}\n{key}");
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity PEM"));
    }
    builder.build().expect("client")
}

/// Sends a request and reads its JSON answer (panics on a transport or decoding error).
pub async fn json_of<T: serde::de::DeserializeOwned>(req: reqwest::RequestBuilder) -> T {
    req.send().await.expect("send").json().await.expect("json")
}
