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
    /// For a node credential issued over TLS: the hex SHA-256 of the client certificate issued
    /// with it, the only one it is accepted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_sha256: Option<String>,
    /// The one service an `invoke` token may call, `TEAM/NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Team {
    /// Name.
    pub name: String,
    /// Whole GPUs the team may hold while others wait (`None`: unlimited).
    pub gpu_quota: Option<u32>,
    /// `pids.max` of each of its jobs (`None`: each node's default).
    #[serde(default)]
    pub pids_limit: Option<u64>,
    /// Bytes of job output the server keeps for the team (`None`: the server's default,
    /// `--log-quota`). Setting a team with `None` leaves the team's own value as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_quota_bytes: Option<u64>,
    /// Jobs the team may have pending, each array member counting (`None`: the default,
    /// 100,000). Setting a team with `None` leaves the team's own value as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_limit: Option<u64>,
    /// The highest priority its members may submit at (`None`: [`Team::DEFAULT_MAX_PRIORITY`]).
    /// Setting a team with `None` leaves the team's own value as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i32>,
    /// Whether its jobs may preempt other teams' jobs by priority (`None`: no). Without it,
    /// across teams a job preempts only to reclaim its team's guarantee from a borrower.
    /// Setting a team with `None` leaves the team's own value as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_other_teams: Option<bool>,
    /// Services the team may have (`None`: [`Team::DEFAULT_MAX_SERVICES`]). Setting a team with
    /// `None` leaves the team's own value as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_services: Option<u32>,
    /// Replicas its services may hold at once, pending or running (`None`:
    /// [`Team::DEFAULT_MAX_REPLICAS`]). Setting a team with `None` leaves the team's own value as
    /// it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<u32>,
    /// Bytes of command and environment its pending jobs may store, an array's members each
    /// (`None`: [`Team::DEFAULT_PENDING_BYTES`]). Setting a team with `None` leaves the team's
    /// own value as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_bytes_limit: Option<u64>,
}

impl Team {
    /// The priority ceiling of a team that set none.
    pub const DEFAULT_MAX_PRIORITY: i32 = 100;
    /// The services a team that set none may have.
    pub const DEFAULT_MAX_SERVICES: u32 = 20;
    /// The replicas a team that set none may hold at once.
    pub const DEFAULT_MAX_REPLICAS: u32 = 100;
    /// The bytes of command and environment the pending jobs of a team that set none may store.
    pub const DEFAULT_PENDING_BYTES: u64 = 64 << 20;

    /// The bytes of command and environment its pending jobs may store.
    pub fn pending_bytes_cap(&self) -> u64 {
        self.pending_bytes_limit.unwrap_or(Self::DEFAULT_PENDING_BYTES)
    }

    /// The services it may have.
    pub fn service_cap(&self) -> u32 {
        self.max_services.unwrap_or(Self::DEFAULT_MAX_SERVICES)
    }

    /// The replicas its services may hold at once.
    pub fn replica_cap(&self) -> u32 {
        self.max_replicas.unwrap_or(Self::DEFAULT_MAX_REPLICAS)
    }

    /// The highest priority its members may submit at.
    pub fn priority_ceiling(&self) -> i32 {
        self.max_priority.unwrap_or(Self::DEFAULT_MAX_PRIORITY)
    }

    /// Whether its jobs may preempt other teams' jobs by priority.
    pub fn preempts_other_teams(&self) -> bool {
        self.preempt_other_teams.unwrap_or(false)
    }
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
    /// SHA-256 over `prev_hash` and this row's fields (all but `count`).
    pub hash: String,
    /// How many requests the row stands for: refusals from the same caller, for the same
    /// action and reason, within the row's minute, are counted on its row rather than added.
    #[serde(default = "one")]
    pub count: u64,
}

fn one() -> u64 {
    1
}
