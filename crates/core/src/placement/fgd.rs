//! Fragmentation gradient descent (FGD): place where the node's fragmentation grows least.
//!
//! score = ⌊100·σ((F_before − F_after)/1000)⌋. The integer truncation is part of the published
//! policy: it makes many nodes tie, and ties then go to the earliest node in the order, which is
//! what makes FGD pack as well as it does.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Placement, Policy, Score, pick};
use crate::cluster::{Cluster, Node, NodeId};
use crate::frag::TypicalPods;
use crate::resources::Request;
use crate::rng::RandomSource;

/// FGD, with a per-node score cache keyed by the node's version (scores only change when the
/// node does). One instance serves one [`Cluster`].
#[derive(Debug)]
pub struct Fgd {
    frag: FragCache,
}

impl Fgd {
    /// FGD over the given typical-pod distribution.
    pub fn new(typical: Arc<TypicalPods>) -> Self {
        Self { frag: FragCache::new(typical) }
    }
}

impl Policy for Fgd {
    fn name(&self) -> &'static str {
        "fgd"
    }

    fn place(
        &mut self,
        cluster: &Cluster,
        req: &Request,
        order: &[NodeId],
        _: &mut dyn RandomSource,
    ) -> Option<Placement> {
        let shape = self.frag.shape_id(req, cluster.nodes().len());
        let frag = &mut self.frag;
        pick(cluster, req, order, false, |id, node| {
            frag.cached(shape, id, node, |f, node| fgd_score(f, node, req))
        })
    }
}

/// FGD's score of one node (and its best GPU for a slice).
fn fgd_score(frag: &mut FragState, node: &Node, req: &Request) -> Option<Score> {
    let before = frag.before(node);
    let mut best: Option<Score> = None;
    frag.each_outcome(node, req, |gpu, after| {
        let value = (100.0 * sigmoid((before - after) / 1000.0)) as i64;
        if best.is_none_or(|b| value > b.value) {
            best = Some(Score { value, gpu });
        }
    });
    best
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Score cache shared by the fragmentation-aware policies: one table per distinct request
/// shape, one entry per node, valid while the node's version is unchanged.
#[derive(Debug)]
pub(super) struct FragCache {
    shapes: HashMap<Request, usize>,
    table: Vec<Vec<(u64, Option<Score>)>>,
    state: FragState,
}

impl FragCache {
    pub(super) fn new(typical: Arc<TypicalPods>) -> Self {
        Self {
            shapes: HashMap::new(),
            table: Vec::new(),
            state: FragState { typical, before: Vec::new(), scratch: Vec::new(), current: 0 },
        }
    }

    pub(super) fn shape_id(&mut self, req: &Request, nodes: usize) -> usize {
        let next = self.shapes.len();
        let id = *self.shapes.entry(*req).or_insert(next);
        if id == self.table.len() {
            self.table.push(Vec::new());
        }
        if self.table[id].len() < nodes {
            self.table[id].resize(nodes, (0, None));
        }
        if self.state.before.len() < nodes {
            self.state.before.resize(nodes, (0, 0.0));
        }
        id
    }

    pub(super) fn cached(
        &mut self,
        shape: usize,
        id: NodeId,
        node: &Node,
        compute: impl FnOnce(&mut FragState, &Node) -> Option<Score>,
    ) -> Option<Score> {
        let slot = &mut self.table[shape][id];
        if slot.0 == node.version {
            return slot.1;
        }
        self.state.current = id;
        let score = compute(&mut self.state, node);
        self.table[shape][id] = (node.version, score);
        score
    }
}

/// Fragmentation of nodes now and after a hypothetical placement.
#[derive(Debug)]
pub(super) struct FragState {
    pub(super) typical: Arc<TypicalPods>,
    before: Vec<(u64, f64)>,
    scratch: Vec<u32>,
    current: NodeId,
}

impl FragState {
    /// F of the node being scored, as it is now (cached per node version).
    pub(super) fn before(&mut self, node: &Node) -> f64 {
        let slot = &mut self.before[self.current];
        if slot.0 != node.version {
            *slot = (node.version, self.typical.node_fragment(node));
        }
        slot.1
    }

    /// Calls `f(gpu, F_after)` for every way the node could take `req`: each fitting GPU for a
    /// slice (index order), or the single outcome of a whole-GPU or CPU-only request.
    pub(super) fn each_outcome(&mut self, node: &Node, req: &Request, mut f: impl FnMut(Option<u32>, f64)) {
        let cpu_after = node.cpu_free - req.cpu_milli;
        self.scratch.clear();
        self.scratch.extend_from_slice(&node.gpu_free);
        if req.is_slice() {
            for i in 0..node.gpu_free.len() {
                if !node.gpu_fits(i, req.gpu_milli, req.gpu_memory_mib) {
                    continue;
                }
                self.scratch[i] -= req.gpu_milli;
                f(Some(i as u32), self.typical.fragment(cpu_after, node.model, &self.scratch));
                self.scratch[i] += req.gpu_milli;
            }
            return;
        }
        let mut left = req.gpus;
        for free in self.scratch.iter_mut() {
            if left == 0 {
                break;
            }
            if *free == crate::resources::WHOLE_GPU {
                *free = 0;
                left -= 1;
            }
        }
        f(None, self.typical.fragment(cpu_after, node.model, &self.scratch));
    }
}
