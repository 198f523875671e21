//! The node's own credential. A new node trades its one-time join token for a credential bound
//! to its node id (`POST /v1/agent/join`) and keeps it in `<state>/credential` (0600); later runs
//! use the stored one, so the join token is needed once and is useless afterwards.

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

/// The stored credential, or a new one from joining with `config.token`.
pub async fn obtain(config: &AgentConfig) -> Result<String, AgentError> {
    let file = path(&config.state_dir);
    if let Ok(text) = std::fs::read_to_string(&file)
        && !text.trim().is_empty()
    {
        return Ok(text.trim().to_owned());
    }
    let joined = Client::new(&config.server, &config.token)?.join(&config.node_id).await?;
    save(&file, &joined.credential)?;
    tracing::info!(node = %config.node_id, file = %file.display(), "joined the cluster; credential stored");
    Ok(joined.credential)
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
