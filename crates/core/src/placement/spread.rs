//! Spreading: a node pool's `spread` placement, the opposite of packing.
//!
//! Packing (every shipped policy, Gantry's by default) fills partly used nodes first, which keeps
//! whole nodes free for wide jobs and gangs: the right default for training. A pool of
//! inference or interactive work wants the opposite, Kubernetes' `LeastAllocated` rather than
//! `MostAllocated`, Determined's `fitting_policy: worst` rather than `best`: load balanced so
//! that no node (its PCIe links, host memory bandwidth, power and thermal budget) and no GPU
//! becomes the bottleneck while others idle. A pool says which it wants
//! (`gantry pool set NAME --placement pack|spread`), and the request carries it
//! ([`crate::resources::Request::placement`]), so every caller of a built policy gets it.
//!
//! The score is one term, lexicographic: the node's free GPU share as a fraction of its GPUs
//! (the least allocated node first), then its free CPU as a fraction of its CPU (ties between
//! equally loaded nodes), then the caller's order. A CPU-only request compares CPU first, and
//! only the CPU a node's idle GPUs do not need (each idle GPU keeps the node's CPU per GPU):
//! balancing CPU alone filled the CPU of GPU nodes whose GPUs then found no job they could
//! hold (on openb at half fill, a few GPU nodes were left with no GPU allocated and 75–100 %
//! of their CPU taken by CPU-only pods). Inside the node a
//! slice takes the GPU with the most free share (the least used one), whole GPUs the
//! lowest-index idle ones (an idle GPU carries nothing to balance).

use super::baselines::NodeScore;
use super::{Placement, Policy, Score};
use crate::cluster::{Cluster, Node, NodeId};
use crate::resources::{Preference, Request};
use crate::rng::RandomSource;

/// The least allocated node, then its least used GPU.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spread;

/// Parts per million, so that the two fractions fit one integer score.
const PPM: u64 = 1_000_000;

/// The spread score of a node that passed the filter (higher: less allocated).
pub fn spread_score(node: &Node, req: &Request) -> Score {
    let gpu_capacity = node.gpu_free.len() as u64 * u64::from(crate::resources::WHOLE_GPU);
    let gpu_free = (node.gpu_free_total() * PPM).checked_div(gpu_capacity).unwrap_or(0);
    let cpu_free = (node.cpu_free * PPM).checked_div(node.spec.cpu_milli).unwrap_or(0);
    let gpu = req.is_slice().then(|| least_used_gpu(node, req)).flatten();
    // A CPU-only request balances CPU first: GPU-first would pile it onto the node with the
    // most idle GPUs and take the CPU those GPUs' jobs need.
    let value = if req.gpus == 0 { spare_cpu(node) * PPM + gpu_free } else { gpu_free * PPM + cpu_free };
    Score { value: value as i64, gpu }
}

/// The node's free CPU beyond what its idle GPU share needs at the node's CPU per GPU, as a
/// fraction of its CPU (ppm).
fn spare_cpu(node: &Node) -> u64 {
    let gpu_capacity = node.gpu_free.len() as u64 * u64::from(crate::resources::WHOLE_GPU);
    let kept = (node.spec.cpu_milli * node.gpu_free_total()).checked_div(gpu_capacity).unwrap_or(0);
    (node.cpu_free.saturating_sub(kept) * PPM).checked_div(node.spec.cpu_milli).unwrap_or(0)
}

/// For a slice: the fitting GPU with the most free share (lowest index among equals).
fn least_used_gpu(node: &Node, req: &Request) -> Option<u32> {
    (0..node.gpu_free.len())
        .filter(|i| node.gpu_fits(*i, req.gpu_milli, req.gpu_memory_mib))
        .max_by_key(|i| (node.gpu_free[*i], std::cmp::Reverse(*i)))
        .map(|i| i as u32)
}

impl NodeScore for Spread {
    const NAME: &'static str = "spread";

    fn score(&self, node: &Node, req: &Request) -> Score {
        spread_score(node, req)
    }
}

/// A built policy that honours each request's [`Preference`]: `pack` asks the policy, `spread`
/// asks [`Spread`]. What [`super::PolicyKind::build`] returns.
#[derive(Debug)]
pub struct Preferring {
    inner: Box<dyn Policy>,
}

impl Preferring {
    /// Wraps a policy.
    pub fn new(inner: Box<dyn Policy>) -> Self {
        Self { inner }
    }
}

impl Policy for Preferring {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn place(
        &mut self,
        cluster: &Cluster,
        req: &Request,
        order: &[NodeId],
        rng: &mut dyn RandomSource,
    ) -> Option<Placement> {
        match req.placement {
            Preference::Pack => self.inner.place(cluster, req, order, rng),
            Preference::Spread => Spread.place(cluster, req, order, rng),
        }
    }
}
