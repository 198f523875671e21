//! The agent side of the v1 agent protocol (HTTP/JSON).

use std::time::Duration;

use gantry_server::api::types::{
    HeartbeatResponse, JoinRequest, JoinResponse, RegisterRequest, RegisterResponse,
};
use gantry_store::Heartbeat;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::AgentError;

/// A client for `/v1/agent/*`.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:7070`) with a join token.
    pub fn new(base: &str, token: &str) -> Result<Self, AgentError> {
        // reqwest is built without a default crypto provider; ring is the workspace's choice.
        // Installing twice fails harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
        Ok(Self { http, base: base.trim_end_matches('/').to_owned(), token: token.to_owned() })
    }

    /// Trades the join token this client holds for the node's credential.
    pub async fn join(&self, node_id: &str) -> Result<JoinResponse, AgentError> {
        self.post("/v1/agent/join", &JoinRequest { node_id: node_id.to_owned() }).await
    }

    /// Registers the node; returns its epoch.
    pub async fn register(&self, req: &RegisterRequest) -> Result<RegisterResponse, AgentError> {
        self.post("/v1/agent/register", req).await
    }

    /// Sends a heartbeat; a 409 (stale epoch) or 404 (unknown node) means fenced.
    pub async fn heartbeat(&self, hb: &Heartbeat) -> Result<HeartbeatResponse, AgentError> {
        match self.post("/v1/agent/heartbeat", hb).await {
            Err(AgentError::Status { status: 404 | 409, body }) => Err(AgentError::Fenced(body)),
            other => other,
        }
    }

    async fn post<B: Serialize, R: DeserializeOwned>(&self, path: &str, body: &B) -> Result<R, AgentError> {
        let resp =
            self.http.post(format!("{}{path}", self.base)).bearer_auth(&self.token).json(body).send().await?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp.json().await?);
        }
        let body = resp.text().await.unwrap_or_default();
        Err(AgentError::Status { status: status.as_u16(), body })
    }
}
