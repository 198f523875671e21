//! Jobs: what is asked, what is stored, how they end.

use serde::{Deserialize, Serialize};

use super::{JobId, JobState};

/// What a job asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRequest {
    /// Whole GPUs (0 for a slice or a CPU-only job); an elastic job's minimum (its width while
    /// it runs is the number of its `gpu_uuids`).
    pub gpus: u32,
    /// An elastic job's most GPUs (`--gpus 2..8`: `gpus` 2, `gpus_max` 8); none for a rigid job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_max: Option<u32>,
    /// GPU memory of a slice of one GPU, MiB (0 when whole GPUs are asked for).
    pub gpu_memory_mib: u64,
    /// Compute share of the slice in percent (0: not limited).
    pub gpu_compute_pct: u32,
    /// CPU in milli-cores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub memory_mib: u64,
}

impl JobRequest {
    /// Whether the job is elastic (a GPU range).
    pub fn is_elastic(&self) -> bool {
        self.gpus_max.is_some()
    }

    /// The GPU count or range asked for.
    pub fn gpu_range(&self) -> crate::elastic::GpuRange {
        crate::elastic::GpuRange { min: self.gpus, max: self.gpus_max }
    }
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
    /// Declared environment variables.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
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
    /// Longest a run may take, seconds; the agent stops it then (state `timeout`).
    #[serde(default)]
    pub time_limit_s: Option<u64>,
    /// The user who submitted it (`None` for jobs from before users existed).
    #[serde(default)]
    pub user: Option<String>,
    /// Its place in a job array (`None`: not in one).
    #[serde(default)]
    pub array: Option<crate::workflow::ArrayMember>,
    /// Jobs it waits for.
    #[serde(default)]
    pub after: Vec<crate::workflow::Dependency>,
    /// Labels (`jobs -l k=v` selects by them).
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Acceptable GPU models (empty: any). A name matches a model it equals or starts a word
    /// of, ignoring case: `A100` matches `A100-80GB` and `NVIDIA A100-SXM4-80GB`.
    #[serde(default)]
    pub gpu_models: Vec<String>,
    /// The nodes it may use: its pool as `pool=NAME` (none: pool `default`) and label pairs
    /// every node must match (`--pool`, `--node-selector`; see [`crate::pools`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub node_selector: std::collections::BTreeMap<String, String>,
    /// Where the job starts, relative to its private directory (`None`: that directory).
    #[serde(default)]
    pub workdir: Option<String>,
    /// Its place in a gang: on the gang itself (`rank` none) and on each of its workers.
    /// `None` for a job of one worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<Gang>,
    /// The service this job is a replica of (a job of kind `service`: restarted by the service
    /// controller when it ends, never `succeeded`); `None` for a batch job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The working directory uploaded with it: the job starts in a private copy (`None`: in an
    /// empty private directory, or in `chdir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<crate::upload::Upload>,
    /// An absolute path on the node it starts in instead (Slurm's `--chdir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chdir: Option<String>,
    /// Its declared inputs, staged onto its node before it starts, with what staging found
    /// (see [`crate::inputs`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<crate::inputs::Input>,
    /// The team secret its S3 inputs are read with (`--input-secret`; none: the agent's
    /// environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_secret: Option<String>,
    /// Its declared outputs, uploaded when an attempt ends, with where each upload stands
    /// (see [`crate::outputs`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<crate::outputs::Output>,
    /// The team secret its outputs are uploaded with (`--output-secret`; none: its
    /// `input_secret`, else the agent's environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_secret: Option<String>,
    /// The container image it runs in (`--image`; none: a process on the node's own root file
    /// system).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<JobImage>,
    /// The volumes it mounts (`--volume NAME:/mnt/x[:ro]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::volumes::VolumeMount>,
}

/// A job's container image: the reference it was submitted with and, once resolved, the
/// manifest digest every attempt runs (`{"ref": "…", "digest": "sha256:…"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobImage {
    /// The reference as given (`registry/repo:tag`, Docker Hub short names allowed).
    #[serde(rename = "ref")]
    pub reference: String,
    /// The manifest digest (`sha256:…`): pinned in the reference, else none until resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The team secret (`username`, `password`) the registry is logged in to with
    /// (`--registry-secret`; none: anonymous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// The executable that replaces the image's `Entrypoint` (`--entrypoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    /// The directory the container starts in (`--container-workdir`; none: the job's uploaded
    /// directory when it has one, else the image's `WorkingDir`, else its own directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
}

impl Default for Job {
    /// A pending job of no team that asks for nothing and runs nothing, never placed: tests and
    /// tools name the fields they care about (`Job { id, team, ..Job::default() }`) instead of
    /// writing out all of them.
    fn default() -> Self {
        Self {
            id: 0,
            team: String::new(),
            name: String::new(),
            priority: 0,
            command: Vec::new(),
            env: Default::default(),
            request: JobRequest::default(),
            state: JobState::Pending,
            attempt: 0,
            max_retries: 0,
            stop: None,
            node_id: None,
            epoch: None,
            gpu_uuids: Vec::new(),
            exit_code: None,
            reason: None,
            submitted_at: 0,
            started_at: None,
            finished_at: None,
            time_limit_s: None,
            user: None,
            array: None,
            after: Vec::new(),
            labels: Default::default(),
            gpu_models: Vec::new(),
            node_selector: Default::default(),
            workdir: None,
            gang: None,
            service: None,
            upload: None,
            chdir: None,
            inputs: Vec::new(),
            input_secret: None,
            outputs: Vec::new(),
            output_secret: None,
            image: None,
            volumes: Vec::new(),
        }
    }
}

/// A gang (`--replicas N`) or one of its workers. The gang is the job users submit, read and
/// cancel; each worker is a job of its own, placed on one node and run by that node's agent
/// with the rendezvous variables a PyTorch job expects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Gang {
    /// The gang's job id (a worker's parent; the gang's own id on the gang).
    pub id: JobId,
    /// Workers in the gang (`WORLD_SIZE`).
    pub replicas: u32,
    /// This worker's rank, 0..replicas (`RANK`); none on the gang itself.
    pub rank: Option<u32>,
    /// Rank among the gang's workers on the same node (`LOCAL_RANK`), once placed.
    pub local_rank: Option<u32>,
    /// Address of rank 0's node (`MASTER_ADDR`), once placed.
    pub master_addr: Option<String>,
    /// Rendezvous port chosen for the gang (`MASTER_PORT`), once placed.
    pub master_port: Option<u16>,
}

impl Gang {
    /// Whether this is a worker (not the gang itself).
    pub fn is_worker(&self) -> bool {
        self.rank.is_some()
    }
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
    /// The attempt it belongs to (none before the first placement).
    #[serde(default)]
    pub attempt: Option<u32>,
}

/// One attempt of a job: where it ran, when, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt {
    /// 1 for the first placement, and so on.
    pub attempt: u32,
    /// The node it was placed on.
    pub node_id: String,
    /// Its GPUs.
    pub gpu_uuids: Vec<String>,
    /// When it was placed, ms since the epoch.
    pub placed_at: i64,
    /// When its agent reported it running.
    pub started_at: Option<i64>,
    /// When it ended.
    pub finished_at: Option<i64>,
    /// The job's state when it ended (`pending`: requeued); none while it runs.
    pub outcome: Option<JobState>,
    /// Its exit status, when its process exited.
    pub exit_code: Option<i32>,
    /// Why it ended so.
    pub reason: Option<String>,
}

/// How an agent says a job ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobExit {
    /// Exit status (`None` when killed by a signal or never started).
    pub exit_code: Option<i32>,
    /// Why, when not a plain exit (e.g. `killed by signal 9`, `spawn failed: …`).
    pub reason: Option<String>,
    /// The agent stopped it because its time limit ran out.
    #[serde(default)]
    pub timed_out: bool,
}

/// GPU time allocated to a team (or one of its users) over a period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    /// The team.
    pub team: String,
    /// The user who submitted the jobs (`None`: by team, or jobs from before users existed).
    pub user: Option<String>,
    /// GPU-hours allocated (a whole GPU for an hour is 1; a slice counts its share).
    pub gpu_hours: f64,
    /// GPU-hours actually used: each GPU's NVML utilisation over the time it was allocated,
    /// times the allocation's share (a whole GPU busy 50 % for an hour is 0.5). Counted by the
    /// hour: a period's edges round to whole hours for this figure.
    #[serde(default)]
    pub used_gpu_hours: f64,
    /// Allocated but idle: `gpu_hours - used_gpu_hours`, never below 0.
    #[serde(default)]
    pub waste_gpu_hours: f64,
    /// GPU-hours lost to data stalls: the idle part of the GPU time during which the job was
    /// reading or CPU-saturated (see `gantry_gpu::stall`), times the allocation's share. Counted
    /// by the hour like `used_gpu_hours`; 0 where the agents could not judge.
    #[serde(default)]
    pub stalled_gpu_hours: f64,
    /// Jobs that held GPUs in the period.
    pub jobs: u64,
}
