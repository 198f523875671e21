//! Placement as filter → score → pick GPUs.
//!
//! Every node that passes the filter ([`crate::Node::fits`]) is scored by the policy; the highest
//! score wins, and ties go to the node that comes first in the caller's node order (the
//! simulator passes a seeded permutation, the server its join order). Inside the node a policy
//! picks the GPU for a slice; whole-GPU requests take the lowest-index idle GPUs in the ledger, and
//! [`gpus`] says which physical GPUs a node should hand out (blocks, NVLink) once it is chosen.

mod baselines;
mod classes;
mod fgd;
mod gantry;
pub mod gpus;
mod spread;

use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, Node, NodeId};
use crate::frag::TypicalPods;
use crate::resources::Request;
use crate::rng::RandomSource;

pub use baselines::{BestFit, Clustering, DotProduct, Packing, RandomPolicy};
pub use fgd::Fgd;
pub use gantry::{Gantry, GantryParams};
pub use spread::{Preferring, Spread, spread_score};

/// Where a request goes (the ledger's type, beside it: policies produce it, the ledger takes it).
pub use crate::cluster::Placement;

/// A node's score for a request, and the GPU a slice would take there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Score {
    /// Higher is better.
    pub value: i64,
    /// For a slice: the GPU it would take on this node.
    pub gpu: Option<u32>,
}

/// A placement policy.
pub trait Policy: Send + std::fmt::Debug {
    /// The policy's name as the CLI spells it.
    fn name(&self) -> &'static str;

    /// Chooses a placement for `req`, or `None` when no node can take it. `order` lists every
    /// node once, earliest first; it breaks score ties.
    fn place(
        &mut self,
        cluster: &Cluster,
        req: &Request,
        order: &[NodeId],
        rng: &mut dyn RandomSource,
    ) -> Option<Placement>;
}

/// The policies Gantry ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// A uniformly random feasible node.
    Random,
    /// Dot product of free capacity and demand (Grandl et al., Tetris).
    Dotprod,
    /// Keep pods of one class together (GPU Clustering).
    Clustering,
    /// Fill partly used GPUs, then partly used nodes, then idle ones (GPU Packing).
    Packing,
    /// Least remaining CPU and GPU after placement.
    Bestfit,
    /// Fragmentation gradient descent (Weng et al., ATC'23).
    Fgd,
    /// Gantry's default.
    Gantry,
}

impl PolicyKind {
    /// Every policy, the published ones first.
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::Random,
        PolicyKind::Dotprod,
        PolicyKind::Clustering,
        PolicyKind::Packing,
        PolicyKind::Bestfit,
        PolicyKind::Fgd,
        PolicyKind::Gantry,
    ];

    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Random => "random",
            PolicyKind::Dotprod => "dotprod",
            PolicyKind::Clustering => "clustering",
            PolicyKind::Packing => "packing",
            PolicyKind::Bestfit => "bestfit",
            PolicyKind::Fgd => "fgd",
            PolicyKind::Gantry => "gantry",
        }
    }

    /// Whether the policy needs the typical-pod distribution.
    pub fn needs_typical_pods(self) -> bool {
        matches!(self, PolicyKind::Fgd | PolicyKind::Gantry)
    }

    /// Builds the policy, honouring each request's [`crate::resources::Preference`] (a spread
    /// pool's requests are spread, see [`Spread`]). `typical` is used by FGD and Gantry; the
    /// others ignore it.
    pub fn build(self, typical: Arc<TypicalPods>) -> Box<dyn Policy> {
        Box::new(Preferring::new(self.build_packing(typical)))
    }

    fn build_packing(self, typical: Arc<TypicalPods>) -> Box<dyn Policy> {
        match self {
            PolicyKind::Random => Box::new(RandomPolicy),
            PolicyKind::Dotprod => Box::new(DotProduct),
            PolicyKind::Clustering => Box::new(Clustering),
            PolicyKind::Packing => Box::new(Packing),
            PolicyKind::Bestfit => Box::new(BestFit),
            PolicyKind::Fgd => Box::new(Fgd::new(typical)),
            PolicyKind::Gantry => Box::new(Gantry::new(typical)),
        }
    }
}

/// An unknown policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy `{0}` (known: random, dotprod, clustering, packing, bestfit, fgd, gantry)")]
pub struct UnknownPolicy(pub String);

impl FromStr for PolicyKind {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyKind::ALL
            .into_iter()
            .find(|p| p.as_str() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// The shared engine: filter every node, score the ones that fit, pick the best (ties to the
/// earliest in `order`), then pick GPUs. With `normalise`, scores are min–max scaled to 0–100
/// (integer) across the feasible nodes first, as kube-scheduler's NormalizeScore does.
pub fn pick(
    cluster: &Cluster,
    req: &Request,
    order: &[NodeId],
    normalise: bool,
    mut score: impl FnMut(NodeId, &Node) -> Option<Score>,
) -> Option<Placement> {
    let nodes = cluster.nodes();
    let best = if normalise {
        let scored: Vec<(NodeId, Score)> = order
            .iter()
            .filter(|id| nodes[**id].fits(req))
            .filter_map(|id| score(*id, &nodes[*id]).map(|s| (*id, s)))
            .collect();
        let lo = scored.iter().map(|s| s.1.value).min()?;
        let hi = scored.iter().map(|s| s.1.value).max()?;
        let scale = |v: i64| {
            if hi > lo { (v - lo) * 100 / (hi - lo) } else { 0 }
        };
        let mut best: Option<(NodeId, Score)> = None;
        for (id, s) in scored {
            let s = Score { value: scale(s.value), ..s };
            if best.is_none_or(|b| s.value > b.1.value) {
                best = Some((id, s));
            }
        }
        best
    } else {
        let mut best: Option<(NodeId, Score)> = None;
        for id in order {
            let node = &nodes[*id];
            if !node.fits(req) {
                continue;
            }
            if let Some(s) = score(*id, node)
                && best.is_none_or(|b| s.value > b.1.value)
            {
                best = Some((*id, s));
            }
        }
        best
    }?;
    finish(cluster, req, best.0, best.1.gpu)
}

/// Turns a chosen node (and slice GPU) into a placement.
fn finish(cluster: &Cluster, req: &Request, node: NodeId, slice_gpu: Option<u32>) -> Option<Placement> {
    let n = cluster.node(node)?;
    let gpus = if req.gpus == 0 {
        Vec::new()
    } else if req.is_slice() {
        vec![slice_gpu.or_else(|| best_fit_gpu(n, req))?]
    } else {
        n.lowest_idle_gpus(req.gpus)?
    };
    Some(Placement { node, gpus })
}

/// For a slice: the fitting GPU with the least free share (lowest index among equals).
pub fn best_fit_gpu(node: &Node, req: &Request) -> Option<u32> {
    (0..node.gpu_free.len())
        .filter(|i| node.gpu_fits(*i, req.gpu_milli, req.gpu_memory_mib))
        .min_by_key(|i| (node.gpu_free[*i], *i))
        .map(|i| i as u32)
}

#[cfg(test)]
mod tests;
