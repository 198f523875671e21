//! The ledger a scheduler keeps between passes: the core's [`Cluster`] of a snapshot's nodes
//! with every held allocation on it and unhealthy GPUs blocked, kept up to date change by change
//! instead of being rebuilt for every pass.
//!
//! A pass needs the cluster as the store has it now: free CPU, memory and GPU share per node,
//! which GPUs take nothing new. Rebuilding that from rows costs a pass as much as the nodes and
//! jobs holding GPUs (on 5,000 nodes, 40,000 allocations), however little changed since the
//! last one. [`Standing`] is built once ([`Standing::build`], what a pass on a bare [`Snapshot`]
//! does every time) and then follows the change log the way `extender/model.rs` follows the
//! API server: [`Standing::apply`] takes the jobs that changed (their rows and allocations as
//! they are now), releases what they held, and puts back what they hold now. A pass plans on a
//! copy ([`super::plan_on`]), so its tentative placements never reach the kept ledger; the
//! placements the store accepts come back through the change log like any other change.
//!
//! Unhealthy GPUs are blocked by a filler allocation taking whatever is free on them once the
//! jobs are replayed; a change on a node lifts its fillers, applies the jobs, and blocks again,
//! so the node ends as a rebuild leaves it. Nodes and GPUs themselves are not followed: when
//! they change (a join, a cordon, a GPU fault) the caller builds the ledger again, which is
//! also the fallback whenever the log cannot be followed (a gap, a new leader).
//! [`Standing`]'s equality is that of what a pass can see (free resources, classes,
//! allocations per node, each job's request and GPUs), not of allocation ids, so "applied
//! incrementally equals built afresh" is a plain `==` (property test in `standing_tests`).

use std::collections::{BTreeMap, HashMap, HashSet};

use gantry_api::model::{Gpu, GpuHealth, Job, JobId, JobState, Node, NodeScheduling, NodeState};

use super::snapshot::{Held, Snapshot};
use crate::resources::WHOLE_GPU;
use crate::{AllocationId, Cluster, ModelSet, NodeId, NodeSpec, Placement, Request};

/// The core's ledger of a snapshot's cluster, kept between passes (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct Standing {
    /// The ledger's nodes, in ledger order (a node whose name repeats is left out).
    pub(super) nodes: Vec<Node>,
    /// Each node's GPUs, by index.
    pub(super) gpus: Vec<Vec<Gpu>>,
    /// Ledger index of each node id.
    pub(super) index: HashMap<String, usize>,
    /// Each node's labels with its GPU facts, for the pools' selectors.
    pub(super) labels: Vec<BTreeMap<String, String>>,
    pub(super) cluster: Cluster,
    /// The largest GPU memory of any GPU, MiB (how slices are sized).
    pub(super) max_gpu_memory: u64,
    /// The last allocation id used.
    pub(super) next_id: u64,
    /// The allocation each active job's held GPUs are replayed as.
    jobs: HashMap<JobId, AllocationId>,
    /// Per node, the fillers blocking its unhealthy GPUs.
    blocks: Vec<Vec<AllocationId>>,
}

impl Standing {
    /// The ledger of `s`: its nodes, its active jobs' held allocations, unhealthy GPUs blocked.
    pub fn build(s: &Snapshot) -> Self {
        let mut kept = Standing::cluster_of(&s.nodes, &s.gpus);
        let mut held = held_by_job(&s.held);
        for job in &s.active {
            let allocs = held.remove(&job.id).unwrap_or_default();
            kept.replay(job, &allocs);
        }
        for node in 0..kept.nodes.len() {
            kept.block(node);
        }
        kept
    }

    /// Nodes and GPUs only, nothing held.
    fn cluster_of(nodes: &[Node], gpus: &[Gpu]) -> Self {
        let mut kept = Standing {
            max_gpu_memory: gpus.iter().map(|g| g.info.memory_mib).max().unwrap_or(0),
            ..Standing::default()
        };
        let mut by_node: HashMap<&str, Vec<&Gpu>> = HashMap::new();
        for g in gpus {
            by_node.entry(g.node_id.as_str()).or_default().push(g);
        }
        for node in nodes {
            let mut gpus: Vec<Gpu> =
                by_node.remove(node.id.as_str()).unwrap_or_default().into_iter().cloned().collect();
            gpus.sort_by_key(|g| g.info.index);
            let spec = NodeSpec {
                name: node.id.clone(),
                cpu_milli: node.cpu_milli,
                memory_mib: node.memory_mib,
                gpus: gpus.len() as u32,
                gpu_model: gpus.first().map(|g| g.info.model.clone()),
                gpu_memory_mib: gpus.iter().map(|g| g.info.memory_mib).min().unwrap_or(0),
            };
            let Ok(id) = kept.cluster.add_node(spec) else {
                continue;
            };
            // Cordoned and draining nodes keep what they hold and take nothing new.
            if node.state != NodeState::Ready || node.scheduling != NodeScheduling::Schedulable {
                let _ = kept.cluster.set_schedulable(id, false);
            }
            let infos: Vec<&gantry_api::model::GpuInfo> = gpus.iter().map(|g| &g.info).collect();
            kept.labels.push(gantry_api::pools::node_facts(&node.id, &node.labels, &infos));
            kept.index.insert(node.id.clone(), kept.nodes.len());
            kept.nodes.push(node.clone());
            kept.gpus.push(gpus);
            kept.blocks.push(Vec::new());
        }
        kept
    }

    /// Applies a change of jobs: `changed` names every job whose row or allocations changed,
    /// `jobs` holds their rows as they are now (a deleted job is missing) and `held` the
    /// allocations they hold now. Afterwards the ledger equals [`Standing::build`] of the
    /// snapshot the change leads to (when that snapshot's nodes and GPUs are this ledger's).
    pub fn apply(&mut self, changed: &[JobId], jobs: &[Job], held: &[Held]) {
        let active: Vec<&Job> =
            jobs.iter().filter(|j| matches!(j.state, JobState::Scheduled | JobState::Running)).collect();
        let mut touched: HashSet<usize> = changed
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .filter_map(|a| self.cluster.allocation(*a).map(|(_, p)| p.node))
            .collect();
        touched.extend(
            active.iter().filter_map(|j| j.node_id.as_deref().and_then(|n| self.index.get(n).copied())),
        );
        for node in &touched {
            for id in std::mem::take(&mut self.blocks[*node]) {
                let _ = self.cluster.release(id);
            }
        }
        for id in changed {
            if let Some(a) = self.jobs.remove(id) {
                let _ = self.cluster.release(a);
            }
        }
        let mut held = held_by_job(held);
        for job in active {
            let allocs = held.remove(&job.id).unwrap_or_default();
            self.replay(job, &allocs);
        }
        for node in touched {
            self.block(node);
        }
    }

    /// Puts one active job's held allocations back on the ledger, as one allocation; a job
    /// holding no GPU (a CPU-only job, or one whose GPU rows are gone) still holds the CPU and
    /// memory it asked for on its node, from its row: ten 1.5-CPU jobs on a 2-CPU node run one
    /// at a time, not all at once because none of them holds a GPU.
    fn replay(&mut self, job: &Job, allocs: &[&Held]) {
        let Some(node) = job.node_id.as_deref().and_then(|n| self.index.get(n).copied()) else {
            return;
        };
        if allocs.is_empty() {
            let req = Request::cpu_only(job.request.cpu_milli, job.request.memory_mib);
            self.next_id += 1;
            let placement = Placement { node, gpus: Vec::new() };
            if self.cluster.allocate(self.next_id, &req, &placement).is_ok() {
                self.jobs.insert(job.id, self.next_id);
            }
            return;
        }
        let indices: Vec<u32> = allocs
            .iter()
            .filter_map(|a| self.gpus[node].iter().position(|g| g.info.uuid == a.gpu_uuid))
            .map(|i| i as u32)
            .collect();
        let share = allocs.iter().map(|a| a.share_milli).max().unwrap_or(WHOLE_GPU).clamp(1, WHOLE_GPU);
        let memory =
            if share < WHOLE_GPU { allocs.iter().map(|a| a.memory_mib).max().unwrap_or(0) } else { 0 };
        let r = &job.request;
        let Ok(req) =
            Request::new(r.cpu_milli, r.memory_mib, indices.len() as u32, share, memory, ModelSet::Any)
        else {
            return;
        };
        self.next_id += 1;
        let placement = Placement { node, gpus: indices };
        // An allocation the ledger refuses (it names a GPU the node no longer reports) is not
        // replayed: nothing else can be placed on a GPU that is not there.
        if self.cluster.allocate(self.next_id, &req, &placement).is_ok() {
            self.jobs.insert(job.id, self.next_id);
        }
    }

    /// Fills whatever is free on the node's GPUs that are not healthy, so nothing new lands there.
    fn block(&mut self, node: NodeId) {
        for i in 0..self.gpus[node].len() {
            if self.gpus[node][i].health == GpuHealth::Healthy {
                continue;
            }
            let Some(n) = self.cluster.node(node) else { continue };
            let (free, memory) = (n.gpu_free[i], n.gpu_memory_free[i]);
            let Ok(req) = Request::new(0, 0, 1, free, memory, ModelSet::Any) else {
                continue;
            };
            self.next_id += 1;
            if self.cluster.allocate(self.next_id, &req, &Placement { node, gpus: vec![i as u32] }).is_ok() {
                self.blocks[node].push(self.next_id);
            }
        }
    }

    /// What a pass can see of the ledger, in a form two ledgers compare by.
    fn seen(&self) -> Seen<'_> {
        let nodes = self
            .cluster
            .nodes()
            .iter()
            .map(|n| {
                let (free, memory) = (n.gpu_free.clone(), n.gpu_memory_free.clone());
                (n.cpu_free, n.memory_free, free, memory, n.classes, n.allocations, n.schedulable, n.model)
            })
            .collect();
        let mut jobs: Vec<(JobId, Request, &Placement)> = self
            .jobs
            .iter()
            .filter_map(|(job, a)| self.cluster.allocation(*a).map(|(r, p)| (*job, *r, p)))
            .collect();
        jobs.sort_by_key(|j| j.0);
        let blocks = self.blocks.iter().map(Vec::len).collect();
        Seen { nodes, jobs, blocks }
    }
}

/// What two equal ledgers agree on (see [`Standing::seen`]).
#[derive(PartialEq)]
struct Seen<'a> {
    #[allow(clippy::type_complexity, reason = "one row per node, compared whole")]
    nodes: Vec<(u64, u64, Vec<u32>, Vec<u64>, u32, u32, bool, Option<crate::resources::ModelId>)>,
    jobs: Vec<(JobId, Request, &'a Placement)>,
    blocks: Vec<usize>,
}

impl PartialEq for Standing {
    /// Same nodes and GPUs, and the same free resources, classes and allocations per node and
    /// the same request and GPUs per job (allocation ids and node versions aside).
    fn eq(&self, other: &Self) -> bool {
        self.nodes == other.nodes
            && self.gpus == other.gpus
            && self.labels == other.labels
            && self.max_gpu_memory == other.max_gpu_memory
            && self.seen() == other.seen()
    }
}

/// Held allocations grouped by job.
fn held_by_job(held: &[Held]) -> HashMap<JobId, Vec<&Held>> {
    let mut by_job: HashMap<JobId, Vec<&Held>> = HashMap::new();
    for a in held {
        by_job.entry(a.job_id).or_default().push(a);
    }
    by_job
}
