//! Placements and the allocation history.

use serde::{Deserialize, Serialize};

use super::JobId;

/// One GPU (or slice of one) of a placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// Which GPU.
    pub uuid: String,
    /// Compute share in milli-GPU (1000 = whole).
    pub share_milli: u32,
    /// GPU memory granted, MiB.
    pub memory_mib: u64,
}

/// A scheduling decision, recorded before the agent hears of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The job.
    pub job_id: JobId,
    /// The node.
    pub node_id: String,
    /// The node epoch the decision was made under.
    pub epoch: u64,
    /// What each GPU gives.
    pub grants: Vec<Grant>,
    /// ms since the epoch.
    pub at: i64,
}

/// A row of the allocation history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// Monotonic id: the order allocations were made in.
    pub id: i64,
    /// The job.
    pub job_id: JobId,
    /// The job's attempt.
    pub attempt: u32,
    /// The node.
    pub node_id: String,
    /// Node epoch.
    pub epoch: u64,
    /// The GPU.
    pub gpu_uuid: String,
    /// Compute share, milli-GPU.
    pub share_milli: u32,
    /// GPU memory, MiB.
    pub memory_mib: u64,
    /// Highest allocation id that existed at release; `None` while held.
    pub released_after: Option<i64>,
}
