//! How evenly a placement preference spreads GPU allocation over the nodes (`gantry sim spread`),
//! the figure behind a node pool's `--placement pack|spread`.
//!
//! One run is the FGD experiment's arrival order for a seed (the same pods, shuffled and tuned,
//! the same seeded node order), placed with every request's [`Preference`] set to `pack` or
//! `spread`, and stopped once the allocated GPU share reaches `fill` of the capacity (half full
//! by default). Then, over the nodes that have GPUs, each node's allocated share of its own GPUs
//! (%) is read and the spread is max − min of those, in percentage points (nodes of 8 and of 2
//! GPUs are compared by how loaded they are), with the same in GPUs for the nodes of the most
//! common size. Max − min in points is bounded below by the work itself: a whole-node pod makes
//! its node 100 % whatever the preference, and a 1-GPU node is 0 or 100 %; the percentiles and
//! the standard deviation show the rest of the distribution. A
//! packing run leaves some nodes full and others idle at half fill (a spread near 100 points);
//! spreading keeps every node near the cluster's fill.

use gantry_core::rng::permutation;
use gantry_core::{PolicyKind, Preference, SplitMix64};

use crate::experiment::{Experiment, Refused};

/// What one run leaves on the nodes at the fill point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Balance {
    /// Allocated GPU share of the cluster when the run stopped, %.
    pub fill_pct: f64,
    /// Max − min of the nodes' allocated share of their GPUs, percentage points.
    pub spread_pct: f64,
    /// Max − min of the allocated GPUs of the nodes of the most common size.
    pub spread_gpus: f64,
    /// The 90th minus the 10th percentile of the nodes' allocated share, percentage points
    /// (max − min is set by a few outliers: a whole-node pod, a pod pinned to a rare model).
    pub p90_p10_pct: f64,
    /// Standard deviation of the nodes' allocated share, percentage points.
    pub stdev_pct: f64,
    /// Pods that found no node before the fill point.
    pub failed: usize,
}

impl Experiment {
    /// Places this seed's arrivals with `policy` and `preference` until `fill` (0–1) of the GPU
    /// capacity is allocated; a placement the ledger refuses is an error.
    pub fn balance(
        &self,
        policy: PolicyKind,
        preference: Preference,
        seed: u64,
        fill: f64,
    ) -> Result<Balance, Refused> {
        let mut rng = SplitMix64::new(seed);
        let arrivals = self.arrivals(&mut rng);
        let nodes = self.template.nodes().len();
        let perm = permutation(nodes, &mut rng);
        let mut order: Vec<usize> = (0..nodes).collect();
        order.sort_by_key(|i| perm[*i]);
        let mut cluster = self.template.clone();
        let mut placer = policy.build(self.typical.clone());
        let target = fill * cluster.capacity_milli() as f64;
        let mut failed = 0;
        for (k, pod) in arrivals.iter().enumerate() {
            if cluster.used_milli() as f64 >= target {
                break;
            }
            let req = gantry_core::Request { placement: preference, ..self.requests[*pod] };
            match placer.place(&cluster, &req, &order, &mut rng) {
                Some(p) => cluster.allocate(k as u64, &req, &p).map_err(|error| Refused {
                    policy: policy.as_str(),
                    seed,
                    pod: *pod,
                    error,
                })?,
                None => failed += 1,
            }
        }
        Ok(measure(&cluster, failed))
    }
}

fn measure(cluster: &gantry_core::Cluster, failed: usize) -> Balance {
    let gpu_nodes = || cluster.nodes().iter().filter(|n| !n.gpu_free.is_empty());
    // GPUs are compared between nodes of one size: the most common (8 on openb). Across sizes
    // a full 8-GPU node beside any empty node read 8 GPUs whatever the preference.
    let mut sizes = std::collections::BTreeMap::new();
    for n in gpu_nodes() {
        *sizes.entry(n.gpu_free.len()).or_insert(0usize) += 1;
    }
    let common = sizes.iter().max_by_key(|(size, count)| (**count, **size)).map_or(0, |(size, _)| *size);
    let loads: Vec<(f64, f64, usize)> = gpu_nodes()
        .map(|n| {
            let capacity = n.gpu_free.len() as f64 * 1000.0;
            let used = capacity - n.gpu_free_total() as f64;
            (100.0 * used / capacity, used / 1000.0, n.gpu_free.len())
        })
        .collect();
    let range = |f: fn(&(f64, f64, usize)) -> f64, size: Option<usize>| {
        let of = || loads.iter().filter(|l| size.is_none_or(|s| l.2 == s)).map(f);
        let lo = of().fold(f64::INFINITY, f64::min);
        let hi = of().fold(f64::NEG_INFINITY, f64::max);
        if of().next().is_none() { 0.0 } else { hi - lo }
    };
    let n = loads.len().max(1) as f64;
    let mean = loads.iter().map(|l| l.0).sum::<f64>() / n;
    let stdev = (loads.iter().map(|l| (l.0 - mean).powi(2)).sum::<f64>() / n).sqrt();
    let capacity = cluster.capacity_milli().max(1) as f64;
    let mut sorted: Vec<f64> = loads.iter().map(|l| l.0).collect();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| {
        sorted.get(((sorted.len().saturating_sub(1)) as f64 * q).round() as usize).copied().unwrap_or(0.0)
    };
    Balance {
        p90_p10_pct: at(0.9) - at(0.1),
        fill_pct: 100.0 * cluster.used_milli() as f64 / capacity,
        spread_pct: range(|l| l.0, None),
        spread_gpus: range(|l| l.1, Some(common)),
        stdev_pct: stdev,
        failed,
    }
}

#[cfg(test)]
mod tests {
    use gantry_core::NodeSpec;

    use super::*;
    use crate::trace::PodRow;

    fn nodes(n: usize, gpus: u32) -> Vec<NodeSpec> {
        (0..n)
            .map(|i| NodeSpec {
                name: format!("n{i:02}"),
                cpu_milli: 96_000,
                memory_mib: 1 << 20,
                gpus,
                gpu_model: Some("V100".into()),
                gpu_memory_mib: 0,
            })
            .collect()
    }

    fn one_gpu_pods(n: usize) -> Vec<PodRow> {
        (0..n)
            .map(|i| PodRow {
                name: format!("p{i:04}"),
                cpu_milli: 1000,
                memory_mib: 1024,
                num_gpu: 1,
                gpu_milli: 1000,
                gpu_spec: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn on_a_half_full_cluster_spread_keeps_every_node_near_half_and_packing_does_not() {
        let experiment = Experiment::new(nodes(8, 4), one_gpu_pods(64), 1.0).expect("cluster");
        for policy in [PolicyKind::Gantry, PolicyKind::Packing] {
            let pack = experiment.balance(policy, Preference::Pack, 1, 0.5).expect("pack");
            let spread = experiment.balance(policy, Preference::Spread, 1, 0.5).expect("spread");
            assert_eq!((pack.fill_pct, spread.fill_pct), (50.0, 50.0));
            assert_eq!(spread.spread_gpus, 0.0, "{policy:?}: 2 GPUs on every node: {spread:?}");
            assert_eq!(pack.spread_gpus, 4.0, "{policy:?}: full nodes beside idle ones: {pack:?}");
        }
    }
}
