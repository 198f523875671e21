//! The extender's model: nodes and the GPU pods on them, kept in the core's [`Cluster`] ledger so
//! that filter and prioritize see exactly what `gantry sim` would.
//!
//! Prioritize asks the policy the question `gantry sim` asks — [`Policy::place`], "which node?" —
//! and turns the answers into kube-scheduler's 0..=10: the policy's choice scores 10, the choice
//! once that node is set aside scores 8, and so on for [`RANKED`] rounds; other feasible nodes
//! score 1. The core exposes choices, not raw scores, so ranks are what can be said without a
//! second scoring path that could drift from the simulator's.

use std::collections::HashMap;
use std::sync::Arc;

use gantry_core::frag::{Shape, TypicalPods};
use gantry_core::placement::best_fit_gpu;
use gantry_core::{
    Cluster, LedgerError, ModelSet, NodeId, NodeSpec, Placement, Policy, PolicyKind, Request, SplitMix64,
};

use super::pod::PodRequest;
use super::wire::{HostPriority, HostPriorityList, MAX_EXTENDER_PRIORITY};

/// How many nodes prioritize ranks with the policy (10, 8, 6, 4, 2); the rest of the feasible ones get 1.
pub const RANKED: usize = 5;
/// Pods seen by filter but not yet bound that the model remembers (for `/bind`, which carries no spec).
const PENDING_CAP: usize = 100_000;

/// Why the model refused a change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The node is not in the model.
    #[error("node {0} is not known to the gantry extender")]
    UnknownNode(String),
    /// `/bind` for a pod that `/filter` never saw.
    #[error("pod {0} was not seen by filter; its request is unknown")]
    UnknownPod(String),
    /// The pod does not fit on the node (any more).
    #[error("pod does not fit on node {node}: {reason}")]
    DoesNotFit {
        /// The node.
        node: String,
        /// What is short.
        reason: String,
    },
    /// The ledger refused the change.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

#[derive(Debug, Clone)]
struct Bound {
    id: u64,
    node: String,
    request: Request,
}

/// Nodes, the GPU pods bound to them, and the policy scoring new ones.
#[derive(Debug)]
pub struct Model {
    cluster: Cluster,
    ids: HashMap<String, NodeId>,
    pods: HashMap<String, Bound>,
    pending: HashMap<String, Request>,
    kind: PolicyKind,
    typical: Arc<TypicalPods>,
    policy: Box<dyn Policy>,
    next_id: u64,
}

impl Model {
    /// An empty model scoring with `kind` over the typical-pod distribution `typical`.
    pub fn new(kind: PolicyKind, typical: Arc<TypicalPods>) -> Self {
        Self {
            cluster: Cluster::default(),
            ids: HashMap::new(),
            pods: HashMap::new(),
            pending: HashMap::new(),
            policy: kind.build(typical.clone()),
            kind,
            typical,
            next_id: 0,
        }
    }

    /// Gantry's policy over [`default_typical_pods`].
    pub fn gantry() -> Self {
        Self::new(PolicyKind::Gantry, Arc::new(default_typical_pods()))
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the model has no nodes.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Adds a node or updates its capacity (a changed node rebuilds the ledger and replays its pods).
    pub fn upsert_node(&mut self, spec: NodeSpec) -> Result<(), ModelError> {
        match self.ids.get(&spec.name) {
            None => {
                let id = self.cluster.add_node(spec.clone())?;
                self.ids.insert(spec.name, id);
                Ok(())
            }
            Some(id) if self.cluster.nodes()[*id].spec == spec => Ok(()),
            Some(id) => {
                let mut specs: Vec<NodeSpec> = self.cluster.nodes().iter().map(|n| n.spec.clone()).collect();
                specs[*id] = spec;
                self.rebuild(specs)
            }
        }
    }

    fn rebuild(&mut self, specs: Vec<NodeSpec>) -> Result<(), ModelError> {
        self.cluster = Cluster::new(specs)?;
        self.policy = self.kind.build(self.typical.clone());
        let pods = std::mem::take(&mut self.pods);
        for (key, b) in pods {
            if let Err(e) = self.upsert_pod(&key, &b.node, b.request) {
                tracing::warn!(pod = %key, error = %e, "pod no longer fits its changed node; dropped from the model");
            }
        }
        Ok(())
    }

    /// Records a pod bound to `node` (from a watcher, or from `/bind`); replaces an earlier record.
    pub fn upsert_pod(&mut self, key: &str, node: &str, request: Request) -> Result<(), ModelError> {
        let id = *self.ids.get(node).ok_or_else(|| ModelError::UnknownNode(node.to_string()))?;
        self.remove_pod(key);
        let n = &self.cluster.nodes()[id];
        if let Some(reason) = n.why_not(&request) {
            return Err(ModelError::DoesNotFit { node: node.to_string(), reason: reason.to_string() });
        }
        // The GPUs the policy takes on this node, as `gantry sim` would; the ledger's own pick
        // only if the policy declines (it scores nodes the filter already accepted).
        let gpus = if request.gpus == 0 {
            Vec::new()
        } else if let Some(p) = self.policy.place(&self.cluster, &request, &[id], &mut SplitMix64::new(0)) {
            p.gpus
        } else if request.is_slice() {
            best_fit_gpu(n, &request).into_iter().collect()
        } else {
            n.lowest_idle_gpus(request.gpus).unwrap_or_default()
        };
        self.next_id += 1;
        self.cluster.allocate(self.next_id, &request, &Placement { node: id, gpus })?;
        self.pods.insert(key.to_string(), Bound { id: self.next_id, node: node.to_string(), request });
        self.pending.remove(key);
        Ok(())
    }

    /// Forgets a pod (it ended or was deleted); returns whether it was held.
    pub fn remove_pod(&mut self, key: &str) -> bool {
        match self.pods.remove(key) {
            Some(b) => self.cluster.release(b.id).is_ok(),
            None => false,
        }
    }

    fn remember(&mut self, pod: &PodRequest) {
        if self.pending.len() >= PENDING_CAP {
            self.pending.clear();
        }
        self.pending.insert(pod.key.clone(), pod.request);
    }

    /// Splits `names` into nodes that can hold the pod and, for the rest, why not. The second map
    /// holds reasons preemption cannot fix (unknown node, no GPUs, GPU too small).
    pub fn filter(&mut self, pod: &PodRequest, names: &[String]) -> Filtered {
        self.remember(pod);
        let mut out = Filtered::default();
        for name in names {
            let Some(id) = self.ids.get(name) else {
                out.unresolvable.push((name.clone(), ModelError::UnknownNode(name.clone()).to_string()));
                continue;
            };
            let node = &self.cluster.nodes()[*id];
            match node.why_not(&pod.request) {
                None => out.fit.push(name.clone()),
                Some(why) if never_fits(&node.spec, &pod.request) => {
                    out.unresolvable.push((name.clone(), format!("{why} (node too small)")))
                }
                Some(why) => out.failed.push((name.clone(), why.to_string())),
            }
        }
        out
    }

    /// Scores `names` 0..=10 by the policy's ranking (see the module docs).
    pub fn prioritize(&mut self, pod: &PodRequest, names: &[String]) -> HostPriorityList {
        self.remember(pod);
        let mut scores: HashMap<NodeId, i64> = HashMap::new();
        let mut order: Vec<NodeId> = names
            .iter()
            .filter_map(|n| self.ids.get(n).copied())
            .filter(|id| self.cluster.nodes()[*id].fits(&pod.request))
            .collect();
        order.iter().for_each(|id| {
            scores.insert(*id, 1);
        });
        let mut rng = SplitMix64::new(0);
        for rank in 0..RANKED {
            let Some(p) = self.policy.place(&self.cluster, &pod.request, &order, &mut rng) else { break };
            scores.insert(p.node, MAX_EXTENDER_PRIORITY - 2 * rank as i64);
            order.retain(|id| *id != p.node);
        }
        names
            .iter()
            .map(|n| HostPriority {
                host: n.clone(),
                score: self.ids.get(n).and_then(|id| scores.get(id)).copied().unwrap_or(0),
            })
            .collect()
    }

    /// Records kube-scheduler's decision for a pod seen by filter.
    pub fn bind(&mut self, key: &str, node: &str) -> Result<(), ModelError> {
        let request = *self.pending.get(key).ok_or_else(|| ModelError::UnknownPod(key.to_string()))?;
        self.upsert_pod(key, node, request)
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&gantry_core::Node> {
        self.ids.get(name).and_then(|id| self.cluster.node(*id))
    }

    /// Read access to the ledger (tests, benchmarks).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }
}

/// Outcome of [`Model::filter`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filtered {
    /// Nodes that can hold the pod.
    pub fit: Vec<String>,
    /// Node and reason, where freeing capacity could help.
    pub failed: Vec<(String, String)>,
    /// Node and reason, where nothing will help.
    pub unresolvable: Vec<(String, String)>,
}

fn never_fits(spec: &NodeSpec, req: &Request) -> bool {
    req.gpus > spec.gpus
        || req.cpu_milli > spec.cpu_milli
        || req.memory_mib > spec.memory_mib
        || (spec.gpu_memory_mib > 0 && req.gpu_memory_mib > spec.gpu_memory_mib)
}

/// A typical-pod distribution for when no trace is at hand: whole GPUs (1, 2, 4, 8) and slices
/// (½, ¼), with CPU in proportion. A deployment should pass its own, built from its pods.
pub fn default_typical_pods() -> TypicalPods {
    let shape =
        |cpu_milli, gpus, gpu_milli, p| Shape { cpu_milli, gpus, gpu_milli, models: ModelSet::Any, p };
    TypicalPods::from_shapes(vec![
        shape(8_000, 1, 1000, 0.35),
        shape(16_000, 2, 1000, 0.1),
        shape(32_000, 4, 1000, 0.1),
        shape(64_000, 8, 1000, 0.1),
        shape(4_000, 1, 500, 0.2),
        shape(2_000, 1, 250, 0.15),
    ])
}
