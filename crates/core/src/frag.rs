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

/// Most shapes the typical set may hold. Scoring a node costs time in proportion to it, so it
/// must not grow with how varied the requests are (the public openb traces need at most 113).
pub const MAX_TYPICAL_SHAPES: usize = 128;

/// Most shapes kept in the full distribution ([`TypicalPods::all_shapes`]; openb: at most 312).
pub const MAX_ALL_SHAPES: usize = 1024;

/// The coarsest bucketing level (see [`TypicalPods::from_requests`]).
const COARSEST: u32 = 6;

/// A shape's key: CPU (milli), per-GPU share (milli, 0 for CPU-only), GPUs, models.
type Key = (u64, u32, u32, ModelSet);

/// The typical-pod distribution: the most frequent shapes of a workload, taken in decreasing
/// frequency until they cover at least `coverage` of it, renormalised.
#[derive(Debug, Clone, Default)]
pub struct TypicalPods {
    shapes: Vec<Shape>,
    all: Vec<Shape>,
}

impl TypicalPods {
    /// Builds the distribution from a workload's requests.
    ///
    /// Shapes are exact (FGD's definition) as long as the set stays within
    /// [`MAX_TYPICAL_SHAPES`] and the workload has at most [`MAX_ALL_SHAPES`] distinct shapes.
    /// Past that, requests are bucketed, ever more coarsely until both bounds hold: CPU on a
    /// logarithmic grid (32, 16, 8, 4, 2, then 1 bucket per doubling), and from the fourth level
    /// on the slice share too (steps of 10, 50, 100 milli-GPU); a bucket stands for the
    /// count-weighted mean of its requests. Should even the coarsest level be too varied (many
    /// GPU counts or model sets), the most frequent shapes are kept. So the set's size does not
    /// depend on how many distinct values the requests take.
    pub fn from_requests<'a>(requests: impl IntoIterator<Item = &'a Request>, coverage: f64) -> Self {
        let mut counts: HashMap<Key, u64> = HashMap::new();
        let mut total = 0u64;
        for r in requests {
            let cpu = if r.cpu_milli == 0 { DEFAULT_CPU_MILLI } else { r.cpu_milli };
            let milli = if r.gpus == 0 { 0 } else { r.gpu_milli };
            *counts.entry((cpu, milli, r.gpus, r.models)).or_default() += 1;
            total += 1;
        }
        let mut level = 0;
        let mut sorted = by_frequency(counts.iter().map(|(k, c)| (*k, *c)).collect());
        while level < COARSEST
            && (sorted.len() > MAX_ALL_SHAPES || cut(&sorted, total, coverage) > MAX_TYPICAL_SHAPES)
        {
            level += 1;
            sorted = by_frequency(bucketed(&counts, level));
        }
        let shape = |((cpu_milli, gpu_milli, gpus, models), count): (Key, u64), of: u64| Shape {
            cpu_milli,
            gpus,
            gpu_milli,
            models,
            p: count as f64 / of as f64,
        };
        let cut = cut(&sorted, total, coverage).min(MAX_TYPICAL_SHAPES);
        let covered: u64 = sorted[..cut].iter().map(|s| s.1).sum();
        let shapes = sorted[..cut].iter().map(|s| shape(*s, covered)).collect();
        let all = sorted.iter().take(MAX_ALL_SHAPES).map(|s| shape(*s, total)).collect();
        Self { shapes, all }
    }

    /// Every shape of the workload with its frequency, most frequent first.
    pub fn all_shapes(&self) -> &[Shape] {
        &self.all
    }

    /// A distribution from explicit shapes; probabilities are renormalised to sum to 1.
    pub fn from_shapes(mut shapes: Vec<Shape>) -> Self {
        let total: f64 = shapes.iter().map(|s| s.p).sum();
        if total > 0.0 {
            shapes.iter_mut().for_each(|s| s.p /= total);
        }
        Self { all: shapes.clone(), shapes }
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

/// Most frequent first; equal counts by key, descending, so the cut is deterministic.
fn by_frequency(mut shapes: Vec<(Key, u64)>) -> Vec<(Key, u64)> {
    shapes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
    shapes
}

/// How many of the most frequent shapes it takes to cover `coverage` of `total`.
fn cut(sorted: &[(Key, u64)], total: u64, coverage: f64) -> usize {
    let mut covered = 0u64;
    for (i, (_, count)) in sorted.iter().enumerate() {
        if total > 0 && covered as f64 >= coverage * total as f64 {
            return i;
        }
        covered += count;
    }
    sorted.len()
}

/// The shapes merged into buckets at `level` (1 ..= [`COARSEST`]), each standing for the
/// count-weighted mean CPU and share of its requests.
fn bucketed(counts: &HashMap<Key, u64>, level: u32) -> Vec<(Key, u64)> {
    let per_doubling = f64::from(32u32 >> (level - 1));
    let share_step = match level {
        0..=3 => 1,
        4 => 10,
        5 => 50,
        _ => 100,
    };
    // (CPU bucket, share bucket, whole GPUs, GPUs, models) -> (count, Σ count·cpu, Σ count·share)
    type Bucket = (i64, u32, bool, u32, ModelSet);
    let mut buckets: HashMap<Bucket, (u64, u128, u128)> = HashMap::new();
    for ((cpu, milli, gpus, models), count) in counts {
        let cpu_bucket = ((*cpu as f64).log2() * per_doubling).floor() as i64;
        let whole = *milli == WHOLE_GPU;
        let b = buckets.entry((cpu_bucket, milli / share_step, whole, *gpus, *models)).or_default();
        b.0 += count;
        b.1 += u128::from(*count) * u128::from(*cpu);
        b.2 += u128::from(*count) * u128::from(*milli);
    }
    buckets
        .into_iter()
        .map(|((_, _, _, gpus, models), (count, cpu, milli))| {
            let mean = |sum: u128| ((sum + u128::from(count) / 2) / u128::from(count)) as u64;
            ((mean(cpu), mean(milli) as u32, gpus, models), count)
        })
        .collect()
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
        let t = TypicalPods::from_shapes(vec![shape(1000, 1, 500, 1.0)]);
        // GPU 0 has 300 free (< 500: fragment), GPU 1 has 1000 free (usable).
        assert_eq!(t.fragment(8000, Some(0), &[300, 1000]), 300.0);
    }

    #[test]
    fn everything_is_fragment_when_the_shape_cannot_run() {
        let t = TypicalPods::from_shapes(vec![shape(9000, 1, 500, 0.5), shape(100, 0, 0, 0.5)]);
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

    #[test]
    fn the_typical_set_stays_bounded_however_varied_the_cpu_requests_are() {
        // 20,000 requests with CPU drawn from 190,000 values: exact shapes would give thousands.
        let mut x = 7u64;
        let reqs: Vec<Request> = (0..20_000)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let cpu = 10_000 + (x >> 33) % 190_000;
                let (gpus, milli) = [(1, 250), (1, 500), (1, 1000), (2, 1000), (0, 0)][i % 5];
                Request::new(cpu, 0, gpus, milli.max(1), 0, ModelSet::Any).expect("valid")
            })
            .collect();
        let typical = TypicalPods::from_requests(&reqs, 0.95);
        assert!(typical.shapes().len() <= MAX_TYPICAL_SHAPES, "{}", typical.shapes().len());
        assert!(typical.all_shapes().len() <= MAX_ALL_SHAPES, "{}", typical.all_shapes().len());
        let p: f64 = typical.shapes().iter().map(|s| s.p).sum();
        assert!((p - 1.0).abs() < 1e-9);
        let all: f64 = typical.all_shapes().iter().map(|s| s.p).sum();
        assert!(all > 0.95, "buckets, not truncation, keep the set small: {all}");
        // Every bucket stands for requests of its own kind, at a CPU inside the drawn range.
        for s in typical.shapes() {
            assert!(s.cpu_milli >= 10_000 && s.cpu_milli < 200_000, "{s:?}");
            assert!(
                [(1, 250), (1, 500), (1, 1000), (2, 1000), (0, 0)].contains(&(s.gpus, s.gpu_milli)),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_workload_within_the_bounds_keeps_its_exact_shapes() {
        let reqs: Vec<Request> = (0..100u64)
            .map(|i| {
                Request::new(1000 + i % 40, 0, 1, 100 + (i % 7) as u32, 0, ModelSet::Any).expect("valid")
            })
            .collect();
        // 100 distinct shapes, all needed for full coverage: within both bounds, so kept exact.
        let typical = TypicalPods::from_requests(&reqs, 1.0);
        assert_eq!(typical.shapes().len(), 100);
        for r in &reqs {
            assert!(
                typical.shapes().iter().any(|s| s.cpu_milli == r.cpu_milli && s.gpu_milli == r.gpu_milli)
            );
        }
    }
}
