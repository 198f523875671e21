//! Staging a pending job's declared inputs before it holds GPUs (issue 22).
//!
//! A job that reads a 500 GB dataset used to copy it after it started, with its GPUs held and
//! idle for the whole copy. Slurm's burst buffers stage data in while a job is still pending,
//! once it has an expected start; Fluid warms a cache near the pods that will read it. Here the
//! pass does the same in one more step between *who* and *where*: for a job with inputs
//! (`Job::inputs`) that the queue starts, the placement the pass finds is not carried out but
//! turned into a [`Stage`] decision: the node's agent copies the inputs into its node-local
//! cache while the job stays pending, and the GPUs the placement would have taken stay free for
//! others (the pass keeps them on its own ledger only, so nothing later in the same pass takes
//! them). The caller remembers the decision and feeds each job's staging back in
//! ([`Snapshot::staging`]), and the next passes read it:
//!
//! - staging on a node that is still there and not done: the job waits, with the agent's
//!   progress as its reason (`staging 12.4 of 50.0 GiB, 830 MiB/s on n1`), or its failure
//!   (the agent retries with back-off; the job is never lost);
//! - done: the job is placed on that node only, when it has room (else it waits for room
//!   there: the data is there, the copy is not repeated elsewhere);
//! - staging on a node that left (or was never recorded): the job is placed as any other, and
//!   that placement becomes a new [`Stage`].
//!
//! Gangs and their workers are not staged ahead: each worker stages its inputs when it starts
//! (the agent's fallback, GPUs held, as a job without a stage step would).

use gantry_api::model::{Job, JobId};

use super::layout::Layout;
use super::snapshot::Snapshot;
use crate::NodeId;

/// Stage a pending job's inputs on a node, without allocating its GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// The job.
    pub job_id: JobId,
    /// The node whose agent stages them.
    pub node_id: String,
    /// ms since the epoch.
    pub at: i64,
    /// Ordered for a job the queue keeps waiting: its copy runs behind its queue wait (see
    /// `super::locality`); otherwise the queue started it and it waits for the copy.
    pub ahead: bool,
}

/// How a job's staging stands, as the caller keeps it between passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staging {
    /// The node a [`Stage`] decision chose.
    pub node: String,
    /// Every input is in that node's cache.
    pub done: bool,
    /// The agent's progress or failure, in words (empty before its first report).
    pub reason: String,
}

/// What the pass does with a job the queue starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// No inputs to stage: place it as usual.
    Place,
    /// Place it, and turn the placement into a [`Stage`].
    Stage,
    /// Its inputs are being staged: it waits, for this reason.
    Wait(String),
    /// Its inputs are staged on this node: place it there only.
    Only(NodeId),
}

/// The step for `job` (see the module documentation).
pub(super) fn step(job: &Job, s: &Snapshot, layout: &Layout<'_>) -> Step {
    if job.inputs.is_empty() || job.gang.is_some() {
        return Step::Place;
    }
    let Some(st) = s.staging.get(&job.id) else { return Step::Stage };
    let Some(&node) = layout.index.get(st.node.as_str()) else { return Step::Stage };
    match (st.done, st.reason.is_empty()) {
        (true, _) => Step::Only(node),
        (false, true) => Step::Wait(format!("staging its inputs on {}", st.node)),
        (false, false) => Step::Wait(st.reason.clone()),
    }
}

/// Why a job whose inputs are staged on `node` waits when that node has no room.
pub(super) fn no_room(node: &str) -> String {
    format!("waiting for room on {node}, where its inputs are staged")
}

/// Why a job the queue started waits for a node without room that holds its inputs.
pub(super) fn waits_for(node: &str) -> String {
    format!("waiting for room on {node}, which holds its inputs")
}
