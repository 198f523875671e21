//! Fragmentation gradient descent (FGD): place where the node's fragmentation grows least.
//!
//! score = ⌊100·σ((F_before − F_after)/1000)⌋. The integer truncation is part of the published
//! policy: it makes many nodes tie, and ties then go to the earliest node in the order, which is
//! what makes FGD pack as well as it does.

use std::sync::Arc;

use super::classes::NodeClasses;
use super::{Placement, Policy, Score, finish, pick};
use crate::cluster::{Cluster, Node, NodeId};
use crate::frag::TypicalPods;
use crate::resources::{Request, WHOLE_GPU};
use crate::rng::RandomSource;

/// FGD. Nodes with the same free-resource vector are scored once per request shape, and a
/// score is kept until an allocation changes the node (see [`super::classes`]). One instance
/// serves one [`Cluster`].
#[derive(Debug)]
pub struct Fgd {
    typical: Arc<TypicalPods>,
    classes: NodeClasses<Option<Score>>,
    scratch: Vec<u32>,
}

impl Fgd {
    /// FGD over the given typical-pod distribution.
    pub fn new(typical: Arc<TypicalPods>) -> Self {
        Self { typical, classes: NodeClasses::default(), scratch: Vec::new() }
    }

    /// The straightforward scorer: every node in `order` scored from scratch, nothing cached.
    /// [`Policy::place`] returns the same placement; the property tests hold it to that.
    pub fn place_exhaustive(
        &mut self,
        cluster: &Cluster,
        req: &Request,
        order: &[NodeId],
    ) -> Option<Placement> {
        let (typical, scratch) = (&self.typical, &mut self.scratch);
        pick(cluster, req, order, false, |_, node| fgd_score(typical, scratch, node, req))
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
        self.classes.sync(cluster, order, |_, _| {});
        let shape = self.classes.shape_id(req);
        let (typical, scratch) = (&self.typical, &mut self.scratch);
        let best = self.classes.best(
            cluster,
            req,
            shape,
            |node| fgd_score(typical, scratch, node, req),
            |v| v.map_or(i64::MIN, |s| s.value),
            |v, _, _| *v,
        )?;
        finish(cluster, req, best.node, best.score.gpu)
    }
}

/// FGD's score of one node (and its best GPU for a slice).
fn fgd_score(typical: &TypicalPods, scratch: &mut Vec<u32>, node: &Node, req: &Request) -> Option<Score> {
    let before = typical.node_fragment(node);
    let mut best: Option<Score> = None;
    each_outcome(typical, scratch, node, req, |gpu, after| {
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

/// Calls `f(gpu, F_after)` for every way the node could take `req`: each fitting GPU for a
/// slice (index order), or the single outcome of a whole-GPU or CPU-only request.
pub(super) fn each_outcome(
    typical: &TypicalPods,
    scratch: &mut Vec<u32>,
    node: &Node,
    req: &Request,
    mut f: impl FnMut(Option<u32>, f64),
) {
    let cpu_after = node.cpu_free - req.cpu_milli;
    scratch.clear();
    scratch.extend_from_slice(&node.gpu_free);
    if req.is_slice() {
        for i in 0..node.gpu_free.len() {
            if !node.gpu_fits(i, req.gpu_milli, req.gpu_memory_mib) {
                continue;
            }
            scratch[i] -= req.gpu_milli;
            f(Some(i as u32), typical.fragment(cpu_after, node.model, scratch));
            scratch[i] += req.gpu_milli;
        }
        return;
    }
    let mut left = req.gpus;
    for free in scratch.iter_mut() {
        if left == 0 {
            break;
        }
        if *free == WHOLE_GPU {
            *free = 0;
            left -= 1;
        }
    }
    f(None, typical.fragment(cpu_after, node.model, scratch));
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
