//! Request and response bodies of the HTTP API (the OpenAPI document is generated from these).

use std::collections::BTreeMap;

use gantry_store::{Gpu, GpuInfo, Job, JobId, Role, Transition};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// A job submission.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// argv; the first element is the program.
    pub command: Vec<String>,
    /// Whole GPUs.
    #[serde(default)]
    pub gpus: u32,
    /// A slice of one GPU with this much memory, MiB (not with `gpus`).
    #[serde(default)]
    pub gpu_memory_mib: u64,
    /// Compute share of the slice, percent.
    #[serde(default)]
    pub gpu_compute_pct: u32,
    /// CPU, milli-cores.
    #[serde(default)]
    pub cpu_milli: u64,
    /// Host memory, MiB.
    #[serde(default)]
    pub memory_mib: u64,
    /// Team (default: the token's team, else `default`).
    pub team: Option<String>,
    /// Higher runs first (-1000..=1000).
    #[serde(default)]
    pub priority: i32,
    /// Display name (default: the program's name).
    pub name: Option<String>,
    /// Placements lost to node or GPU failures before the job fails (default 3).
    pub max_retries: Option<u32>,
    /// Idempotency key: a retried submission with the same key returns the same job.
    pub request_id: Option<String>,
}

/// The job id of a submission.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SubmitResponse {
    /// Id.
    pub id: JobId,
    /// False when the `request_id` had been seen: the job already existed.
    pub created: bool,
}

/// A job with its history.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobDetail {
    /// The job.
    pub job: Job,
    /// Its state changes.
    pub transitions: Vec<Transition>,
    /// Most output kept per stream (stdout, stderr), bytes; older output is rotated away.
    #[serde(default)]
    pub log_limit_bytes: u64,
}

/// Which jobs to list.
#[derive(Debug, Clone, Deserialize, IntoParams)]
pub struct ListQuery {
    /// Only this state.
    pub state: Option<String>,
    /// Only this team.
    pub team: Option<String>,
    /// At most this many, newest first.
    pub limit: Option<u32>,
}

/// How many events.
#[derive(Debug, Clone, Deserialize, IntoParams)]
pub struct EventQuery {
    /// At most this many (default 100).
    pub limit: Option<u32>,
}

/// Which log and from where.
#[derive(Debug, Clone, Deserialize, IntoParams)]
pub struct LogQuery {
    /// `stdout` (default) or `stderr`.
    pub stream: Option<String>,
    /// Byte offset to read from (for following).
    pub offset: Option<u64>,
}

/// Part of a GPU held by a job.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GpuHolder {
    /// The job.
    pub job_id: JobId,
    /// Compute share, milli-GPU.
    pub share_milli: u32,
    /// GPU memory, MiB.
    pub memory_mib: u64,
}

/// A GPU with who holds it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GpuView {
    /// The GPU, its health and latest sample.
    pub gpu: Gpu,
    /// Jobs holding it.
    pub holders: Vec<GpuHolder>,
}

/// A team, its quota and its use.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TeamView {
    /// Name.
    pub name: String,
    /// Quota in whole GPUs (`None`: unlimited).
    pub gpu_quota: Option<u32>,
    /// Pending jobs.
    pub pending: u64,
    /// Scheduled or running jobs.
    pub active: u64,
}

/// A quota change.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaRequest {
    /// Whole GPUs (`null`: unlimited).
    pub gpu_quota: Option<u32>,
}

/// A token to create.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// `user` (default), `admin` or `agent`.
    pub role: Option<Role>,
    /// Team a user token acts for.
    pub team: Option<String>,
    /// Label.
    pub name: Option<String>,
}

/// A created token: shown once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenResponse {
    /// The bearer secret.
    pub token: String,
}

/// An agent registering its node.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// Stable node id.
    pub node_id: String,
    /// Host name.
    pub hostname: String,
    /// CPU, milli-cores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub memory_mib: u64,
    /// GPU inventory.
    pub gpus: Vec<GpuInfo>,
}

/// The epoch an agent must send with every heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RegisterResponse {
    /// Registration epoch (fencing token).
    pub epoch: u64,
    /// How often to heartbeat, ms.
    pub heartbeat_interval_ms: u64,
}

/// One job an agent must run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Assignment {
    /// The job.
    pub job_id: JobId,
    /// Its attempt (reports carry it back).
    pub attempt: u32,
    /// argv.
    pub command: Vec<String>,
    /// GPUs to expose (`CUDA_VISIBLE_DEVICES`).
    pub gpu_uuids: Vec<String>,
    /// Slice memory grant, MiB (0 for whole GPUs).
    pub gpu_memory_mib: u64,
    /// Slice compute share, percent (0: not limited).
    pub gpu_compute_pct: u32,
    /// Owning team (the agent maps it to the user the job runs as).
    #[serde(default)]
    pub team: String,
    /// Host memory limit, MiB (0: not limited).
    #[serde(default)]
    pub memory_mib: u64,
    /// CPU limit, milli-cores (0: not limited).
    #[serde(default)]
    pub cpu_milli: u64,
    /// Environment the job declared: names are `[A-Za-z_][A-Za-z0-9_]*` and never `GANTRY_*`,
    /// `CUDA_MPS_*` or `CUDA_VISIBLE_DEVICES` (see `job_env`). The agent adds its own variables
    /// and nothing of its environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Most output kept per stream, bytes (0: the agent's default).
    #[serde(default)]
    pub log_limit_bytes: u64,
}

impl From<Job> for Assignment {
    fn from(job: Job) -> Self {
        Self {
            job_id: job.id,
            attempt: job.attempt,
            command: job.command,
            gpu_uuids: job.gpu_uuids,
            gpu_memory_mib: job.request.gpu_memory_mib,
            gpu_compute_pct: job.request.gpu_compute_pct,
            team: job.team,
            memory_mib: job.request.memory_mib,
            cpu_milli: job.request.cpu_milli,
            env: BTreeMap::new(),
            log_limit_bytes: 0,
        }
    }
}

/// The jobs the node must run now; anything else it runs must stop.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HeartbeatResponse {
    /// Assignments.
    pub assignments: Vec<Assignment>,
}
