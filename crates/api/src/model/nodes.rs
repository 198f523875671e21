//! Nodes, their GPUs and what agents report.

use serde::{Deserialize, Serialize};

use super::{GpuHealth, JobExit, JobId, NodeNetwork, NodeScheduling, NodeState};

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

/// The limits a node holds a job to when the job does not say: the memory and CPU of a job that
/// asks for none (`gantry agent --default-job-memory`, `--default-job-cpu`; by default its GPUs'
/// share of the node) and `pids.max` (`--job-pids-limit`, unless the job's team sets
/// `pids_limit`). In a job's detail: the limits it runs (or ran) under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobLimits {
    /// Memory, MiB (0: not limited); per GPU of the job when `memory_per_gpu`.
    pub memory_mib: u64,
    /// CPU, milli-cores (0: not limited); per GPU of the job when `cpu_per_gpu`.
    pub cpu_milli: u64,
    /// Processes and threads at once (0: not limited).
    pub pids_max: u64,
    /// `memory_mib` is one GPU's share of the node: a job gets it times its GPUs (at least one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub memory_per_gpu: bool,
    /// `cpu_milli` is one GPU's share of the node: a job gets it times its GPUs (at least one),
    /// and never less than [`JobLimits::MIN_SHARE_CPU_MILLI`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cpu_per_gpu: bool,
}

impl JobLimits {
    /// The least CPU a job holding a share of its node gets: one core.
    pub const MIN_SHARE_CPU_MILLI: u64 = 1000;

    /// The limits a job with `gpus` GPUs runs under on a node whose defaults these are: its own
    /// memory and CPU requests where it made them (0: none), else the node's (a GPU's share
    /// times its GPUs, where the node shares), its team's `pids_limit` where the team sets one.
    pub fn for_job(
        &self,
        memory_mib: u64,
        cpu_milli: u64,
        gpus: usize,
        team_pids_limit: Option<u64>,
    ) -> Self {
        let shares = (gpus as u64).max(1);
        let memory =
            if self.memory_per_gpu { self.memory_mib.saturating_mul(shares) } else { self.memory_mib };
        let cpu = if self.cpu_per_gpu && self.cpu_milli > 0 {
            self.cpu_milli.saturating_mul(shares).max(Self::MIN_SHARE_CPU_MILLI)
        } else {
            self.cpu_milli
        };
        Self {
            memory_mib: if memory_mib > 0 { memory_mib } else { memory },
            cpu_milli: if cpu_milli > 0 { cpu_milli } else { cpu },
            pids_max: team_pids_limit.unwrap_or(self.pids_max),
            memory_per_gpu: false,
            cpu_per_gpu: false,
        }
    }
}

/// A node as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Node {
    /// Stable node id.
    pub id: String,
    /// Host name.
    pub hostname: String,
    /// The address it advertises to its peers (`gantry agent --advertise-addr`), which gang
    /// workers get as `MASTER_ADDR`; `None`: its host name.
    #[serde(default)]
    pub advertise_addr: Option<String>,
    /// Whether its jobs get network namespaces of their own (`cni`) or share its (`shared`).
    #[serde(default)]
    pub network: NodeNetwork,
    /// Liveness.
    pub state: NodeState,
    /// Whether it takes new work (cordon, drain).
    #[serde(default)]
    pub scheduling: NodeScheduling,
    /// When a drain stops the node's running jobs (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_at: Option<i64>,
    /// Registration epoch.
    pub epoch: u64,
    /// CPU in milli-cores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub memory_mib: u64,
    /// ms since the epoch.
    pub last_heartbeat: i64,
    /// What it holds a job to that does not say (`None`: an agent that does not tell).
    #[serde(default)]
    pub job_defaults: Option<JobLimits>,
    /// The labels its agent declares (`gantry agent --label pool=inference`); with its facts
    /// (GPU model, count) and pool they select it ([`crate::pools::node_labels`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
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

/// An attempt an agent still has when it registers again (it restarted): running, or ended
/// and not yet reported. The server keeps such attempts instead of requeueing them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AttemptRef {
    /// The job.
    pub job_id: JobId,
    /// The attempt.
    pub attempt: u32,
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
    /// Job output the server has not got yet (agents on other machines than the server).
    #[serde(default)]
    pub logs: Vec<LogChunk>,
}

/// Part of a job's output, shipped by an agent to the server in a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogChunk {
    /// The job.
    pub job_id: JobId,
    /// Its attempt (positions restart at 0 with each attempt).
    pub attempt: u32,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// Position of the first byte in the attempt's whole stream.
    pub offset: u64,
    /// The bytes, base64 (standard alphabet, padded).
    pub data: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_carries_no_time_and_an_older_agents_time_is_ignored() {
        let hb = Heartbeat { node_id: "n1".into(), epoch: 2, gpus: vec![], jobs: vec![], logs: vec![] };
        let json = serde_json::to_value(&hb).expect("json");
        assert!(json.get("at").is_none(), "the server stamps when it heard the heartbeat: {json}");
        let old: Heartbeat =
            serde_json::from_str(r#"{"node_id": "n1", "epoch": 2, "gpus": [], "jobs": [], "at": 0}"#)
                .expect("an agent of before still heartbeats");
        assert_eq!(old, hb);
    }

    #[test]
    fn a_share_of_the_node_scales_with_the_jobs_gpus_and_a_request_wins() {
        let shared = JobLimits {
            memory_mib: 6000,
            cpu_milli: 500,
            pids_max: 4096,
            memory_per_gpu: true,
            cpu_per_gpu: true,
        };
        let cpu_only = shared.for_job(0, 0, 0, None);
        assert_eq!((cpu_only.memory_mib, cpu_only.cpu_milli, cpu_only.pids_max), (6000, 1000, 4096));
        let four = shared.for_job(0, 0, 4, Some(64));
        assert_eq!((four.memory_mib, four.cpu_milli, four.pids_max), (24000, 2000, 64));
        assert!(!four.memory_per_gpu && !four.cpu_per_gpu, "what a job runs under is absolute");
        let asked = shared.for_job(512, 250, 4, None);
        assert_eq!((asked.memory_mib, asked.cpu_milli), (512, 250));
        let fixed = JobLimits { memory_mib: 2048, cpu_milli: 0, pids_max: 0, ..JobLimits::default() };
        let got = fixed.for_job(0, 0, 8, None);
        assert_eq!((got.memory_mib, got.cpu_milli), (2048, 0), "fixed defaults and none stay as they are");
        let json = serde_json::to_value(fixed).expect("json");
        assert!(json.get("memory_per_gpu").is_none(), "older readers see the shape they know: {json}");
    }
}
