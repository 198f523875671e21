//! Integration tests of the control plane over HTTP, in process.

mod api;
mod scheduling;
mod security;

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
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestServer {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).expect("store"));
        let token = gantry_server::ensure_admin_token(&*store).expect("token").expect("new store");
        let mut config = ServerConfig::local(dir.path().join("logs"));
        config.listen = ([127, 0, 0, 1], 0).into();
        let server = Server::bind(config, Arc::clone(&store)).await.expect("bind");
        let url = format!("http://{}", server.local_addr().expect("addr"));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(async move {
            let _ = rx.await;
        }));
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        Self { url, token, store, http, _dir: dir, stop: Some(tx) }
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
