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
use crate::resources::{Request, WHOLE_GPU};
use crate::rng::RandomSource;

/// FGD, with a per-node score cache keyed by the node's version (scores only change when the
/// node does). One instance serves one [`Cluster`].
#[derive(Debug)]
pub struct Fgd {
    frag: FragCache<Option<Score>>,
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
            *frag.cached(shape, id, node, |f, node| fgd_score(f, node, req))
        })
    }
}

/// FGD's score of one node (and its best GPU for a slice).
fn fgd_score(frag: &mut FragState, node: &Node, req: &Request) -> Option<Score> {
    let before = frag.before(node);
    let mut best: Option<Score> = None;
    frag.each_outcome(node, req, |gpu, after| {
        let value = points(before - after);
        if best.is_none_or(|b| value > b.value) {
            best = Some(Score { value, gpu });
        }
    });
    best
}

/// FGD's integer score of a fragmentation decrease `delta` (milli-GPU): ⌊100·σ(delta/1000)⌋.
///
/// Computed without `exp`: the score is k exactly when delta has passed the k-th threshold
/// 1000·ln(k / (100 − k)), so a binary search over the 99 thresholds gives the same integer.
pub(super) fn points(delta: f64) -> i64 {
    static THRESHOLDS: std::sync::LazyLock<[f64; 99]> = std::sync::LazyLock::new(|| {
        std::array::from_fn(|i| {
            let k = (i + 1) as f64;
            1000.0 * (k / (100.0 - k)).ln()
        })
    });
    THRESHOLDS.partition_point(|t| *t <= delta) as i64
}

/// Per-node cache shared by the fragmentation-aware policies: one table per distinct request
/// shape, one entry per node, valid while the node's version is unchanged (a node's version
/// changes whenever anything on it does).
#[derive(Debug)]
pub(super) struct FragCache<V> {
    shapes: HashMap<Request, usize>,
    table: Vec<Vec<(u64, V)>>,
    state: FragState,
}

impl<V: Default + Clone> FragCache<V> {
    pub(super) fn new(typical: Arc<TypicalPods>) -> Self {
        Self {
            shapes: HashMap::new(),
            table: Vec::new(),
            state: FragState { typical, before: Vec::new(), scratch: Vec::new(), current: 0 },
        }
    }

    /// The cache slot index of `req`'s shape; sizes the tables for `nodes` nodes.
    pub(super) fn shape_id(&mut self, req: &Request, nodes: usize) -> usize {
        let next = self.shapes.len();
        let id = *self.shapes.entry(*req).or_insert(next);
        if id == self.table.len() {
            self.table.push(Vec::new());
        }
        if self.table[id].len() < nodes {
            self.table[id].resize(nodes, (0, V::default()));
        }
        if self.state.before.len() < nodes {
            self.state.before.resize(nodes, (0, 0.0));
        }
        id
    }

    /// The cached value for (shape, node), computed by `compute` when the node has changed.
    pub(super) fn cached(
        &mut self,
        shape: usize,
        id: NodeId,
        node: &Node,
        compute: impl FnOnce(&mut FragState, &Node) -> V,
    ) -> &V {
        if self.table[shape][id].0 != node.version {
            self.state.current = id;
            let value = compute(&mut self.state, node);
            self.table[shape][id] = (node.version, value);
        }
        &self.table[shape][id].1
    }
}

/// Fragmentation of nodes now and after a hypothetical placement.
#[derive(Debug)]
pub(super) struct FragState {
    typical: Arc<TypicalPods>,
    before: Vec<(u64, f64)>,
    scratch: Vec<u32>,
    current: NodeId,
}

impl FragState {
    /// F of the node being scored, as it is now (cached per node version).
    pub(super) fn before(&mut self, node: &Node) -> f64 {
        let slot = self.before[self.current];
        if slot.0 == node.version {
            return slot.1;
        }
        let f = self.typical.node_fragment(node);
        self.before[self.current] = (node.version, f);
        f
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
            if *free == WHOLE_GPU {
                *free = 0;
                left -= 1;
            }
        }
        f(None, self.typical.fragment(cpu_after, node.model, &self.scratch));
    }
}

#[cfg(test)]
mod tests {
    use super::points;

    #[test]
    fn points_match_the_truncated_logistic() {
        for i in -20_000..20_000 {
            let delta = f64::from(i) * 0.37;
            let exact = (100.0 / (1.0 + (-delta / 1000.0).exp())) as i64;
            assert_eq!(points(delta), exact, "delta {delta}");
        }
    }
}
