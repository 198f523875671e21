//! Users, tokens, teams, events and the audit log.

use serde::{Deserialize, Serialize};

use super::TokenKind;

/// A token to store (the hash only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    /// Hex SHA-256 of the secret.
    pub hash: String,
    /// What it is.
    pub kind: TokenKind,
    /// Owner of an `api` token.
    pub user: Option<String>,
    /// The node a `node` token acts for, or a `join` token is limited to.
    pub node: Option<String>,
    /// Label.
    pub name: String,
    /// ms since the epoch.
    pub created_at: i64,
    /// After this (ms since the epoch) the token is refused.
    pub expires_at: Option<i64>,
    /// A node credential's client certificate (hex SHA-256 of its DER), which must come with it.
    pub cert_sha256: Option<String>,
    /// The service (`TEAM/NAME`) an `invoke` token may call.
    pub service: Option<String>,
}

/// Who did something, for the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Actor {
    /// User name, `node:<id>` or `token:<id>`.
    pub name: String,
    /// Role at the time.
    pub role: String,
    /// The team acted for, when one.
    pub team: Option<String>,
    /// Peer address.
    pub peer: Option<String>,
}
