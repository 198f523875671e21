//! What a pass looks at: the nodes, GPUs, held allocations, pending and active jobs and teams
//! (the store's rows, as the wire types carry them), plus what the loop remembers between
//! passes ([`QueueInput`]) and the states of the jobs pending jobs depend on.

use std::collections::HashMap;

use gantry_api::model::{Gpu, Job, JobId, JobState, Team};

use crate::queue::{QueueWeights, Usage};

/// A held allocation: one GPU (or slice of one) a scheduled or running job holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Monotonic id (the order allocations were made in).
    pub id: i64,
    /// The job.
    pub job_id: JobId,
    /// The GPU.
    pub gpu_uuid: String,
    /// Compute share, milli-GPU.
    pub share_milli: u32,
    /// GPU memory, MiB.
    pub memory_mib: u64,
}

/// What a pass looks at.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Nodes.
    pub nodes: Vec<gantry_api::model::Node>,
    /// GPUs.
    pub gpus: Vec<Gpu>,
    /// Held allocations.
    pub held: Vec<Held>,
    /// Pending jobs.
    pub pending: Vec<Job>,
    /// Scheduled and running jobs.
    pub active: Vec<Job>,
    /// Quotas.
    pub teams: Vec<Team>,
    /// Node pools an admin set (placement, teams); see `pools`.
    pub pools: Vec<gantry_api::pools::Pool>,
    /// Now, ms.
    pub at: i64,
    /// The queue's weights and the fair-share memory the loop keeps between passes.
    pub queue: QueueInput,
    /// The states of every job a pending job depends on (every member's, for an array's id); a
    /// missing entry is a job that does not exist.
    pub deps: HashMap<JobId, Vec<JobState>>,
    /// The service (`team/name`) each job that is a service's replica belongs to; jobs not in
    /// it are not replicas. Read through [`Snapshot::service`].
    pub services: HashMap<JobId, String>,
    /// Where each pending job with declared inputs is being staged, and how far (the caller
    /// keeps the pass's `Stage` decisions and the agents' reports; see `super::stage`).
    pub staging: HashMap<JobId, super::stage::Staging>,
    /// The nodes' cached datasets and the stage bandwidth (see `super::locality`).
    pub locality: super::locality::Locality,
    /// GPUs idle jobs lent, with their borrowers (see `super::lend`).
    pub loans: Vec<gantry_api::idle::Loan>,
}

/// The queue's state that outlives a pass.
#[derive(Debug, Clone)]
pub struct QueueInput {
    /// Tunables (defaults as in the simulator).
    pub weights: QueueWeights,
    /// Decayed GPU-seconds per team, indexed like `teams`.
    pub usage: Usage,
    /// Team names in `usage`'s index order.
    pub teams: Vec<String>,
    /// Least time between two resizes of an elastic job, ms (`--resize-interval`).
    pub resize_gap_ms: i64,
    /// The width each resized elastic job's resize named, until it is placed again: its next
    /// placement is widened to it (see `super::elastic`).
    pub widths: HashMap<i64, u32>,
    /// For each job asked to stop by a preemption, the job it was preempted for: what it frees
    /// is that job's, not anyone's (see `super::victims`).
    pub preempted_for: HashMap<i64, i64>,
    /// Jobs that checkpoint and yield their GPUs to any job the queue ranks above them, with
    /// the GPU-seconds of service each received: the queue ranks them by attained-service band
    /// (least attained service first, as Tiresias does) and such a job may be stopped for a
    /// job ranked above it whatever their priorities and teams (see `super::victims`). Jobs not
    /// here are in band 0 and stopped only by priority within a team or a guarantee reclaim.
    /// The server's jobs do not say they checkpoint, so it leaves this empty; the job
    /// simulator's jobs all do.
    pub checkpointing: HashMap<i64, f64>,
}

impl Default for QueueInput {
    fn default() -> Self {
        // The server holds GPUs free for a blocked gang, so small jobs cannot starve it.
        let weights = QueueWeights { gang_reservation: true, ..QueueWeights::default() };
        Self {
            weights,
            usage: Usage::default(),
            teams: Vec::new(),
            resize_gap_ms: 300_000,
            widths: HashMap::new(),
            preempted_for: HashMap::new(),
            checkpointing: HashMap::new(),
        }
    }
}

impl Snapshot {
    /// The service (`team/name`) job `id` is a replica of, if it is one.
    pub fn service(&self, id: JobId) -> Option<&str> {
        self.services.get(&id).map(String::as_str)
    }

    /// A gang's workers (pending ones, by rank).
    pub(super) fn gang_workers(&self, gang: i64) -> Vec<&Job> {
        let mut workers: Vec<&Job> = self
            .pending
            .iter()
            .filter(|j| j.gang.as_ref().is_some_and(|g| g.is_worker() && g.id == gang))
            .collect();
        workers.sort_by_key(|j| j.gang.as_ref().and_then(|g| g.rank));
        workers
    }
}
