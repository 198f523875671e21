//! Leadership among replicas: the lease and the fencing token a leader's writes carry.

use serde::{Deserialize, Serialize};

/// The lease as a campaign left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The replica that leads.
    pub holder: String,
    /// The epoch it leads under: it grows at every election.
    pub epoch: u64,
    /// Until when (ms since the epoch) unless renewed.
    pub expires_at: i64,
    /// Whether the campaigning replica is the leader.
    pub leader: bool,
}

/// What this store's scheduler and reconciler writes (placements, preemptions, resizes, node
/// expiry, drains, dependency failures) must prove before they commit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Fence {
    /// Nothing: a single control plane, no election (the default).
    #[default]
    Unfenced,
    /// This replica follows: such writes are refused.
    Follower,
    /// This replica led under `epoch`: such writes commit only while the lease row still says
    /// so, checked in their own transaction.
    Leader {
        /// The replica.
        holder: String,
        /// Its epoch.
        epoch: u64,
    },
}
