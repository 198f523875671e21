//! The cluster's recorded history as `gantry whatif` reads it (`GET /v1/history`).
//!
//! One row per job that was submitted in the window (a gang once, with its worker count), with
//! every attempt and the GPU model it ran on, plus the fleet and the teams' guarantees as they
//! are now. Only what a replay needs: no environment, no command, no output.

use serde::{Deserialize, Serialize};

use crate::model::JobState;

/// Which history to return.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
pub struct HistoryQuery {
    /// Jobs submitted at or after this time, ms since the epoch (default: 30 days ago).
    pub since: Option<i64>,
}

/// A node as the replay sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryNode {
    /// Node id.
    pub id: String,
    /// GPUs on it.
    pub gpus: u32,
    /// Their model (the most common one, on a mixed node).
    pub model: String,
}

/// A team's guarantee.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryTeam {
    /// The team.
    pub name: String,
    /// GPUs guaranteed (its quota; 0 when none is set).
    pub guaranteed_gpus: u32,
}

/// One attempt of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryAttempt {
    /// When it was placed, ms since the epoch.
    pub placed_at: i64,
    /// When its agent reported it running.
    pub started_at: Option<i64>,
    /// When it ended (none while it runs).
    pub finished_at: Option<i64>,
    /// How it ended (`pending`: requeued).
    pub outcome: Option<JobState>,
    /// The GPU model of its GPUs (none for a CPU-only attempt).
    pub model: Option<String>,
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryJob {
    /// Job id.
    pub id: i64,
    /// Its team.
    pub team: String,
    /// Its name.
    pub name: String,
    /// Its `job_type` label, when it has one (what names "the same job" across runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_type: Option<String>,
    /// Priority.
    pub priority: i32,
    /// GPUs of one worker (of the job, when it is not a gang).
    pub gpus: u32,
    /// Workers of a gang; 1 otherwise.
    pub workers: u32,
    /// Share of each GPU in milli-GPU when it asked for a slice, else 1000.
    pub gpu_milli: u32,
    /// Models it accepted (empty: any).
    pub gpu_models: Vec<String>,
    /// When it was submitted, ms since the epoch.
    pub submitted_at: i64,
    /// Its state now.
    pub state: JobState,
    /// Its attempts, first first (a gang's: its first worker's).
    pub attempts: Vec<HistoryAttempt>,
    /// GPU-seconds its GPUs were busy (NVML utilisation × share × time, every attempt and
    /// worker), when the agents sampled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_gpu_s: Option<f64>,
}

/// The history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryResponse {
    /// Start of the window, ms since the epoch.
    pub since: i64,
    /// When it was read, ms since the epoch.
    pub until: i64,
    /// The fleet now.
    pub nodes: Vec<HistoryNode>,
    /// Teams and their guarantees now.
    pub teams: Vec<HistoryTeam>,
    /// Jobs submitted in the window, oldest first.
    pub jobs: Vec<HistoryJob>,
}
