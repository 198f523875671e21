//! `filter` + `prioritize` latency on a synthetic model, against a plain best-fit scorer.
//!
//! Both sides see the same nodes and the same pod stream, and both bind their choice so that
//! state (and the policy's per-node caches) moves as it would in a cluster. Reported as p50/p99
//! per call and the ratio of the two p99s, so the figure is comparable across machines. The timing
//! is in process (model calls, no HTTP or JSON), which is where the policy's cost lives.

use std::time::{Duration, Instant};

use gantry_core::{ModelSet, NodeSpec, RandomSource, Request, SplitMix64};

use super::model::Model;
use super::pod::PodRequest;

/// Latency figures of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchReport {
    /// Nodes in the model.
    pub nodes: usize,
    /// Calls measured per side.
    pub calls: usize,
    /// Extender (gantry policy): median and p99 per filter+prioritize, microseconds.
    pub gantry_p50_us: f64,
    /// See above.
    pub gantry_p99_us: f64,
    /// Plain best-fit scorer: median and p99 per call, microseconds.
    pub bestfit_p50_us: f64,
    /// See above.
    pub bestfit_p99_us: f64,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "extender filter+prioritize on {} nodes, {} calls: gantry p50 {:.0} us, p99 {:.0} us; \
             best-fit p50 {:.0} us, p99 {:.0} us; p99 ratio {:.2}",
            self.nodes,
            self.calls,
            self.gantry_p50_us,
            self.gantry_p99_us,
            self.bestfit_p50_us,
            self.bestfit_p99_us,
            self.ratio()
        )
    }
}

impl BenchReport {
    /// Extender p99 over best-fit p99.
    pub fn ratio(&self) -> f64 {
        self.gantry_p99_us / self.bestfit_p99_us.max(1e-3)
    }
}

fn node_specs(n: usize) -> Vec<NodeSpec> {
    (0..n)
        .map(|i| NodeSpec {
            name: format!("node-{i:04}"),
            cpu_milli: 96_000,
            memory_mib: 512 * 1024,
            gpus: 8,
            gpu_model: Some(if i % 4 == 0 { "H100" } else { "A100" }.to_string()),
            gpu_memory_mib: 81_920,
        })
        .collect()
}

fn request(rng: &mut SplitMix64) -> Request {
    let any = ModelSet::Any;
    let r = match rng.next_u64() % 6 {
        0 => Request::new(8_000, 32_768, 1, 1000, 0, any),
        1 => Request::new(16_000, 65_536, 2, 1000, 0, any),
        2 => Request::new(32_000, 131_072, 4, 1000, 0, any),
        3 => Request::new(4_000, 16_384, 1, 500, 20_480, any),
        _ => Request::new(2_000, 8_192, 1, 250, 10_240, any),
    };
    r.expect("benchmark shapes are valid")
}

/// A model of `nodes` nodes, about half full.
fn filled(mut model: Model, nodes: usize, seed: u64) -> Model {
    for spec in node_specs(nodes) {
        model.upsert_node(spec).expect("distinct names");
    }
    let mut rng = SplitMix64::new(seed);
    for i in 0..nodes * 3 {
        let node = format!("node-{:04}", rng.next_u64() as usize % nodes);
        let _ = model.upsert_pod(&format!("fill/p{i}"), &node, request(&mut rng));
    }
    model
}

/// Runs `calls` filter+prioritize(+bind) rounds on a `nodes`-node model for each side.
pub fn run(nodes: usize, calls: usize) -> BenchReport {
    let names: Vec<String> = node_specs(nodes).into_iter().map(|s| s.name).collect();
    let gantry =
        side(filled(Model::gantry(), nodes, 7), &names, calls, |m, pod, fit| m.prioritize(pod, fit).len());
    let bestfit =
        side(filled(Model::gantry(), nodes, 7), &names, calls, |m, pod, fit| best_fit(m, pod, fit).len());
    BenchReport {
        nodes,
        calls,
        gantry_p50_us: pct(&gantry, 0.50),
        gantry_p99_us: pct(&gantry, 0.99),
        bestfit_p50_us: pct(&bestfit, 0.50),
        bestfit_p99_us: pct(&bestfit, 0.99),
    }
}

fn side(
    mut model: Model,
    names: &[String],
    calls: usize,
    mut score: impl FnMut(&mut Model, &PodRequest, &[String]) -> usize,
) -> Vec<Duration> {
    let mut rng = SplitMix64::new(11);
    let mut times = Vec::with_capacity(calls);
    for i in 0..calls {
        let pod = PodRequest::new(format!("bench/p{i}"), request(&mut rng));
        let start = Instant::now();
        let filtered = model.filter(&pod, names);
        let scored = score(&mut model, &pod, &filtered.fit);
        times.push(start.elapsed());
        if scored > 0
            && let Some(first) = filtered.fit.first()
        {
            let _ = model.bind(&pod.key, first);
        }
    }
    times.sort();
    times
}

/// The plain scorer: least free GPU share left after placement wins, one pass, no policy.
fn best_fit(model: &Model, pod: &PodRequest, fit: &[String]) -> Vec<(String, u64)> {
    fit.iter()
        .filter_map(|name| model.node(name).map(|n| (name, n)))
        .map(|(name, n)| (name.clone(), n.gpu_free_total().saturating_sub(pod.request.gpu_milli_total())))
        .collect()
}

fn pct(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e6
}
