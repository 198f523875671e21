//! Gantry's default placement policy.

use std::sync::Arc;

use super::fgd::FragCache;
use super::{Placement, Policy, Score, pick};
use crate::cluster::{Cluster, NodeId};
use crate::frag::TypicalPods;
use crate::resources::Request;
use crate::rng::RandomSource;

/// Gantry's policy (see the module docs).
#[derive(Debug)]
pub struct Gantry {
    frag: FragCache,
}

impl Gantry {
    /// Gantry's policy over the given typical-pod distribution.
    pub fn new(typical: Arc<TypicalPods>) -> Self {
        Self { frag: FragCache::new(typical) }
    }
}

impl Policy for Gantry {
    fn name(&self) -> &'static str {
        "gantry"
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
            frag.cached(shape, id, node, |f, node| {
                let before = f.before(node);
                let mut best: Option<Score> = None;
                f.each_outcome(node, req, |gpu, after| {
                    let value = ((before - after) * 1000.0) as i64;
                    if best.is_none_or(|b| value > b.value) {
                        best = Some(Score { value, gpu });
                    }
                });
                best
            })
        })
    }
}
