//! The published baseline policies, as FGD's simulator defines them (scores are integers 0–100;
//! CPU is normalised by 128 cores and GPU by 8 GPUs).

use super::{Placement, Policy, Score, best_fit_gpu, finish, pick};
use crate::cluster::{Cluster, Node, NodeId};
use crate::resources::{Request, WHOLE_GPU};
use crate::rng::RandomSource;

const MAX_SPEC_CPU: f64 = 128_000.0;
const MAX_SPEC_GPU: f64 = 8_000.0;

/// One uniformly random feasible node; a random fitting GPU for a slice.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomPolicy;

impl Policy for RandomPolicy {
    fn name(&self) -> &'static str {
        "random"
    }

    fn place(
        &mut self,
        cluster: &Cluster,
        req: &Request,
        order: &[NodeId],
        rng: &mut dyn RandomSource,
    ) -> Option<Placement> {
        let feasible: Vec<NodeId> =
            order.iter().copied().filter(|id| cluster.nodes()[*id].fits(req)).collect();
        if feasible.is_empty() {
            return None;
        }
        let node_id = feasible[rng.index(feasible.len())];
        let node = &cluster.nodes()[node_id];
        let gpu = if req.is_slice() {
            let fitting: Vec<u32> = (0..node.gpu_free.len())
                .filter(|i| node.gpu_fits(*i, req.gpu_milli, req.gpu_memory_mib))
                .map(|i| i as u32)
                .collect();
            Some(fitting[rng.index(fitting.len())])
        } else {
            None
        };
        finish(cluster, req, node_id, gpu)
    }
}

/// A policy that scores each feasible node on its own; [`pick`] does the rest.
pub(super) trait NodeScore: Send + std::fmt::Debug {
    /// The CLI spelling.
    const NAME: &'static str;
    /// Whether scores are min–max normalised across the feasible nodes.
    const NORMALISE: bool = false;

    /// The node's score for `req` (the node has passed the filter).
    fn score(&self, node: &Node, req: &Request) -> Score;
}

impl<T: NodeScore> Policy for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn place(
        &mut self,
        cluster: &Cluster,
        req: &Request,
        order: &[NodeId],
        _: &mut dyn RandomSource,
    ) -> Option<Placement> {
        pick(cluster, req, order, T::NORMALISE, |_, node| Some(self.score(node, req)))
    }
}

/// Prefers the node whose remaining capacity is least aligned with the demand.
#[derive(Debug, Clone, Copy, Default)]
pub struct DotProduct;

impl NodeScore for DotProduct {
    const NAME: &'static str = "dotprod";

    fn score(&self, node: &Node, req: &Request) -> Score {
        let p = (req.cpu_milli as f64 / MAX_SPEC_CPU, req.gpu_milli_total() as f64 / MAX_SPEC_GPU);
        let n = (node.cpu_free as f64 / MAX_SPEC_CPU, node.gpu_free_total() as f64 / MAX_SPEC_GPU);
        let dot = n.0 * p.0 + n.1 * p.1;
        Score { value: (100.0 * (1.0 - dot / 2.0)) as i64, gpu: best_fit_gpu(node, req) }
    }
}

/// Least CPU and GPU left over after placement, min–max normalised across nodes.
#[derive(Debug, Clone, Copy, Default)]
pub struct BestFit;

impl NodeScore for BestFit {
    const NAME: &'static str = "bestfit";
    const NORMALISE: bool = true;

    fn score(&self, node: &Node, req: &Request) -> Score {
        let cpu_left = (node.cpu_free - req.cpu_milli) as f64 / MAX_SPEC_CPU;
        let gpu_left = (node.gpu_free_total().saturating_sub(req.gpu_milli_total())) as f64 / MAX_SPEC_GPU;
        let raw = 0.5 * cpu_left + 0.5 * gpu_left;
        Score { value: (100.0 * (1.0 - raw)).floor() as i64, gpu: best_fit_gpu(node, req) }
    }
}

/// Fill partly used GPUs first, then idle GPUs of partly used nodes, then idle nodes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Packing;

impl NodeScore for Packing {
    const NAME: &'static str = "packing";

    fn score(&self, node: &Node, req: &Request) -> Score {
        packing_score(node, req)
    }
}

fn packing_score(node: &Node, req: &Request) -> Score {
    let gpu = best_fit_gpu(node, req);
    if req.gpus == 0 {
        return Score { value: 0, gpu };
    }
    let n_gpus = node.gpu_free.len() as i64;
    let idle = node.idle_gpus() as i64;
    if idle == n_gpus {
        return Score { value: (33 - idle).max(idle), gpu };
    }
    // The GPUs the request would take, least free first.
    let mut fitting: Vec<u32> = (0..node.gpu_free.len())
        .filter(|i| node.gpu_fits(*i, req.gpu_milli, req.gpu_memory_mib))
        .map(|i| node.gpu_free[i])
        .collect();
    fitting.sort_unstable();
    let chosen = &fitting[..(req.gpus as usize).min(fitting.len())];
    let idle_used = chosen.iter().filter(|f| **f == WHOLE_GPU).count() as i64;
    let value = if idle_used == 0 {
        let free_pct: u32 = chosen.iter().map(|f| f / 10).sum();
        (100 - i64::from(free_pct) / 10).max(50)
    } else {
        (50 - idle_used).max(33)
    };
    Score { value, gpu }
}

/// Keeps requests of one class (slice, k whole GPUs, CPU-only) together, then packs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clustering;

impl NodeScore for Clustering {
    const NAME: &'static str = "clustering";

    fn score(&self, node: &Node, req: &Request) -> Score {
        let gpu = best_fit_gpu(node, req);
        if req.gpus == 0 {
            return Score { value: 0, gpu };
        }
        let bit = req.class().bit();
        let g = 25.0 * (MAX_SPEC_GPU - node.gpu_free_total() as f64) / MAX_SPEC_GPU;
        let base = if node.classes == 0 {
            25.0
        } else if node.classes == bit {
            75.0
        } else if node.classes & bit != 0 {
            50.0
        } else {
            0.0
        };
        Score { value: (base + g) as i64, gpu }
    }
}
