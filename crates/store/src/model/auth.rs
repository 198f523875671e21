//! Tokens, teams and events.

use serde::{Deserialize, Serialize};

use super::Role;

/// A stored API token (the hash only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Id.
    pub id: i64,
    /// What it may do.
    pub role: Role,
    /// Team it acts for (`None` for admin and agent tokens).
    pub team: Option<String>,
    /// Label.
    pub name: String,
}

/// A team and its quota.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Team {
    /// Name.
    pub name: String,
    /// Whole GPUs the team may hold while others wait (`None`: unlimited).
    pub gpu_quota: Option<u32>,
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
}
