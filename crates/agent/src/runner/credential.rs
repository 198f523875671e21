//! The node's own credential. A new node trades its one-time join token for a credential bound
//! to its node id (`POST /v1/agent/join`) and keeps it in `<state>/credential` (0600); later runs
//! use the stored one, so the join token is needed once and is useless afterwards. Over TLS the
//! join also brings a client certificate for mutual TLS (`client.pem`, `client-key.pem`).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::AgentConfig;
use super::client::Client;
use super::error::AgentError;

/// Where the credential is kept.
pub fn path(state: &Path) -> PathBuf {
    state.join("credential")
}

/// What a node presents to the server.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The node credential (bearer).
    pub credential: String,
    /// A client certificate and key (PEM) for mutual TLS, when the server issued one.
    pub client_cert: Option<(String, String)>,
}

/// The stored identity, or a new one from joining with `config.token`.
pub async fn obtain(config: &AgentConfig) -> Result<Identity, AgentError> {
    let state = &config.state_dir;
    let file = path(state);
    if let Ok(text) = std::fs::read_to_string(&file)
        && !text.trim().is_empty()
    {
        let cert = std::fs::read_to_string(state.join("client.pem")).ok();
        let key = std::fs::read_to_string(state.join("client-key.pem")).ok();
        return Ok(Identity { credential: text.trim().to_owned(), client_cert: cert.zip(key) });
    }
    if config.token.is_empty() {
        return Err(AgentError::CredentialRefused(format!(
            "this node has not joined yet ({} is missing): start it with a join token",
            file.display()
        )));
    }
    let client = Client::with_socket(
        &config.server,
        &config.token,
        config.ca_pem.as_deref(),
        None,
        config.server_socket.as_deref(),
    )?;
    let joined = client.join(&config.node_id).await?;
    if let Some(ca) = &joined.ca_pem
        && config.ca_pem.is_some()
    {
        // Kept for later starts; trusted only because it came over the pinned connection.
        save(&state.join("ca.pem"), ca)?;
    }
    if let (Some(cert), Some(key)) = (&joined.client_cert_pem, &joined.client_key_pem) {
        save(&state.join("client-key.pem"), key)?;
        save(&state.join("client.pem"), cert)?;
    }
    save(&file, &joined.credential)?;
    tracing::info!(node = %config.node_id, file = %file.display(), "joined the cluster; credential stored");
    let client_cert = joined.client_cert_pem.zip(joined.client_key_pem);
    Ok(Identity { credential: joined.credential, client_cert })
}

/// Writes a secret readable by this user only (the directory too).
pub fn save(file: &Path, secret: &str) -> Result<(), AgentError> {
    let io = |source| AgentError::Io { what: format!("storing {}", file.display()), source };
    if let Some(dir) = file.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file)
        .map_err(io)?;
    f.write_all(secret.as_bytes()).and_then(|()| f.sync_all()).map_err(io)
}
