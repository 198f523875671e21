//! Equivalence classes of nodes, so that scoring does not grow with the node count.
//!
//! A fragmentation-aware score (FGD's, Gantry's) is a function of a node's free-resource vector
//! (schedulability, model, free CPU and memory, free share and memory of each GPU) and of state
//! shared by the whole cluster. Nodes with the same vector therefore get the same score, and
//! among them the winner is whichever comes first in the caller's order. So the nodes are kept
//! in classes keyed by that vector:
//!
//! - each class is scored once per request shape, and the value is kept until the class dies
//!   (its vector is immutable, so the value can only go stale if the shared state it depends on
//!   changes, which the policy handles by clearing the values);
//! - only the nodes the ledger's journal ([`Cluster::changed_since`]) names are reclassified, so
//!   an allocation invalidates exactly the node it changed;
//! - each class keeps its nodes in the caller's order, so a class stands for its earliest node
//!   and "highest score, ties to the earliest node" is a scan over classes, not nodes;
//! - an optional upper bound per cached value lets the scan skip classes that cannot win before
//!   doing the per-request part of the score.
//!
//! The result is the same node (and GPU) the straightforward scan over every node returns; the
//! property tests in `crates/core/tests/it` hold both policies to that.

use std::collections::{BTreeSet, HashMap};

use super::Score;
use crate::cluster::{Cluster, Node, NodeId};
use crate::resources::{ModelId, Request};

/// A node's free-resource vector: everything a fragmentation-aware score reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClassKey {
    schedulable: bool,
    tags: u64,
    model: Option<ModelId>,
    cpu_free: u64,
    memory_free: u64,
    gpu_memory_total: u64,
    gpu_free: Vec<u32>,
    gpu_memory_free: Vec<u64>,
}

impl ClassKey {
    fn of(node: &Node) -> Self {
        Self {
            schedulable: node.schedulable,
            tags: node.tags,
            model: node.model,
            cpu_free: node.cpu_free,
            memory_free: node.memory_free,
            gpu_memory_total: node.spec.gpu_memory_mib,
            gpu_free: node.gpu_free.clone(),
            gpu_memory_free: node.gpu_memory_free.clone(),
        }
    }

    fn matches(&self, node: &Node) -> bool {
        self.cpu_free == node.cpu_free
            && self.gpu_free == node.gpu_free
            && self.schedulable == node.schedulable
            && self.tags == node.tags
            && self.model == node.model
            && self.memory_free == node.memory_free
            && self.gpu_memory_total == node.spec.gpu_memory_mib
            && self.gpu_memory_free == node.gpu_memory_free
    }
}

const NOT_IN_ORDER: u32 = u32::MAX;
const NO_CLASS: u32 = u32::MAX;

#[derive(Debug)]
struct Class {
    key: ClassKey,
    /// Nodes of this class that are in the caller's order, as (rank, node).
    members: BTreeSet<(u32, NodeId)>,
    /// Nodes of this class, in the order or not.
    size: usize,
    /// Request shapes with a cached value, to drop them when the class dies.
    shapes: Vec<u32>,
}

/// The classes of one [`Cluster`]'s nodes and a cached value `V` per (class, request shape).
#[derive(Debug)]
pub(super) struct NodeClasses<V> {
    cursor: Option<u64>,
    nodes_seen: usize,
    class_of: Vec<u32>,
    classes: Vec<Option<Class>>,
    free: Vec<u32>,
    by_key: HashMap<ClassKey, u32>,
    order: Vec<NodeId>,
    rank: Vec<u32>,
    shapes: HashMap<Request, u32>,
    /// `values[shape][class]`: the cached value (`Some(None)`: the class's nodes do not fit),
    /// indexed directly: a scan reads one per class for every request.
    values: Vec<Vec<Option<Option<V>>>>,
}

impl<V> Default for NodeClasses<V> {
    fn default() -> Self {
        Self {
            cursor: None,
            nodes_seen: 0,
            class_of: Vec::new(),
            classes: Vec::new(),
            free: Vec::new(),
            by_key: HashMap::new(),
            order: Vec::new(),
            rank: Vec::new(),
            shapes: HashMap::new(),
            values: Vec::new(),
        }
    }
}

/// What a scan over the classes found: the winning node and its score.
pub(super) struct Best {
    pub(super) node: NodeId,
    pub(super) score: Score,
}

impl<V> NodeClasses<V> {
    /// Brings the classes up to date with `cluster` and `order`; `changed` is called for every
    /// node whose free-resource vector changed (every node, the first time).
    pub(super) fn sync(
        &mut self,
        cluster: &Cluster,
        order: &[NodeId],
        mut changed: impl FnMut(NodeId, &Node),
    ) {
        let nodes = cluster.nodes();
        let journal = self.cursor.and_then(|c| cluster.changed_since(c));
        match journal {
            Some(ids) if nodes.len() == self.nodes_seen => {
                for id in ids {
                    self.reclassify(*id, &nodes[*id], &mut changed);
                }
            }
            _ => {
                self.class_of.resize(nodes.len(), NO_CLASS);
                self.rank.resize(nodes.len(), NOT_IN_ORDER);
                for (id, node) in nodes.iter().enumerate() {
                    self.reclassify(id, node, &mut changed);
                }
            }
        }
        self.nodes_seen = nodes.len();
        self.cursor = Some(cluster.journal_cursor());
        if self.order != order {
            self.set_order(order);
        }
    }

    /// Forgets every cached value (the shared state they depend on changed).
    pub(super) fn clear_values(&mut self) {
        self.values.iter_mut().for_each(Vec::clear);
        for class in self.classes.iter_mut().flatten() {
            class.shapes.clear();
        }
    }

    /// The cache slot of a request shape.
    pub(super) fn shape_id(&mut self, req: &Request) -> u32 {
        let next = self.shapes.len() as u32;
        let id = *self.shapes.entry(*req).or_insert(next);
        if id == next {
            self.values.push(Vec::new());
        }
        id
    }

    fn reclassify(&mut self, id: NodeId, node: &Node, changed: &mut impl FnMut(NodeId, &Node)) {
        let old = self.class_of[id];
        if old != NO_CLASS && self.class(old).key.matches(node) {
            return;
        }
        let rank = self.rank[id];
        if old != NO_CLASS {
            self.leave(old, id, rank);
        }
        let class = self.class_for(node);
        let c = self.classes[class as usize].as_mut().expect("class_for returns a live class");
        c.size += 1;
        if rank != NOT_IN_ORDER {
            c.members.insert((rank, id));
        }
        self.class_of[id] = class;
        changed(id, node);
    }

    fn class(&self, id: u32) -> &Class {
        self.classes[id as usize].as_ref().expect("nodes only point at live classes")
    }

    fn leave(&mut self, class: u32, id: NodeId, rank: u32) {
        let c = self.classes[class as usize].as_mut().expect("nodes only point at live classes");
        c.size -= 1;
        c.members.remove(&(rank, id));
        if c.size > 0 {
            return;
        }
        let dead = self.classes[class as usize].take().expect("checked live above");
        for shape in dead.shapes {
            if let Some(slot) = self.values[shape as usize].get_mut(class as usize) {
                *slot = None;
            }
        }
        self.by_key.remove(&dead.key);
        self.free.push(class);
    }

    fn class_for(&mut self, node: &Node) -> u32 {
        let key = ClassKey::of(node);
        if let Some(id) = self.by_key.get(&key) {
            return *id;
        }
        let class = Class { key: key.clone(), members: BTreeSet::new(), size: 0, shapes: Vec::new() };
        let id = match self.free.pop() {
            Some(id) => {
                self.classes[id as usize] = Some(class);
                id
            }
            None => {
                self.classes.push(Some(class));
                (self.classes.len() - 1) as u32
            }
        };
        self.by_key.insert(key, id);
        id
    }

    fn set_order(&mut self, order: &[NodeId]) {
        self.order.clear();
        self.order.extend_from_slice(order);
        self.rank.iter_mut().for_each(|r| *r = NOT_IN_ORDER);
        for class in self.classes.iter_mut().flatten() {
            class.members.clear();
        }
        for (rank, id) in order.iter().enumerate() {
            let Some(class) = self.class_of.get(*id).copied().filter(|c| *c != NO_CLASS) else {
                continue;
            };
            if self.rank[*id] != NOT_IN_ORDER {
                continue; // listed twice: the first listing counts, as in a plain scan
            }
            self.rank[*id] = rank as u32;
            if let Some(c) = self.classes[class as usize].as_mut() {
                c.members.insert((rank as u32, *id));
            }
        }
    }

    /// The highest-scoring node for `shape`, ties to the earliest in the order.
    ///
    /// For each class with nodes in the order, `compute` gives the cached value from the class's
    /// earliest node (only called when that node passes [`Node::fits`] for `req`; it is cached as
    /// `None` otherwise); `bound` is an upper bound of what `score` can return for a value, and
    /// `score` the score itself (which may read state that changes between requests).
    pub(super) fn best(
        &mut self,
        cluster: &Cluster,
        req: &Request,
        shape: u32,
        mut compute: impl FnMut(&Node) -> V,
        bound: impl Fn(&V) -> i64,
        mut score: impl FnMut(&V, NodeId, &Node) -> Option<Score>,
    ) -> Option<Best> {
        let nodes = cluster.nodes();
        let mut best: Option<(u32, Best)> = None;
        let slots = &mut self.values[shape as usize];
        if slots.len() < self.classes.len() {
            slots.resize_with(self.classes.len(), || None);
        }
        for (class, slot) in self.classes.iter_mut().zip(slots.iter_mut()) {
            let Some(class) = class.as_mut() else { continue };
            let Some(&(rank, node)) = class.members.first() else { continue };
            let value = match slot {
                Some(value) => value,
                None => {
                    class.shapes.push(shape);
                    let n = &nodes[node];
                    slot.insert(n.fits(req).then(|| compute(n)))
                }
            };
            let Some(value) = value.as_ref() else { continue };
            if let Some((best_rank, b)) = &best {
                let ub = bound(value);
                if ub < b.score.value || (ub == b.score.value && rank > *best_rank) {
                    continue;
                }
            }
            let Some(s) = score(value, node, &nodes[node]) else { continue };
            let wins = match &best {
                None => true,
                Some((best_rank, b)) => {
                    s.value > b.score.value || (s.value == b.score.value && rank < *best_rank)
                }
            };
            if wins {
                best = Some((rank, Best { node, score: s }));
            }
        }
        best.map(|b| b.1)
    }
}
