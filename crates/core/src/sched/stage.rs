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
//! A gang (`replicas` > 1) is staged the same way on every node its workers would go to
//! ([`gang_step`]): the pass places the whole gang on its own ledger, and instead of carrying
//! the placement out it decides one [`Stage`] per node, named by the first of the gang's workers
//! placed there (the agent copies once per node; the other workers there find the copy cached).
//! The gang waits until every node's staging is done, then its workers are placed on those
//! nodes only, as many on each as it has room for. A staging on a node that left is passed
//! over; when the nodes that remain cannot hold the whole gang even empty, it is staged again
//! on a new placement (nodes already holding its inputs find them cached).

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

/// Whether a job has something to stage before it holds GPUs: declared inputs, or a container
/// image to pull (issue 40).
pub(super) fn needs_staging(job: &Job) -> bool {
    !job.inputs.is_empty() || job.image.is_some()
}

/// Why a job being staged on `nodes` waits: for its inputs, or (with none) for its image.
pub(super) fn staging_on(job: &Job, nodes: &str) -> String {
    if job.inputs.is_empty() && job.image.is_some() {
        format!("pulling its image on {nodes}")
    } else {
        format!("staging its inputs on {nodes}")
    }
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
    if !needs_staging(job) || job.gang.is_some() {
        // A gang is staged as a whole (`gang_step`); its workers are never placed one by one.
        return Step::Place;
    }
    let Some(st) = s.staging.get(&job.id) else { return Step::Stage };
    let Some(&node) = layout.index.get(st.node.as_str()) else { return Step::Stage };
    match (st.done, st.reason.is_empty()) {
        (true, _) => Step::Only(node),
        (false, true) => Step::Wait(staging_on(job, &st.node)),
        (false, false) => Step::Wait(st.reason.clone()),
    }
}

/// Why a job whose inputs are staged on `node` waits when that node has no room.
pub(super) fn no_room(node: &str) -> String {
    format!("waiting for room on {node}, where its inputs are staged")
}

/// What the pass does with a gang the queue starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GangStep {
    /// No inputs to stage: place it as usual.
    Place,
    /// Place it, and turn the placement into one [`Stage`] per node.
    Stage,
    /// Its inputs are being staged on some of its nodes: it waits, for this reason.
    Wait(String),
    /// Its inputs are staged on these nodes: its workers go there only.
    Only(Vec<NodeId>),
}

/// The step for the gang `gang` of `workers` (by rank), `per` GPUs each (see the module
/// documentation).
pub(super) fn gang_step(
    gang: &Job,
    workers: &[&Job],
    per: u32,
    s: &Snapshot,
    layout: &Layout<'_>,
) -> GangStep {
    if !needs_staging(gang) && workers.iter().all(|w| !needs_staging(w)) {
        return GangStep::Place;
    }
    let mut staged: Vec<(NodeId, &Staging)> = workers
        .iter()
        .filter_map(|w| s.staging.get(&w.id))
        .filter_map(|st| layout.index.get(st.node.as_str()).map(|&n| (n, st)))
        .collect();
    staged.sort_by_key(|(n, _)| *n);
    staged.dedup_by_key(|(n, _)| *n);
    if staged.is_empty() {
        return GangStep::Stage;
    }
    if let Some((_, st)) = staged.iter().find(|(_, st)| !st.done) {
        return GangStep::Wait(if st.reason.is_empty() {
            staging_on(gang, &st.node)
        } else {
            st.reason.clone()
        });
    }
    let replicas = gang.gang.as_ref().map_or(1, |g| g.replicas.max(1)) as usize;
    let room: usize = staged
        .iter()
        .filter_map(|(n, _)| layout.cluster.node(*n))
        .map(|n| n.gpu_free.len() / per.max(1) as usize)
        .sum();
    if room < replicas {
        return GangStep::Stage;
    }
    GangStep::Only(staged.into_iter().map(|(n, _)| n).collect())
}

/// The gang's parts ((node, GPUs)) on `nodes`, in order, as many workers of `per` GPUs on each
/// as its idle GPUs hold, until `replicas`; `None` when they hold fewer.
pub(super) fn parts_on(
    nodes: &[NodeId],
    replicas: u32,
    per: u32,
    layout: &Layout<'_>,
) -> Option<Vec<(NodeId, u32)>> {
    let (per, mut left) = (per.max(1), replicas);
    let mut parts = Vec::new();
    for &n in nodes {
        let idle = layout.cluster.node(n).map_or(0, |node| node.idle_gpus() as u32);
        let k = (idle / per).min(left);
        if k > 0 {
            parts.push((n, k * per));
            left -= k;
        }
    }
    (left == 0).then_some(parts)
}

/// One [`Stage`] per node of a gang's placement, named by the first worker placed there.
pub(super) fn gang_stages(p: &super::GangPlace) -> Vec<Stage> {
    let mut out: Vec<Stage> = Vec::new();
    for w in &p.workers {
        if !out.iter().any(|st| st.node_id == w.node_id) {
            out.push(Stage { job_id: w.job_id, node_id: w.node_id.clone(), at: p.at, ahead: false });
        }
    }
    out
}

/// Why a job the queue started waits for a node without room that holds its inputs.
pub(super) fn waits_for(node: &str) -> String {
    format!("waiting for room on {node}, which holds its inputs")
}
