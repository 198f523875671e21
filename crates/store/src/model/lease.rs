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

/// One election: `holder` took the lease under `epoch` at `elected_at` (ms, the database's
/// clock, read after the lease row was locked).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Term {
    /// The epoch it began.
    pub epoch: u64,
    /// The replica elected.
    pub holder: String,
    /// When (ms since the epoch, the database's clock).
    pub elected_at: i64,
}

/// One attempt as its placement wrote it: under which leader epoch, and when by the database's
/// clock (both `None` for a placement by an unfenced store, or one written before version 23).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedAttempt {
    /// The job.
    pub job_id: i64,
    /// The attempt.
    pub attempt: u32,
    /// The leader epoch the placement was checked against.
    pub leader_epoch: Option<u64>,
    /// When it was written (ms, the database's clock).
    pub recorded_at: Option<i64>,
}

/// What the failover checker reads: every election and every placement's epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeadershipHistory {
    /// Elections, by epoch.
    pub terms: Vec<Term>,
    /// Attempts, by job and attempt.
    pub placements: Vec<PlacedAttempt>,
}
