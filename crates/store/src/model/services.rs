//! Services as stored: the file, its generation and the count the controller keeps.

use serde::{Deserialize, Serialize};

pub use gantry_api::service::{ServiceDecision, ServiceSpec};

use super::Job;

/// A service as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Service {
    /// Row id.
    pub id: i64,
    /// Owning team.
    pub team: String,
    /// Name (unique in the team).
    pub name: String,
    /// The file as applied, checked by the server.
    pub spec: ServiceSpec,
    /// The digest of the file's meaning: the same digest again is a no-op.
    pub digest: String,
    /// 1 for the first file, one more for each changed one.
    pub generation: u64,
    /// Replicas the controller keeps now.
    pub desired: u32,
    /// ms since the epoch.
    pub created_at: i64,
    /// ms since the epoch (the last changed apply, or scale).
    pub updated_at: i64,
}

/// A replica job and the generation of the file it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// The job.
    pub job: Job,
    /// The generation it was made for.
    pub generation: u64,
}

/// What applying a service file did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceAction {
    /// A new service.
    Created,
    /// The same file again.
    Unchanged,
    /// A changed file: a new generation.
    Configured,
}

impl ServiceAction {
    /// The word the CLI prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Unchanged => "unchanged",
            Self::Configured => "configured",
        }
    }
}

/// What one server replica's gateway last saw of a service (its row of `service_activity`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceActivity {
    /// The service's team.
    pub team: String,
    /// The service's name.
    pub service: String,
    /// The server replica (its id in the leader lease).
    pub replica: String,
    /// ms since the epoch: the last request its gateway answered, forwarded or held.
    pub last_request_at: i64,
    /// Requests it holds for a ready replica, as of `at`.
    pub held: u32,
    /// Requests its gateway sent to the service's replicas and has not had answered, as of `at`.
    pub in_flight: u32,
    /// Requests in its gateway's queue for the service, as of `at`.
    pub queue_length: u32,
    /// Requests per second arriving at its gateway for the service, as of `at`.
    pub rps: f64,
    /// Times to first byte its gateway measured for the service over its window, as of `at`: a
    /// histogram's `(bucket, count)` pairs (the server's `gateway::histogram` says what a bucket
    /// holds), buckets in increasing order; empty when none was measured.
    pub ttft_histogram: Vec<(u32, u32)>,
    /// ms since the epoch: when the row was written.
    pub at: i64,
}
