//! Users, tokens, teams, events and the audit log.

use serde::{Deserialize, Serialize};

use super::{Role, TokenKind};

/// A user: a name with one role and the teams it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct User {
    /// Name.
    pub name: String,
    /// What the user may do.
    pub role: Role,
    /// Teams whose jobs the user may see (and, as a member, manage).
    pub teams: Vec<String>,
}

/// A stored token, with its owner's role and teams resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenRecord {
    /// Id.
    pub id: i64,
    /// What it is.
    pub kind: TokenKind,
    /// Owner (api tokens).
    pub user: Option<String>,
    /// The owner's role (`agent` for join and node tokens).
    pub role: Role,
    /// The owner's teams.
    pub teams: Vec<String>,
    /// Bound node (node tokens; join tokens when limited to one).
    pub node: Option<String>,
    /// Label.
    pub name: String,
    /// ms since the epoch.
    pub created_at: i64,
    /// ms since the epoch.
    pub expires_at: Option<i64>,
    /// ms since the epoch.
    pub revoked_at: Option<i64>,
    /// When a join token was traded in (ms since the epoch).
    pub used_at: Option<i64>,
}

impl TokenRecord {
    /// Why the token may not be used at `now`, if it may not.
    pub fn refusal(&self, now: i64) -> Option<&'static str> {
        if self.revoked_at.is_some() {
            Some("revoked")
        } else if self.expires_at.is_some_and(|t| t <= now) {
            Some("expired")
        } else if self.used_at.is_some() {
            Some("already used")
        } else {
            None
        }
    }
}

/// A team and its quota.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Team {
    /// Name.
    pub name: String,
    /// Whole GPUs the team may hold while others wait (`None`: unlimited).
    pub gpu_quota: Option<u32>,
    /// `pids.max` of each of its jobs (`None`: each node's default).
    #[serde(default)]
    pub pids_limit: Option<u64>,
}

/// A recorded event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    /// Id.
    pub id: i64,
    /// ms since the epoch.
    pub at: i64,
    /// e.g. `node.lost`, `gpu.health`.
    pub kind: String,
    /// The node, GPU or job concerned.
    pub subject: String,
    /// A sentence.
    pub message: String,
    /// The team it concerns (`None`: a cluster event, not shown to members).
    #[serde(default)]
    pub team: Option<String>,
}

/// A row of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditRecord {
    /// Position in the chain (1, 2, …).
    pub id: i64,
    /// ms since the epoch.
    pub at: i64,
    /// User name, `node:<id>` or `token:<id>`.
    pub actor: String,
    /// The actor's role.
    pub role: String,
    /// The team acted for.
    pub team: Option<String>,
    /// e.g. `job.submit`.
    pub action: String,
    /// What was acted on, e.g. `job/12`.
    pub target: String,
    /// `ok`, `denied: …` or `error: …`.
    pub outcome: String,
    /// Peer address.
    pub peer: Option<String>,
    /// Hash of the previous row (64 zeros for the first).
    pub prev_hash: String,
    /// SHA-256 over `prev_hash` and this row's fields.
    pub hash: String,
}
