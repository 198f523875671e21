//! Nodes, their GPUs and what agents report.

use serde::{Deserialize, Serialize};

use super::{AttemptRef, GpuInfo, JobLimits, NodeNetwork};

/// A node registering (or registering again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRegistration {
    /// Stable node id.
    pub node_id: String,
    /// Host name.
    pub hostname: String,
    /// The address its peers reach it at, given to gang workers as `MASTER_ADDR` (`None`: the
    /// host name).
    #[serde(default)]
    pub advertise_addr: Option<String>,
    /// Whether its jobs get network namespaces of their own.
    #[serde(default)]
    pub network: NodeNetwork,
    /// CPU in milli-cores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub memory_mib: u64,
    /// The GPUs.
    pub gpus: Vec<GpuInfo>,
    /// What the node holds a job to that does not say.
    #[serde(default)]
    pub job_defaults: Option<JobLimits>,
    /// Attempts the agent still has from before it restarted (kept, not requeued).
    #[serde(default)]
    pub attempts: Vec<AttemptRef>,
    /// ms since the epoch.
    pub at: i64,
}
