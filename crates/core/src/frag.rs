//! FGD's fragmentation measure (Weng et al., ATC'23) over a "typical pod" distribution.
//!
//! For a node and a typical pod shape t, the fragment f(node, t) is the free GPU share that t
//! cannot use there: all of it when t cannot run on the node at all (no GPU, not enough CPU,
//! wrong model, not enough idle GPUs, or t is CPU-only), otherwise the free share of the GPUs
//! whose free share is below t's per-GPU share. F(node) = Σ p_t · f(node, t).

use std::collections::HashMap;

use crate::cluster::Node;
use crate::resources::{ModelId, ModelSet, Request, WHOLE_GPU};

/// Kubernetes counts a zero CPU request as 100 milli-cores when spreading; FGD's typical-pod key
/// does the same.
const DEFAULT_CPU_MILLI: u64 = 100;

/// One typical pod shape and its probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// CPU in milli-cores.
    pub cpu_milli: u64,
    /// Number of GPUs.
    pub gpus: u32,
    /// Per-GPU share, milli-GPU.
    pub gpu_milli: u32,
    /// Acceptable models.
    pub models: ModelSet,
    /// Probability (the shapes' probabilities sum to 1).
    pub p: f64,
}

/// The typical-pod distribution: the most frequent shapes of a workload, taken in decreasing
/// frequency until they cover at least `coverage` of it, renormalised.
#[derive(Debug, Clone, Default)]
pub struct TypicalPods {
    shapes: Vec<Shape>,
}

impl TypicalPods {
    /// Builds the distribution from a workload's requests.
    pub fn from_requests<'a>(requests: impl IntoIterator<Item = &'a Request>, coverage: f64) -> Self {
        let mut counts: HashMap<(u64, u32, u32, ModelSet), u64> = HashMap::new();
        let mut total = 0u64;
        for r in requests {
            let cpu = if r.cpu_milli == 0 { DEFAULT_CPU_MILLI } else { r.cpu_milli };
            let milli = if r.gpus == 0 { 0 } else { r.gpu_milli };
            *counts.entry((cpu, milli, r.gpus, r.models)).or_default() += 1;
            total += 1;
        }
        let mut sorted: Vec<_> = counts.into_iter().collect();
        // Most frequent first; equal counts by key, descending, so the cut is deterministic.
        sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        let mut taken = Vec::new();
        let mut covered = 0u64;
        for (key, count) in sorted {
            if total > 0 && covered as f64 >= coverage * total as f64 {
                break;
            }
            covered += count;
            taken.push((key, count));
        }
        let shapes = taken
            .into_iter()
            .map(|((cpu_milli, gpu_milli, gpus, models), count)| Shape {
                cpu_milli,
                gpus,
                gpu_milli,
                models,
                p: count as f64 / covered as f64,
            })
            .collect();
        Self { shapes }
    }

    /// The shapes, most frequent first.
    pub fn shapes(&self) -> &[Shape] {
        &self.shapes
    }

    /// F for a node's current state.
    pub fn node_fragment(&self, node: &Node) -> f64 {
        self.fragment(node.cpu_free, node.model, &node.gpu_free)
    }

    /// F for a hypothetical node state: free CPU, model and free share of each GPU.
    pub fn fragment(&self, cpu_free: u64, model: Option<ModelId>, gpu_free: &[u32]) -> f64 {
        let total: u32 = gpu_free.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let idle = gpu_free.iter().filter(|f| **f == WHOLE_GPU).count() as u32;
        let max_free = gpu_free.iter().copied().max().unwrap_or(0);
        self.shapes
            .iter()
            .map(|t| t.p * f64::from(shape_fragment(t, cpu_free, model, gpu_free, total, idle, max_free)))
            .sum()
    }
}

fn shape_fragment(
    t: &Shape,
    cpu_free: u64,
    model: Option<ModelId>,
    gpu_free: &[u32],
    total: u32,
    idle: u32,
    max_free: u32,
) -> u32 {
    let runs = t.gpus > 0
        && t.cpu_milli <= cpu_free
        && t.models.allows(model)
        && if t.gpu_milli < WHOLE_GPU { max_free >= t.gpu_milli } else { idle >= t.gpus };
    if !runs {
        return total;
    }
    gpu_free.iter().filter(|f| **f < t.gpu_milli).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(cpu: u64, gpus: u32, milli: u32, p: f64) -> Shape {
        Shape { cpu_milli: cpu, gpus, gpu_milli: milli, models: ModelSet::Any, p }
    }

    #[test]
    fn free_share_below_the_typical_slice_counts_as_fragment() {
        let t = TypicalPods { shapes: vec![shape(1000, 1, 500, 1.0)] };
        // GPU 0 has 300 free (< 500: fragment), GPU 1 has 1000 free (usable).
        assert_eq!(t.fragment(8000, Some(0), &[300, 1000]), 300.0);
    }

    #[test]
    fn everything_is_fragment_when_the_shape_cannot_run() {
        let t = TypicalPods { shapes: vec![shape(9000, 1, 500, 0.5), shape(100, 0, 0, 0.5)] };
        // Not enough CPU for the first shape, and the second is CPU-only: both see all 1300.
        assert_eq!(t.fragment(8000, Some(0), &[300, 1000]), 1300.0);
    }

    #[test]
    fn typical_set_stops_once_coverage_is_reached_and_renormalises() {
        let a = Request::new(1000, 0, 1, 500, 0, ModelSet::Any).expect("valid");
        let b = Request::new(2000, 0, 1, 1000, 0, ModelSet::Any).expect("valid");
        let c = Request::cpu_only(0, 0);
        let reqs = [a, a, a, a, a, a, b, b, b, c];
        let typical = TypicalPods::from_requests(&reqs, 0.9);
        let shapes = typical.shapes();
        assert_eq!(shapes.len(), 2);
        assert!((shapes[0].p - 6.0 / 9.0).abs() < 1e-12);
        assert!((shapes[1].p - 3.0 / 9.0).abs() < 1e-12);
    }
}
