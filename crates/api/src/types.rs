//! Request and response bodies of the HTTP API (the OpenAPI document is generated from these).

use std::collections::BTreeMap;

use crate::model::{Attempt, AttemptRef, Gpu, GpuInfo, Job, JobId, Node, Role, TokenKind, Transition};
use serde::{Deserialize, Serialize};

pub use crate::submit::SubmitRequest;

/// The job id of a submission.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubmitResponse {
    /// Id.
    pub id: JobId,
    /// False when the `request_id` had been seen: the job already existed.
    pub created: bool,
}

/// A job with its history.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobDetail {
    /// The job.
    pub job: Job,
    /// Its state changes.
    pub transitions: Vec<Transition>,
    /// Its attempts, oldest first.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// Most output kept per stream (stdout, stderr), bytes; older output is rotated away.
    #[serde(default)]
    pub log_limit_bytes: u64,
    /// A gang's workers by rank, each with its node and GPUs (empty for other jobs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<Job>,
    /// The memory, CPU and process limits it runs (or last ran) under on its node: its requests,
    /// else the node's defaults, and its team's `pids_limit`, else the node's (`None`: never
    /// placed, or on an agent that does not report its defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::model::JobLimits>,
    /// GPUs it lent while idle, or borrows, not yet given back (`gantry team idle … --action
    /// lend`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loans: Vec<crate::idle::Loan>,
    /// GPU time it lost waiting for its input, once its agent judged any of it (none before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<JobStall>,
}

/// A job's data stalls: the GPU time its agents judged and the part of it lost waiting for
/// input (the rule: `gantry_gpu::stall`), every attempt and worker.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobStall {
    /// GPU-hours judged (a whole GPU for an hour is 1; a slice counts its share).
    pub measured_gpu_hours: f64,
    /// GPU-hours of those lost waiting for input.
    pub stalled_gpu_hours: f64,
    /// `stalled_gpu_hours / measured_gpu_hours`, 0–1.
    pub share: f64,
}

impl JobStall {
    /// From the store's milli-GPU-ms; none when nothing was judged.
    pub fn from_milli_ms(measured: i64, stalled: i64) -> Option<Self> {
        let hours = |m: i64| m as f64 / 1000.0 / 3_600_000.0;
        (measured > 0).then(|| JobStall {
            measured_gpu_hours: hours(measured),
            stalled_gpu_hours: hours(stalled),
            share: (stalled as f64 / measured as f64).clamp(0.0, 1.0),
        })
    }
}

/// Which jobs to list.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
pub struct ListQuery {
    /// Only this state.
    pub state: Option<String>,
    /// Only this team.
    pub team: Option<String>,
    /// At most this many, newest first (default 100, at most 1000). The response's
    /// `x-next-before` header, when present, is the `before` of the next page.
    pub limit: Option<u32>,
    /// Only jobs with a smaller id (the next page).
    pub before: Option<i64>,
    /// Only jobs with these labels: `key=value[,key=value…]` (every pair must match).
    pub label: Option<String>,
    /// Only the members of this array.
    pub array: Option<i64>,
}

/// How much to cancel.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
pub struct CancelQuery {
    /// Cancel every unfinished member of the array this job belongs to.
    #[serde(default)]
    pub array: bool,
}

/// Which events.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
pub struct EventQuery {
    /// At most this many, newest first (default 100, at most 10000).
    pub limit: Option<u32>,
    /// Only events with a smaller id (the next page; see `x-next-before`).
    pub before: Option<i64>,
    /// Only events at or after this time, ms since the epoch.
    pub since: Option<i64>,
    /// Only events with a larger id than this (new since the last one seen: `gantry events -w`).
    pub after: Option<i64>,
    /// Only events about this subject: `job/12`, a node id or a GPU UUID.
    pub subject: Option<String>,
}

/// Which log and from where.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
pub struct LogQuery {
    /// `stdout` (default) or `stderr`.
    pub stream: Option<String>,
    /// Byte offset to read from (for following).
    pub offset: Option<u64>,
    /// Which attempt's output (default: the job's latest attempt).
    pub attempt: Option<u32>,
}

/// Part of a GPU held by a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuHolder {
    /// The job.
    pub job_id: JobId,
    /// Compute share, milli-GPU.
    pub share_milli: u32,
    /// GPU memory, MiB.
    pub memory_mib: u64,
}

/// A GPU with who holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuView {
    /// The GPU, its health and latest sample.
    pub gpu: Gpu,
    /// Jobs holding it.
    pub holders: Vec<GpuHolder>,
}

/// A team, its quota and its use.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TeamView {
    /// Name.
    pub name: String,
    /// Quota in whole GPUs (`None`: unlimited).
    pub gpu_quota: Option<u32>,
    /// `pids.max` of each of its jobs (`None`: each node's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<u64>,
    /// Pending jobs.
    pub pending: u64,
    /// Scheduled or running jobs.
    pub active: u64,
    /// Jobs the team may have pending (its own limit or the server's default).
    #[serde(default)]
    pub pending_limit: u64,
    /// Bytes of job output kept for the team now.
    #[serde(default)]
    pub log_bytes: u64,
    /// Bytes of job output the team may keep (its own quota or the server's `--log-quota`).
    #[serde(default)]
    pub log_quota_bytes: u64,
    /// The highest priority its members may submit at (default 100).
    #[serde(default)]
    pub max_priority: i32,
    /// Whether its jobs may preempt other teams' jobs by priority (default false).
    #[serde(default)]
    pub preempt_other_teams: bool,
    /// Services it may have (default 20).
    #[serde(default)]
    pub max_services: u32,
    /// Replicas its services may hold at once (default 100).
    #[serde(default)]
    pub max_replicas: u32,
    /// Bytes of command and environment its pending jobs may store (default 64 MiB).
    #[serde(default)]
    pub pending_bytes_limit: u64,
}

/// A quota change.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QuotaRequest {
    /// Whole GPUs (`null`: unlimited).
    pub gpu_quota: Option<u32>,
    /// Bytes of job output the server keeps for the team (absent: unchanged; a team never set
    /// has the server's `--log-quota`, 10 GiB by default).
    #[serde(default)]
    pub log_quota_bytes: Option<u64>,
    /// Jobs the team may have pending, each array member counting (absent: unchanged; default
    /// 100,000). Past it, submissions get 429.
    #[serde(default)]
    pub pending_limit: Option<u64>,
    /// The highest priority members may submit at (absent: unchanged; default 100); a higher one
    /// gets 422. Admin only.
    #[serde(default)]
    pub max_priority: Option<i32>,
    /// Whether the team's jobs may preempt other teams' jobs by priority (absent: unchanged;
    /// default false: across teams, preemption only reclaims guarantees). Admin only.
    #[serde(default)]
    pub preempt_other_teams: Option<bool>,
    /// Most processes and threads each of the team's jobs may have at once (`pids.max`);
    /// absent: unchanged, `0`: back to each node's default (4,096 unless the node says).
    #[serde(default)]
    pub pids_limit: Option<u64>,
    /// Services the team may have (absent: unchanged; default 20); past it, a new service gets
    /// 429. Admin only.
    #[serde(default)]
    pub max_services: Option<u32>,
    /// Replicas the team's services may hold at once, pending or running (absent: unchanged;
    /// default 100); the controller starts none past it and says so. Admin only.
    #[serde(default)]
    pub max_replicas: Option<u32>,
    /// Bytes of command and environment the team's pending jobs may store, each array member
    /// counting (absent: unchanged; default 64 MiB); past it, submissions get 429. Admin only.
    #[serde(default)]
    pub pending_bytes_limit: Option<u64>,
}

/// A token to create (admin). With role `agent` it is a one-time join token for a node; with
/// any other role it is a user's token, and the user is created (or given the role and team).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// `member` (default; `user` is accepted), `viewer`, `operator`, `admin`, or `agent` for a
    /// join token.
    pub role: Option<Role>,
    /// A team the user belongs to (added to its teams).
    pub team: Option<String>,
    /// The user (default: the team's name).
    pub user: Option<String>,
    /// Label.
    pub name: Option<String>,
    /// Join tokens: the only node that may join with it.
    pub node: Option<String>,
    /// Lifetime in seconds (default 90 days for users, 1 hour for join tokens; at most 400 days).
    pub ttl_seconds: Option<u64>,
    /// An invoke token for this service of `team` (default: the caller's only team): it calls
    /// the service through the gateway and nothing else. Members of the team may create one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

/// A created token: the secret is shown once.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenResponse {
    /// The bearer secret.
    pub token: String,
    /// Its id (for `gantry token revoke`).
    #[serde(default)]
    pub id: i64,
    /// What it is.
    #[serde(default = "api_kind")]
    pub kind: TokenKind,
    /// When it stops working, ms since the epoch.
    #[serde(default)]
    pub expires_at: Option<i64>,
}

/// A one-time dashboard sign-in code (`POST /v1/signin-codes`): put it in the page's fragment,
/// `https://HOST:PORT/#signin=CODE`; the page trades it once for a session token.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignInCode {
    /// The code (single use).
    pub code: String,
    /// When it stops working unused, ms since the epoch.
    pub expires_at: i64,
}

/// Trading a sign-in code for a session token (`POST /v1/signin`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SignInRequest {
    /// The code `gantry dashboard` printed in the link.
    pub code: String,
}

fn api_kind() -> TokenKind {
    TokenKind::Api
}

/// A user's role and teams (admin).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UserRequest {
    /// `admin`, `operator`, `member` or `viewer`.
    pub role: Role,
    /// Teams (replaces the user's list).
    #[serde(default)]
    pub teams: Vec<String>,
}

/// The caller, as the server sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhoAmI {
    /// The token's id.
    pub token_id: i64,
    /// What the token is.
    pub kind: TokenKind,
    /// The user, for user tokens.
    pub user: Option<String>,
    /// The role.
    pub role: Role,
    /// The user's teams.
    pub teams: Vec<String>,
    /// The node, for node credentials.
    pub node: Option<String>,
    /// When the token stops working, ms since the epoch.
    pub expires_at: Option<i64>,
}

/// Which audit rows.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
pub struct AuditQuery {
    /// Only rows with a larger id (the next page).
    pub after: Option<i64>,
    /// Only rows at or after this time, ms since the epoch.
    pub since: Option<i64>,
    /// At most this many (default 1000, at most 10000).
    pub limit: Option<u32>,
}

/// The result of checking the audit log's hash chain.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditVerification {
    /// Whether every row is intact and in order.
    pub ok: bool,
    /// Rows checked.
    pub rows: u64,
    /// The last row's id.
    pub head_id: i64,
    /// The last row's hash (keep a copy elsewhere to detect a rewritten chain).
    pub head_hash: String,
    /// Where the chain breaks.
    pub error: Option<String>,
}

/// An agent joining with a join token.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JoinRequest {
    /// The node's id.
    pub node_id: String,
}

/// An agent with news (a job of its node ended) asking the server to answer its held
/// heartbeat now, so that it reports at once rather than after the hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WakeRequest {
    /// The node's id.
    pub node_id: String,
}

/// A node's credentials, shown once: keep them private.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JoinResponse {
    /// The node.
    pub node_id: String,
    /// The node's bearer credential (register and heartbeat for this node only).
    pub credential: String,
    /// The cluster CA (PEM), when the server speaks TLS.
    pub ca_pem: Option<String>,
    /// A client certificate for mutual TLS (PEM), CN = the node id.
    pub client_cert_pem: Option<String>,
    /// Its private key (PEM).
    pub client_key_pem: Option<String>,
}

/// An agent registering its node: what the agent knows of it (the server adds when it heard it,
/// in the store's `NodeRegistration`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// Stable node id.
    pub node_id: String,
    /// Host name.
    pub hostname: String,
    /// The address its peers reach it at, when not its host name (`gantry agent
    /// --advertise-addr`): a host name or an IP address ([`address_problem`]); gang workers get
    /// it as `MASTER_ADDR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise_addr: Option<String>,
    /// Whether its jobs get network namespaces of their own (`cni`) or share the node's
    /// (`shared`, also what an agent that does not say reports).
    #[serde(default)]
    pub network: crate::model::NodeNetwork,
    /// CPU, milli-cores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub memory_mib: u64,
    /// GPU inventory.
    pub gpus: Vec<GpuInfo>,
    /// What the node holds a job to that does not say (its default memory and CPU, `pids.max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_defaults: Option<crate::model::JobLimits>,
    /// Labels the node declares (`gantry agent --label pool=inference`; a `pool` label puts it
    /// in that pool); 422 for a bad one or a fact label (`gpu.model`, `gpu.count`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The attempts the agent still has from before (it restarted while they ran): the server
    /// keeps those placed on this node; every other attempt of an older epoch was lost.
    #[serde(default)]
    pub attempts: Vec<AttemptRef>,
}

/// Why `addr` is not an address a node's peers can reach it at — a host name (RFC 1123 labels
/// of letters, digits and `-`, not all digits at the end) or an IP address — or `None` when it
/// is one.
pub fn address_problem(addr: &str) -> Option<&'static str> {
    if addr.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    let name = addr.strip_suffix('.').unwrap_or(addr);
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    let numeric_end = name.rsplit('.').next().is_some_and(|l| l.chars().all(|c| c.is_ascii_digit()));
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label) || numeric_end {
        return Some("must be a host name (letters, digits, '-' and '.') or an IP address");
    }
    None
}

/// The epoch an agent must send with every heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RegisterResponse {
    /// Registration epoch (fencing token).
    pub epoch: u64,
    /// How often to heartbeat, ms.
    pub heartbeat_interval_ms: u64,
}

/// One job an agent must run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The user who submitted it: its `$HOME` is that user's persistent home in the team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Host memory limit, MiB (0: not limited).
    #[serde(default)]
    pub memory_mib: u64,
    /// CPU limit, milli-cores (0: not limited).
    #[serde(default)]
    pub cpu_milli: u64,
    /// Most processes and threads at once, the team's `pids_limit` (none: the node's default).
    #[serde(default)]
    pub pids_limit: Option<u64>,
    /// Environment the job declared: names are `[A-Za-z_][A-Za-z0-9_]*` and never `GANTRY_*`,
    /// `CUDA_MPS_*` or `CUDA_VISIBLE_DEVICES` (see `job_env`). The agent adds its own variables
    /// and nothing of its environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Most output kept per stream, bytes (0: the agent's default).
    #[serde(default)]
    pub log_limit_bytes: u64,
    /// Longest the run may take, seconds (none: no limit).
    #[serde(default)]
    pub time_limit_s: Option<u64>,
    /// Its place in a job array (`GANTRY_ARRAY_ID`, `GANTRY_ARRAY_INDEX`).
    #[serde(default)]
    pub array: Option<crate::workflow::ArrayMember>,
    /// Where it starts, relative to its private directory (checked by
    /// [`crate::workflow::check_workdir`]; the agent creates it).
    #[serde(default)]
    pub workdir: Option<String>,
    /// The worker's place in its gang: the agent sets `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
    /// `MASTER_ADDR` and `MASTER_PORT` from it. None for a job of one worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<crate::model::Gang>,
    /// An elastic job (a GPU range): the agent sets `WORLD_SIZE` to its width, the number of
    /// `gpu_uuids` of this attempt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub elastic: bool,
    /// A service replica's port (`$PORT`): the agent publishes it on the node when the job has
    /// a network namespace of its own, so that the gateway reaches `NODE:PORT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The working directory to materialise before the start: the agent fetches its manifest
    /// (`GET /v1/agent/jobs/{id}/upload`) and files and checks both against this digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<crate::upload::Upload>,
    /// Start in this absolute path on the node instead of the private directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chdir: Option<String>,
    /// Its declared inputs: the agent starts it once each is in the node's cache, with
    /// `GANTRY_INPUT_<NAME>` naming it (staged before the start when it is not yet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<crate::inputs::Input>,
    /// Its declared outputs (names and URLs): the agent makes each an empty directory private
    /// to the job's user (`GANTRY_OUTPUT_<NAME>`) and uploads it when the attempt ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<crate::outputs::Output>,
    /// What launchers read besides the rendezvous: the job's name and, for a gang's worker,
    /// its node's place among the gang's nodes.
    #[serde(default)]
    pub launch: Launch,
    /// The container image it runs in (none: a process on the node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<crate::model::JobImage>,
    /// The volumes it mounts, as the node finds them (filled in by the server).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::volumes::AssignedVolume>,
}

/// The launch facts of an assignment that the job's row alone does not give the agent (see
/// [`Assignment::launch`]): `SLURM_JOB_NAME`, `SLURM_NODEID`, `SLURM_JOB_NUM_NODES`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Launch {
    /// The job's name (a gang worker's: the gang's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// A gang worker's node among the gang's nodes, in the order of their first worker's rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_rank: Option<u32>,
    /// How many nodes the gang's workers are on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
}

impl From<Job> for Assignment {
    fn from(job: Job) -> Self {
        let port = job.service.as_ref().and_then(|_| job.env.get("PORT")).and_then(|p| p.parse().ok());
        Self {
            job_id: job.id,
            attempt: job.attempt,
            command: job.command,
            gpu_uuids: job.gpu_uuids,
            gpu_memory_mib: job.request.gpu_memory_mib,
            gpu_compute_pct: job.request.gpu_compute_pct,
            team: job.team,
            user: job.user,
            memory_mib: job.request.memory_mib,
            cpu_milli: job.request.cpu_milli,
            pids_limit: None,
            env: job.env,
            log_limit_bytes: 0,
            time_limit_s: job.time_limit_s,
            array: job.array,
            workdir: job.workdir,
            gang: job.gang,
            elastic: job.request.is_elastic(),
            port,
            upload: job.upload,
            chdir: job.chdir,
            inputs: job.inputs,
            outputs: job.outputs.iter().map(crate::outputs::Output::declared).collect(),
            launch: Launch { name: job.name, node_rank: None, nodes: None },
            image: job.image,
            volumes: Vec::new(),
        }
    }
}

/// A node's word for the digest a job's image resolved to (`POST /v1/agent/jobs/{id}/image`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResolvedImage {
    /// The attempt that pulled it.
    pub attempt: u32,
    /// The manifest digest, `sha256:…`.
    pub digest: String,
}

/// The registry login of a job's image, for the node that pulls it
/// (`GET /v1/agent/jobs/{id}/registry-credentials`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegistryCredentials {
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl RegistryCredentials {
    /// The login a team secret holds: its `username` and `password`, both non-empty (`gantry
    /// secret set NAME username=… password=…`); `None` for a secret without them.
    pub fn from_secret(values: &BTreeMap<String, String>) -> Option<Self> {
        let get = |k: &str| values.get(k).filter(|v| !v.is_empty()).cloned();
        Some(Self { username: get("username")?, password: get("password")? })
    }
}

impl std::fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryCredentials").field("username", &self.username).finish_non_exhaustive()
    }
}

/// An agent's report of its staging and cache (`POST /v1/agent/staging`, every second or so).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StagingRequest {
    /// The node.
    pub node_id: String,
    /// The epoch the agent registered under.
    pub epoch: u64,
    /// How each staging it was ordered stands.
    #[serde(default)]
    pub reports: Vec<crate::inputs::StageReport>,
    /// What its cache holds.
    #[serde(default)]
    pub cache: Vec<crate::inputs::CacheEntry>,
    /// The container images it holds.
    #[serde(default)]
    pub images: Vec<NodeImage>,
}

/// A container image a node holds (`gantry images`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeImage {
    /// The node (set by the server).
    #[serde(default)]
    pub node: String,
    /// The reference it was pulled by, pinned (`registry/repo:tag@sha256:…`).
    #[serde(rename = "ref")]
    pub reference: String,
    /// Its manifest digest.
    pub digest: String,
    /// Bytes of its unpacked layers on the node (layers another image shares counted in each).
    #[serde(rename = "size")]
    pub bytes: u64,
    /// When a job last used it, ms since the Unix epoch.
    pub last_used: i64,
    /// Attempts running in it now.
    pub in_use: u32,
    /// The jobs whose attempts run in it now.
    #[serde(default)]
    pub jobs: Vec<i64>,
    /// The teams whose jobs pulled it.
    #[serde(default)]
    pub teams: Vec<String>,
}

/// What the node must stage now: the pending jobs the scheduler chose it for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StagingResponse {
    /// The orders; a staging not listed any more may be given up.
    pub orders: Vec<crate::inputs::StageOrder>,
}

/// The jobs the node must run now; anything else it runs must stop.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatResponse {
    /// Assignments.
    pub assignments: Vec<Assignment>,
    /// A digest of `assignments`, sent back as [`HeartbeatWait::known`]: set by a server that
    /// holds heartbeats (absent from older servers' answers, whose agents poll).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// How long the server may hold a heartbeat (`POST /v1/agent/heartbeat?wait_ms=…&known=…`):
/// when the node's assignments are still the ones whose [`HeartbeatResponse::version`] is
/// `known`, the answer waits until they change or `wait_ms` pass (at most the heartbeat
/// interval). Without it, or from an older server, the answer comes at once.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
pub struct HeartbeatWait {
    /// Longest hold the agent accepts, ms (0 or absent: answer at once).
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// The version of the assignments the agent last applied.
    #[serde(default)]
    pub known: Option<String>,
}

/// Which usage to report.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
pub struct UsageQuery {
    /// Start of the period, ms since the epoch (default: 7 days ago).
    pub since: Option<i64>,
    /// End of the period, ms since the epoch (default: now).
    pub until: Option<i64>,
    /// `team` (default) or `user`.
    pub by: Option<String>,
}

/// A node with its GPU counts (no job names: every user may see them, like `sinfo`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeView {
    /// The node.
    #[serde(flatten)]
    pub node: Node,
    /// GPU model (the first GPU's; nodes hold one model).
    pub gpu_model: Option<String>,
    /// GPUs.
    pub gpus: u32,
    /// GPUs that are healthy and hold no allocation, not even a slice.
    pub gpus_free: u32,
    /// GPUs that are not healthy.
    pub gpus_unhealthy: u32,
}

/// Apply a job file (`POST /v1/jobs/apply`): the job's `name` is its identity in its team.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ApplyRequest {
    /// The job the file declares; `name` and `request_id` (the file's digest) are required.
    pub job: SubmitRequest,
    /// Cancel a started job and submit the file anew instead of refusing (`--replace`).
    #[serde(default)]
    pub replace: bool,
}

/// What applying did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApplyResponse {
    /// The job (or array) id the file stands for now.
    pub id: JobId,
    /// `created`, `unchanged`, `configured` (updated in place) or `replaced`.
    pub action: String,
    /// The job it replaced, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<JobId>,
}

/// Cordon, uncordon or drain a node (`PUT /v1/nodes/{id}/scheduling`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NodeSchedulingRequest {
    /// `schedulable` (uncordon), `cordoned` or `draining`.
    pub scheduling: crate::model::NodeScheduling,
    /// For a drain: seconds its running jobs keep running before they are stopped and requeued
    /// (default 0: at once; at most 7 days).
    #[serde(default)]
    pub grace_s: Option<u64>,
}

/// A job as a finding names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRef {
    /// Id.
    pub id: JobId,
    /// Name.
    pub name: String,
    /// Team.
    pub team: String,
}

/// Something worth a look on one GPU: a finding of the GPU layer (`idle_allocated`,
/// `memory_near_limit`, `thermal_throttle`, `power_throttle`, `input_starved`) or a GPU that is
/// not healthy (`gpu_health`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FindingView {
    /// Node.
    pub node_id: String,
    /// GPU.
    pub gpu_uuid: String,
    /// GPU index on the node.
    pub gpu_index: u32,
    /// What.
    pub kind: String,
    /// The numbers behind it, in words.
    pub detail: String,
    /// Jobs holding the GPU that the caller may see.
    pub jobs: Vec<JobRef>,
}

/// A team's queue: its guarantee, what it uses, what it borrows, and its fair-share usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueView {
    /// Team.
    pub team: String,
    /// GPUs guaranteed (the team's `gpu_quota`; 0 when none is set).
    pub guaranteed_gpus: u32,
    /// GPUs held by the team's scheduled and running jobs (slices count their share).
    pub used_gpus: f64,
    /// GPUs used beyond the guarantee: borrowed, and reclaimed when their owners need them.
    pub borrowed_gpus: f64,
    /// Most GPUs the team may hold: its guarantee plus the cluster's borrowing limit.
    pub max_gpus: u32,
    /// GPUs in the cluster.
    pub cluster_gpus: u32,
    /// Decayed GPU-hours as of the last scheduling pass (what fair share orders by).
    pub decayed_gpu_hours: f64,
    /// Pending jobs.
    pub pending: u64,
    /// Scheduled or running jobs.
    pub active: u64,
}
