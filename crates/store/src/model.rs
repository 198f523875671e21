//! The store's vocabulary: jobs, nodes, GPUs, allocations, tokens, teams.

use serde::{Deserialize, Serialize};

/// A job's id, assigned by the store on submission.
pub type JobId = i64;

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The lowercase name used in the database, the API and the CLI.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
            /// Parses the lowercase name.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// Where a job is in its life.
    JobState {
        /// Waiting for GPUs.
        Pending => "pending",
        /// GPUs allocated; the agent has not reported the process started yet.
        Scheduled => "scheduled",
        /// The process runs.
        Running => "running",
        /// Exited with status 0.
        Succeeded => "succeeded",
        /// Exited non-zero, could not start, or ran out of retries.
        Failed => "failed",
        /// Cancelled by a user.
        Cancelled => "cancelled",
    }
);

impl JobState {
    /// Holds an allocation (scheduled or running).
    pub fn is_active(self) -> bool {
        matches!(self, JobState::Scheduled | JobState::Running)
    }
    /// Will never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Cancelled)
    }
}

string_enum!(
    /// A node's liveness as seen by the control plane.
    NodeState {
        /// Heartbeats arrive.
        Ready => "ready",
        /// Missed heartbeats for the timeout; its jobs were requeued.
        Lost => "lost",
    }
);

string_enum!(
    /// A GPU's health (the GPU layer's state machine). Only `healthy` GPUs get new work.
    GpuHealth {
        /// Fine.
        Healthy => "healthy",
        /// An event was seen; being watched.
        Suspect => "suspect",
        /// Critical fault; no work.
        Unhealthy => "unhealthy",
        /// Probing after a fault.
        Recovering => "recovering",
    }
);

string_enum!(
    /// What a token may do. Finer roles come later; the check sits in one place in the server.
    Role {
        /// Everything.
        Admin => "admin",
        /// Submit and manage jobs of its team.
        User => "user",
        /// Register a node and report as its agent.
        Agent => "agent",
    }
);

/// What a job asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRequest {
    /// Whole GPUs (0 for a slice or a CPU-only job).
    pub gpus: u32,
    /// GPU memory of a slice of one GPU, MiB (0 when whole GPUs are asked for).
    pub gpu_memory_mib: u64,
    /// Compute share of the slice in percent (0: not limited).
    pub gpu_compute_pct: u32,
    /// CPU in milli-cores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub memory_mib: u64,
}

/// A job as submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewJob {
    /// Client idempotency key: submitting twice with the same key yields one job.
    pub request_id: Option<String>,
    /// Owning team.
    pub team: String,
    /// Display name.
    pub name: String,
    /// Higher runs first.
    pub priority: i32,
    /// argv.
    pub command: Vec<String>,
    /// Resources.
    pub request: JobRequest,
    /// How many times a lost or unhealthy placement is retried before the job fails.
    pub max_retries: u32,
    /// Submission time, ms since the epoch.
    pub submitted_at: i64,
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Job {
    /// Id.
    pub id: JobId,
    /// Owning team.
    pub team: String,
    /// Display name.
    pub name: String,
    /// Higher runs first.
    pub priority: i32,
    /// argv.
    pub command: Vec<String>,
    /// Resources.
    pub request: JobRequest,
    /// Current state.
    pub state: JobState,
    /// Number of placements so far.
    pub attempt: u32,
    /// Retry budget.
    pub max_retries: u32,
    /// A stop asked of the agent and not yet confirmed (`cancel` or `requeue`).
    pub stop: Option<String>,
    /// Node of the current or last placement.
    pub node_id: Option<String>,
    /// Node epoch of the current placement.
    pub epoch: Option<u64>,
    /// GPUs of the current or last placement.
    pub gpu_uuids: Vec<String>,
    /// Exit status once finished.
    pub exit_code: Option<i32>,
    /// Why the job is in its state, when that is not obvious.
    pub reason: Option<String>,
    /// ms since the epoch.
    pub submitted_at: i64,
    /// ms since the epoch.
    pub started_at: Option<i64>,
    /// ms since the epoch.
    pub finished_at: Option<i64>,
}

/// One state change of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Transition {
    /// Previous state (none on submission).
    pub from: Option<JobState>,
    /// New state.
    pub to: JobState,
    /// Why.
    pub reason: Option<String>,
    /// ms since the epoch.
    pub at: i64,
}

/// A GPU as an agent reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuInfo {
    /// Stable id, e.g. `GPU-…`.
    pub uuid: String,
    /// Index on the node.
    pub index: u32,
    /// Model name.
    pub model: String,
    /// Total memory, MiB.
    pub memory_mib: u64,
}

/// A node registering (or registering again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRegistration {
    /// Stable node id.
    pub node_id: String,
    /// Host name.
    pub hostname: String,
    /// CPU in milli-cores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub memory_mib: u64,
    /// The GPUs.
    pub gpus: Vec<GpuInfo>,
    /// ms since the epoch.
    pub at: i64,
}

/// A node as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Node {
    /// Stable node id.
    pub id: String,
    /// Host name.
    pub hostname: String,
    /// Liveness.
    pub state: NodeState,
    /// Registration epoch.
    pub epoch: u64,
    /// CPU in milli-cores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub memory_mib: u64,
    /// ms since the epoch.
    pub last_heartbeat: i64,
}

/// A GPU as stored, with its latest health and sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Gpu {
    /// Inventory.
    #[serde(flatten)]
    pub info: GpuInfo,
    /// The node it sits in.
    pub node_id: String,
    /// Health.
    pub health: GpuHealth,
    /// Latest sample from the GPU layer, as reported.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub sample: Option<serde_json::Value>,
}

/// A GPU's health and sample in a heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuReport {
    /// Which GPU.
    pub uuid: String,
    /// Current health.
    pub health: GpuHealth,
    /// Latest sample.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub sample: Option<serde_json::Value>,
}

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

/// How an agent says a job ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobExit {
    /// Exit status (`None` when killed by a signal or never started).
    pub exit_code: Option<i32>,
    /// Why, when not a plain exit (e.g. `killed by signal 9`, `spawn failed: …`).
    pub reason: Option<String>,
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

/// What an agent says about one of its jobs in a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobReport {
    /// The job.
    pub job_id: JobId,
    /// The attempt the agent runs.
    pub attempt: u32,
    /// `None` while the process runs.
    pub exit: Option<JobExit>,
}

/// An agent's heartbeat: liveness, GPU health and samples, and the state of its jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Heartbeat {
    /// The node.
    pub node_id: String,
    /// The epoch the agent registered under.
    pub epoch: u64,
    /// GPU health and samples.
    pub gpus: Vec<GpuReport>,
    /// Every job the agent runs or has seen end since its last heartbeat.
    pub jobs: Vec<JobReport>,
    /// ms since the epoch (set by the server).
    #[serde(default)]
    pub at: i64,
}

/// Which jobs to list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobFilter {
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this team.
    pub team: Option<String>,
    /// At most this many, newest first when set.
    pub limit: Option<u32>,
}
