//! The FGD "fill the cluster" experiment (Weng et al., ATC'23, §6 and the authors' simulator).
//!
//! One run: sort pods by name, shuffle them with the seed, tune the workload to `tune` × the
//! cluster's GPU capacity, give the nodes a seeded priority permutation (it breaks score ties),
//! then submit pods one at a time, each with exactly one scheduling attempt and no departures.
//! After every pod the allocation and fragmentation are recorded against the arrived workload.

use std::sync::Arc;

use gantry_core::frag::TypicalPods;
use gantry_core::rng::{permutation, shuffle};
use gantry_core::{
    Cluster, LedgerError, ModelSet, NodeId, NodeSpec, Placement, PolicyKind, RandomSource, Request,
    SplitMix64,
};

use crate::trace::PodRow;

/// Highest arrived-% bin recorded.
pub const MAX_BIN: usize = 130;

/// Share of the original trace's pods that the typical-pod set must cover.
pub const TYPICAL_COVERAGE: f64 = 0.95;

/// A cluster and a workload, ready to be run with any policy and seed.
#[derive(Debug)]
pub struct Experiment {
    pub(crate) requests: Vec<Request>,
    pub(crate) typical: Arc<TypicalPods>,
    pub(crate) template: Cluster,
    tune: f64,
}

/// A policy chose a placement the ledger refuses: a bug in the policy, reported rather than
/// counted as a pod that found no node.
#[derive(Debug, thiserror::Error)]
#[error("policy `{policy}` (seed {seed}) placed pod #{pod} where the ledger refuses it: {error}")]
pub struct Refused {
    /// The policy.
    pub policy: &'static str,
    /// The seed.
    pub seed: u64,
    /// Index of the pod in the sorted trace.
    pub pod: usize,
    /// The ledger's reason.
    pub error: LedgerError,
}

/// The curves of one run, indexed by arrived % (0..=130).
#[derive(Debug, Clone)]
pub struct RunCurve {
    /// GPU allocation, % of capacity.
    pub alloc_pct: Vec<f64>,
    /// Fragmented GPU share (FGD's measure), % of capacity.
    pub frag_pct: Vec<f64>,
    /// Pods that found no node.
    pub failed: usize,
    /// Pods submitted.
    pub submitted: usize,
}

/// Every decision of one run, for replaying it elsewhere (the Kubernetes extender's test).
#[derive(Debug, Clone, Default)]
pub struct Replay {
    /// The nodes in tie-breaking order (the seeded priority permutation).
    pub order: Vec<NodeId>,
    /// Each arrival's request and where it was placed (`None`: it found no node).
    pub pods: Vec<(Request, Option<Placement>)>,
}

impl Experiment {
    /// Prepares an experiment: nodes are sorted by name; requests are resolved against the
    /// cluster's GPU models; the typical-pod set is built from the untuned trace.
    pub fn new(mut nodes: Vec<NodeSpec>, mut pods: Vec<PodRow>, tune: f64) -> Result<Self, LedgerError> {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        let template = Cluster::new(nodes)?;
        let requests: Vec<Request> = pods.iter().map(|p| request_of(&template, p)).collect();
        let typical = Arc::new(TypicalPods::from_requests(&requests, TYPICAL_COVERAGE));
        Ok(Self { requests, typical, template, tune })
    }

    /// Total GPUs of the cluster.
    pub fn total_gpus(&self) -> u64 {
        self.template.capacity_milli() / 1000
    }

    /// The typical-pod distribution.
    pub fn typical(&self) -> &TypicalPods {
        &self.typical
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.template.nodes().len()
    }

    /// Number of pods in the (untuned) trace.
    pub fn pod_count(&self) -> usize {
        self.requests.len()
    }

    /// The pod order of one seed: shuffled, then tuned to `tune` × capacity.
    pub(crate) fn arrivals(&self, rng: &mut dyn RandomSource) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.requests.len()).collect();
        shuffle(&mut order, rng);
        let target = self.tune * self.template.capacity_milli() as f64;
        let mut total: u64 = self.requests.iter().map(Request::gpu_milli_total).sum();
        if (total as f64) > target {
            while (total as f64) > target && !order.is_empty() {
                let victim = order.remove(rng.index(order.len()));
                total -= self.requests[victim].gpu_milli_total();
            }
        } else if !self.requests.is_empty() {
            // The authors' quirk: the stop test adds the copy's per-GPU share, the sum its total.
            loop {
                let pick = rng.index(self.requests.len());
                let req = &self.requests[pick];
                if (total + u64::from(req.gpu_milli)) as f64 > target {
                    break;
                }
                total += req.gpu_milli_total();
                order.push(pick);
            }
        }
        order
    }

    /// Runs one policy with one seed. A placement the ledger refuses is an error.
    pub fn run(&self, policy: PolicyKind, seed: u64) -> Result<RunCurve, Refused> {
        self.run_recorded(policy, seed, None)
    }

    /// Runs one policy with one seed and returns every placement it made, in arrival order, with
    /// the node order that broke ties.
    pub fn replay(&self, policy: PolicyKind, seed: u64) -> Result<Replay, Refused> {
        let mut replay = Replay::default();
        self.run_recorded(policy, seed, Some(&mut replay))?;
        Ok(replay)
    }

    fn run_recorded(
        &self,
        policy: PolicyKind,
        seed: u64,
        mut record: Option<&mut Replay>,
    ) -> Result<RunCurve, Refused> {
        let kind = policy;
        let mut rng = SplitMix64::new(seed);
        let arrivals = self.arrivals(&mut rng);
        let nodes = self.template.nodes().len();
        let perm = permutation(nodes, &mut rng);
        // perm[i] is node i's priority; ties go to the lowest priority number.
        let mut order: Vec<usize> = (0..nodes).collect();
        order.sort_by_key(|i| perm[*i]);
        if let Some(r) = record.as_deref_mut() {
            r.order = order.clone();
        }
        let mut cluster = self.template.clone();
        let mut policy = policy.build(self.typical.clone());
        let mut bins = Bins::default();
        let capacity = cluster.capacity_milli() as f64;
        let mut node_frag: Vec<f64> = cluster.nodes().iter().map(|n| self.typical.node_fragment(n)).collect();
        let mut frag_total: f64 = node_frag.iter().sum();
        let mut arrived = 0u64;
        let mut failed = 0;
        for (k, pod) in arrivals.iter().enumerate() {
            let req = &self.requests[*pod];
            arrived += req.gpu_milli_total();
            let placed = policy.place(&cluster, req, &order, &mut rng);
            match &placed {
                Some(p) => {
                    cluster.allocate(k as u64, req, p).map_err(|error| Refused {
                        policy: kind.as_str(),
                        seed,
                        pod: *pod,
                        error,
                    })?;
                    let f = self.typical.node_fragment(&cluster.nodes()[p.node]);
                    frag_total += f - node_frag[p.node];
                    node_frag[p.node] = f;
                }
                None => failed += 1,
            }
            if let Some(r) = record.as_deref_mut() {
                r.pods.push((*req, placed));
            }
            let arrive_pct = (100.0 * arrived as f64 / capacity).round_ties_even();
            let alloc_pct = (100.0 * cluster.used_milli() as f64 / capacity * 100.0).round() / 100.0;
            bins.add(arrive_pct, alloc_pct, 100.0 * frag_total / capacity);
        }
        let (alloc_pct, frag_pct) = bins.curves();
        Ok(RunCurve { alloc_pct, frag_pct, failed, submitted: arrivals.len() })
    }
}

fn request_of(cluster: &Cluster, pod: &PodRow) -> Request {
    let models = if pod.gpu_spec.is_empty() { ModelSet::Any } else { cluster.model_set(&pod.gpu_spec) };
    Request {
        cpu_milli: pod.cpu_milli,
        memory_mib: pod.memory_mib,
        gpus: pod.num_gpu,
        gpu_milli: pod.gpu_milli,
        gpu_memory_mib: 0,
        models,
        ..Request::cpu_only(pod.cpu_milli, pod.memory_mib)
    }
}

/// Per-arrived-% sums of the per-event values.
#[derive(Debug)]
struct Bins {
    count: [u32; MAX_BIN + 1],
    alloc: [f64; MAX_BIN + 1],
    frag: [f64; MAX_BIN + 1],
}

impl Default for Bins {
    fn default() -> Self {
        Self { count: [0; MAX_BIN + 1], alloc: [0.0; MAX_BIN + 1], frag: [0.0; MAX_BIN + 1] }
    }
}

impl Bins {
    fn add(&mut self, arrive_pct: f64, alloc_pct: f64, frag_pct: f64) {
        let bin = (arrive_pct.max(0.0) as usize).min(MAX_BIN);
        self.count[bin] += 1;
        self.alloc[bin] += alloc_pct;
        self.frag[bin] += frag_pct;
    }

    /// Mean per bin; a bin without events takes the mean of the events within ±1 bin, and if
    /// there are none either, the nearest earlier value (the run ended below that arrival).
    fn curves(&self) -> (Vec<f64>, Vec<f64>) {
        let mut alloc = vec![0.0; MAX_BIN + 1];
        let mut frag = vec![0.0; MAX_BIN + 1];
        for b in 0..=MAX_BIN {
            let range = if self.count[b] > 0 { b..=b } else { b.saturating_sub(1)..=(b + 1).min(MAX_BIN) };
            let n: u32 = self.count[range.clone()].iter().sum();
            if n > 0 {
                alloc[b] = self.alloc[range.clone()].iter().sum::<f64>() / f64::from(n);
                frag[b] = self.frag[range].iter().sum::<f64>() / f64::from(n);
            } else if b > 0 {
                alloc[b] = alloc[b - 1];
                frag[b] = frag[b - 1];
            }
        }
        (alloc, frag)
    }
}
