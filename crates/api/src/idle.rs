//! Idle policies on the wire: a team's rule for allocated GPUs its jobs leave idle (see
//! `gantry_core::idle` for the decision).

use serde::{Deserialize, Serialize};

/// The job kinds an idle policy is set for (`batch`: jobs that run to completion; `service`:
/// service replicas, judged only while they are not ready, and stopped as failed whatever the
/// action, so that their service backs off and says why).
pub const KINDS: &[&str] = &["batch", "service"];

/// A team's idle policy for one job kind, as stored and listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IdlePolicyView {
    /// The team.
    pub team: String,
    /// The job kind (`batch` or `service`).
    pub kind: String,
    /// Seconds below `below_percent` on every GPU before the owner is warned.
    pub warn_after_s: u64,
    /// Seconds below `below_percent` before the action is taken.
    pub act_after_s: u64,
    /// Utilisation (percent) under which a sample counts as idle.
    pub below_percent: f64,
    /// `requeue` (stopped and queued again, retries unspent), `cancel` or `lend`.
    pub action: String,
}

/// Set a team's idle policy for a job kind (`PUT /v1/teams/{name}/idle`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct IdlePolicyRequest {
    /// The job kind (default `batch`).
    #[serde(default = "batch")]
    pub kind: String,
    /// Seconds idle before the owner is warned (at most `act_after_s`).
    pub warn_after_s: u64,
    /// Seconds idle before the action (1 s to 31 days).
    pub act_after_s: u64,
    /// Utilisation (percent, 0 to 100) under which a sample counts as idle.
    pub below_percent: f64,
    /// `requeue`, `cancel` or `lend` (the job keeps its allocation; preemptible jobs borrow its
    /// GPUs until it uses them again).
    pub action: String,
}

fn batch() -> String {
    "batch".into()
}

// `below_percent` is checked to be a number from 0 to 100 before a policy is built (never NaN),
// so equality is total.
impl Eq for IdlePolicyView {}

/// A GPU lent by a job that left it idle under a `lend` policy: the owner keeps its allocation,
/// and one preemptible job (priority below 0) may borrow the GPU until the owner's processes
/// use it again. Only loans not yet given back are listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Loan {
    /// The lent GPU.
    pub gpu_uuid: String,
    /// The job that lent it (it keeps its allocation).
    pub owner: i64,
    /// The owner's attempt when it lent the GPU.
    pub owner_attempt: u32,
    /// The job borrowing it, when one is placed there.
    pub borrower: Option<i64>,
    /// The borrower's attempt.
    pub borrower_attempt: Option<u32>,
    /// GPU memory the borrower may use, MiB: what the owner's processes left free.
    pub memory_mib: u64,
    /// When it was lent, ms since the epoch.
    pub lent_at: i64,
}
