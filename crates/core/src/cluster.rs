//! The allocation ledger: nodes, their free capacity, and the allocations holding the rest.
//!
//! Every mutation goes through [`Cluster::allocate`] / [`Cluster::release`], which check before
//! they change anything, so no sequence of calls can allocate more than a node or a GPU has, or
//! hand out the same share twice.

use std::collections::{HashMap, HashSet};

use crate::resources::{ModelId, ModelSet, NodeSpec, Request, WHOLE_GPU};

/// Where a request goes: a node and, for GPU requests, which of its GPUs. It lives beside the
/// ledger that takes it, so the ledger depends on no policy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Placement {
    /// The node.
    pub node: NodeId,
    /// GPU indices on that node (one for a slice, `gpus` for whole GPUs, none for CPU-only).
    pub gpus: Vec<u32>,
}

/// Index of a node in its [`Cluster`].
pub type NodeId = usize;

/// Caller-chosen identity of an allocation (a job id, a pod index).
pub type AllocationId = u64;

/// Why the ledger refused a change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// The node index does not exist.
    #[error("node {0} does not exist")]
    NoSuchNode(NodeId),
    /// The allocation id is already in use.
    #[error("allocation {0} already exists")]
    DuplicateAllocation(AllocationId),
    /// Releasing an allocation that is not held.
    #[error("allocation {0} is not held")]
    UnknownAllocation(AllocationId),
    /// The node lacks CPU, memory, the GPU model, or the GPU share asked for.
    #[error("node {node} cannot hold the request: {reason}")]
    DoesNotFit {
        /// The node.
        node: NodeId,
        /// Which resource is short.
        reason: &'static str,
    },
    /// A cluster may name at most 64 GPU models.
    #[error("too many GPU models (at most 64)")]
    TooManyModels,
    /// Two nodes share a name.
    #[error("duplicate node name {0}")]
    DuplicateNode(String),
}

/// A node and its free capacity.
#[derive(Debug, Clone)]
pub struct Node {
    /// The node as declared.
    pub spec: NodeSpec,
    /// Interned GPU model.
    pub model: Option<ModelId>,
    /// Free CPU, milli-cores.
    pub cpu_free: u64,
    /// Free memory, MiB.
    pub memory_free: u64,
    /// Free share of each GPU, milli-GPU.
    pub gpu_free: Vec<u32>,
    /// Free memory of each GPU, MiB.
    pub gpu_memory_free: Vec<u64>,
    /// Set of [`crate::resources::PodClass`] bits of the allocations on this node.
    pub classes: u32,
    /// Allocations currently on this node.
    pub allocations: u32,
    /// Whether new work may land here (false when cordoned, lost or unhealthy).
    pub schedulable: bool,
    /// The caller's node filters this node passes (bit i: filter i; see
    /// [`crate::resources::NodeSet`]); none until [`Cluster::set_tags`].
    pub tags: u64,
    /// Changes whenever anything above changes; lets policies cache per-node scores.
    pub version: u64,
}

impl Node {
    /// Total free GPU share on the node, milli-GPU.
    pub fn gpu_free_total(&self) -> u64 {
        self.gpu_free.iter().map(|f| u64::from(*f)).sum()
    }

    /// Number of GPUs with nothing allocated.
    pub fn idle_gpus(&self) -> usize {
        self.gpu_free.iter().filter(|f| **f == WHOLE_GPU).count()
    }

    /// Whether GPU `i` can take a slice of `milli` and `memory_mib`.
    pub fn gpu_fits(&self, i: usize, milli: u32, memory_mib: u64) -> bool {
        self.gpu_free[i] >= milli && self.gpu_memory_free[i] >= memory_mib
    }

    fn gpu_idle(&self, i: usize) -> bool {
        self.gpu_free[i] == WHOLE_GPU && self.gpu_memory_free[i] == self.spec.gpu_memory_mib
    }

    /// The lowest-index idle GPUs, if there are `n` of them.
    pub fn lowest_idle_gpus(&self, n: u32) -> Option<Vec<u32>> {
        let picked: Vec<u32> = (0..self.gpu_free.len())
            .filter(|i| self.gpu_idle(*i))
            .take(n as usize)
            .map(|i| i as u32)
            .collect();
        (picked.len() == n as usize).then_some(picked)
    }

    /// Whether the request could be placed here at all (the scheduling filter).
    pub fn fits(&self, req: &Request) -> bool {
        self.why_not(req).is_none()
    }

    /// The first resource that keeps `req` off this node, if any.
    pub fn why_not(&self, req: &Request) -> Option<&'static str> {
        if !self.schedulable {
            return Some("node is not schedulable");
        }
        if !req.nodes.allows(self.tags) {
            return Some("not in the job's pool or does not match its node selector");
        }
        if req.cpu_milli > self.cpu_free {
            return Some("not enough CPU");
        }
        if req.memory_mib > self.memory_free {
            return Some("not enough memory");
        }
        if req.gpus == 0 {
            return None;
        }
        if self.gpu_free.is_empty() {
            return Some("no GPUs");
        }
        if !req.models.allows(self.model) {
            return Some("GPU model not allowed");
        }
        if req.is_slice() {
            let any = (0..self.gpu_free.len()).any(|i| self.gpu_fits(i, req.gpu_milli, req.gpu_memory_mib));
            return (!any).then_some("no GPU has that share free");
        }
        let idle = (0..self.gpu_free.len()).filter(|i| self.gpu_idle(*i)).count();
        (idle < req.gpus as usize).then_some("not enough idle GPUs")
    }
}

#[derive(Debug, Clone)]
struct Held {
    request: Request,
    placement: Placement,
}

/// The cluster's nodes and the allocations on them.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    nodes: Vec<Node>,
    models: Vec<String>,
    held: HashMap<AllocationId, Held>,
    used_milli: u64,
    capacity_milli: u64,
    clock: u64,
    journal: Journal,
    /// Node names, so that a join checks for a duplicate without comparing every node.
    names: HashSet<String>,
    /// Per node, how many allocations of each [`crate::resources::PodClass`] bit it holds, so
    /// that a release updates `Node::classes` without scanning every allocation.
    class_counts: Vec<[u32; 32]>,
    /// GPUs their owners lent, and what borrows them (see [`loans`]).
    loans: loans::Loans,
}

mod loans;
pub use loans::Lent;

/// The nodes that changed, in the order they changed, so that policies caching per-node work
/// revisit only those. Bounded: past [`Journal::limit`] entries it is dropped, and a reader whose
/// cursor predates what is kept must look at every node again.
#[derive(Debug, Clone, Default)]
struct Journal {
    /// Cursor of `changed[0]`.
    start: u64,
    changed: Vec<NodeId>,
}

impl Journal {
    fn record(&mut self, node: NodeId, nodes: usize) {
        if self.changed.len() >= Self::limit(nodes) {
            self.start += self.changed.len() as u64;
            self.changed.clear();
        }
        self.changed.push(node);
    }

    /// Entries kept: enough that a reader rescanning every node after a drop costs no more than
    /// the entries it would have read.
    fn limit(nodes: usize) -> usize {
        (4 * nodes).max(4096)
    }

    fn cursor(&self) -> u64 {
        self.start + self.changed.len() as u64
    }
}

impl Cluster {
    /// A cluster of the given nodes, all free and schedulable.
    pub fn new(specs: Vec<NodeSpec>) -> Result<Self, LedgerError> {
        let mut cluster = Cluster::default();
        for spec in specs {
            cluster.add_node(spec)?;
        }
        Ok(cluster)
    }

    /// Adds a node (a node joining); returns its id.
    pub fn add_node(&mut self, spec: NodeSpec) -> Result<NodeId, LedgerError> {
        if self.names.contains(&spec.name) {
            return Err(LedgerError::DuplicateNode(spec.name));
        }
        let model = match &spec.gpu_model {
            Some(name) if spec.gpus > 0 => Some(self.intern_model(name)?),
            _ => None,
        };
        self.names.insert(spec.name.clone());
        let gpus = spec.gpus as usize;
        self.capacity_milli += u64::from(spec.gpus) * u64::from(WHOLE_GPU);
        self.clock += 1;
        self.nodes.push(Node {
            model,
            cpu_free: spec.cpu_milli,
            memory_free: spec.memory_mib,
            gpu_free: vec![WHOLE_GPU; gpus],
            gpu_memory_free: vec![spec.gpu_memory_mib; gpus],
            classes: 0,
            allocations: 0,
            schedulable: true,
            tags: 0,
            version: self.clock,
            spec,
        });
        self.class_counts.push([0; 32]);
        self.journal.record(self.nodes.len() - 1, self.nodes.len());
        Ok(self.nodes.len() - 1)
    }

    fn intern_model(&mut self, name: &str) -> Result<ModelId, LedgerError> {
        if let Some(i) = self.models.iter().position(|m| m == name) {
            return Ok(i as ModelId);
        }
        if self.models.len() >= 64 {
            return Err(LedgerError::TooManyModels);
        }
        self.models.push(name.to_string());
        Ok((self.models.len() - 1) as ModelId)
    }

    /// The set of models named in `names`; names the cluster lacks match nothing. An empty list
    /// means any model.
    pub fn model_set<S: AsRef<str>>(&self, names: &[S]) -> ModelSet {
        if names.is_empty() {
            return ModelSet::Any;
        }
        let mask = names
            .iter()
            .filter_map(|n| self.models.iter().position(|m| m == n.as_ref()))
            .fold(0u64, |mask, i| mask | (1u64 << i));
        ModelSet::Only(mask)
    }

    /// The set of models matching any of `asked` by [`crate::resources::model_matches`] (`A100`
    /// matches `A100-80GB`); an empty list means any model, names matching nothing match nothing.
    pub fn matching_models<S: AsRef<str>>(&self, asked: &[S]) -> ModelSet {
        if asked.is_empty() {
            return ModelSet::Any;
        }
        let mask = self
            .models
            .iter()
            .enumerate()
            .filter(|(_, m)| asked.iter().any(|a| crate::resources::model_matches(a.as_ref(), m)))
            .fold(0u64, |mask, (i, _)| mask | (1u64 << i));
        ModelSet::Only(mask)
    }

    /// All nodes, indexed by [`NodeId`].
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id)
    }

    /// The model table (index = [`ModelId`]).
    pub fn models(&self) -> &[String] {
        &self.models
    }

    /// Total GPU capacity, milli-GPU.
    pub fn capacity_milli(&self) -> u64 {
        self.capacity_milli
    }

    /// Allocated GPU share, milli-GPU.
    pub fn used_milli(&self) -> u64 {
        self.used_milli
    }

    /// Position in the change journal; see [`Cluster::changed_since`].
    pub fn journal_cursor(&self) -> u64 {
        self.journal.cursor()
    }

    /// The nodes changed (allocations, releases, schedulability, joins) since `cursor`, oldest
    /// first and possibly repeated, or `None` when that part of the journal is no longer kept
    /// (or `cursor` comes from another cluster): the caller must then look at every node.
    pub fn changed_since(&self, cursor: u64) -> Option<&[NodeId]> {
        if cursor < self.journal.start || cursor > self.journal.cursor() {
            return None;
        }
        Some(&self.journal.changed[(cursor - self.journal.start) as usize..])
    }

    /// Number of allocations held.
    pub fn allocation_count(&self) -> usize {
        self.held.len()
    }

    /// Marks a node schedulable or not (cordon, lost agent, unhealthy GPU).
    pub fn set_schedulable(&mut self, id: NodeId, schedulable: bool) -> Result<(), LedgerError> {
        self.clock += 1;
        let clock = self.clock;
        let node = self.nodes.get_mut(id).ok_or(LedgerError::NoSuchNode(id))?;
        node.schedulable = schedulable;
        node.version = clock;
        self.journal.record(id, self.nodes.len());
        Ok(())
    }

    /// Sets the node filters a node passes (see [`crate::resources::NodeSet`]).
    pub fn set_tags(&mut self, id: NodeId, tags: u64) -> Result<(), LedgerError> {
        self.clock += 1;
        let clock = self.clock;
        let node = self.nodes.get_mut(id).ok_or(LedgerError::NoSuchNode(id))?;
        node.tags = tags;
        node.version = clock;
        self.journal.record(id, self.nodes.len());
        Ok(())
    }

    /// Records `req` on the node and GPUs of `placement`, or changes nothing and says why not.
    pub fn allocate(
        &mut self,
        id: AllocationId,
        req: &Request,
        placement: &Placement,
    ) -> Result<(), LedgerError> {
        if self.held.contains_key(&id) {
            return Err(LedgerError::DuplicateAllocation(id));
        }
        let node = self.nodes.get(placement.node).ok_or(LedgerError::NoSuchNode(placement.node))?;
        check_fit(node, req, placement)?;
        self.clock += 1;
        let clock = self.clock;
        let node = &mut self.nodes[placement.node];
        node.cpu_free -= req.cpu_milli;
        node.memory_free -= req.memory_mib;
        for g in &placement.gpus {
            node.gpu_free[*g as usize] -= req.gpu_milli;
            node.gpu_memory_free[*g as usize] -= req.gpu_memory_mib;
        }
        node.classes |= req.class().bit();
        self.class_counts[placement.node][class_index(req)] += 1;
        node.allocations += 1;
        node.version = clock;
        self.used_milli += req.gpu_milli_total();
        self.held.insert(id, Held { request: *req, placement: placement.clone() });
        self.journal.record(placement.node, self.nodes.len());
        Ok(())
    }

    /// Returns an allocation's resources to its node.
    pub fn release(&mut self, id: AllocationId) -> Result<(Request, Placement), LedgerError> {
        let held = self.held.remove(&id).ok_or(LedgerError::UnknownAllocation(id))?;
        self.clock += 1;
        let clock = self.clock;
        let req = held.request;
        // A lent GPU its borrower still holds stays taken: it is the borrower's now.
        let kept = self.loans.owner_released(held.placement.node, &held.placement.gpus);
        let node = &mut self.nodes[held.placement.node];
        node.cpu_free += req.cpu_milli;
        node.memory_free += req.memory_mib;
        for g in &held.placement.gpus {
            if !kept.contains(g) {
                node.gpu_free[*g as usize] += req.gpu_milli;
            }
            node.gpu_memory_free[*g as usize] += req.gpu_memory_mib;
        }
        node.allocations -= 1;
        node.version = clock;
        self.used_milli -= req.gpu_milli_total() - u64::from(req.gpu_milli) * kept.len() as u64;
        let node_id = held.placement.node;
        let counts = &mut self.class_counts[node_id];
        counts[class_index(&req)] -= 1;
        let classes = counts.iter().enumerate().filter(|(_, n)| **n > 0).fold(0, |acc, (i, _)| acc | 1 << i);
        self.nodes[node_id].classes = classes;
        self.journal.record(node_id, self.nodes.len());
        Ok((req, held.placement))
    }

    /// The request and placement of a held allocation.
    pub fn allocation(&self, id: AllocationId) -> Option<(&Request, &Placement)> {
        self.held.get(&id).map(|h| (&h.request, &h.placement))
    }
}

/// The position of a request's class bit in `Node::classes`.
fn class_index(req: &Request) -> usize {
    req.class().bit().trailing_zeros() as usize
}

fn check_fit(node: &Node, req: &Request, placement: &Placement) -> Result<(), LedgerError> {
    let fail = |reason| Err(LedgerError::DoesNotFit { node: placement.node, reason });
    if let Some(reason) = node.why_not(req) {
        return fail(reason);
    }
    if placement.gpus.len() != req.gpus as usize {
        return fail("placement names a different number of GPUs than requested");
    }
    for (k, g) in placement.gpus.iter().enumerate() {
        let g = *g as usize;
        if g >= node.gpu_free.len() {
            return fail("placement names a GPU the node does not have");
        }
        if placement.gpus[..k].contains(&placement.gpus[k]) {
            return fail("placement names the same GPU twice");
        }
        if !node.gpu_fits(g, req.gpu_milli, req.gpu_memory_mib) {
            return fail("the chosen GPU lacks the share");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            cpu_milli: 1000,
            memory_mib: 1024,
            gpus: 1,
            gpu_model: Some("T4".into()),
            gpu_memory_mib: 0,
        }
    }

    #[test]
    fn a_second_node_with_the_same_name_is_refused_and_changes_nothing() {
        let mut cluster = Cluster::new(vec![spec("a"), spec("b")]).expect("distinct names");
        assert_eq!(cluster.add_node(spec("a")), Err(LedgerError::DuplicateNode("a".into())));
        assert_eq!(cluster.nodes().len(), 2);
        assert_eq!(cluster.add_node(spec("c")), Ok(2));
    }

    #[test]
    fn the_journal_names_changed_nodes_until_it_is_dropped() {
        let mut cluster = Cluster::new(vec![spec("a"), spec("b")]).expect("distinct names");
        let cursor = cluster.journal_cursor();
        cluster.set_schedulable(1, false).expect("node exists");
        assert_eq!(cluster.changed_since(cursor), Some(&[1][..]));
        for _ in 0..Journal::limit(2) {
            cluster.set_schedulable(0, true).expect("node exists");
        }
        assert_eq!(cluster.changed_since(cursor), None, "entries past the limit are dropped");
        assert_eq!(cluster.changed_since(cluster.journal_cursor()), Some(&[][..]));
    }
}
