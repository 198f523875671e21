//! The extender's model: nodes and the GPU pods on them, kept in the core's [`Cluster`] ledger so
//! that filter and prioritize see exactly what `gantry sim` would.
//!
//! Prioritize asks the policy the question `gantry sim` asks — [`Policy::place`], "which node?" —
//! and turns the answers into kube-scheduler's 0..=10: the policy's choice scores 10, the choice
//! once that node is set aside scores 8, and so on for [`RANKED`] rounds; other feasible nodes
//! score 1. The core exposes choices, not raw scores, so ranks are what can be said without a
//! second scoring path that could drift from the simulator's.
//!
//! The model is pure: no I/O, no clock. It holds three kinds of pod: *bound* (seen bound by the
//! API server through [`Model::observe_pod`], or recorded by a bind without one), *reserved*
//! (this extender's bind is under way: [`Model::reserve`], then [`Model::confirm`] or
//! [`Model::unreserve`], which leaves the model as it was) and *pending* (seen by filter, kept
//! for `/bind`, which carries no spec). A bound pod whose node is not known yet is kept and takes
//! its GPUs when the node arrives; a full list from a watcher replaces nodes or bound pods
//! ([`Model::replace_nodes`], [`Model::replace_pods`]) but never drops a reservation.

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
    /// `/bind` for a pod the API server already shows bound.
    #[error("pod {pod} is already bound to node {node}")]
    AlreadyBound {
        /// The pod (`namespace/name`).
        pod: String,
        /// Where it is bound.
        node: String,
    },
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

/// A pod the model holds GPUs for: bound (seen bound by the API server, or recorded by a bind
/// without one) or reserved (this extender's bind is under way).
#[derive(Debug, Clone)]
struct Held {
    /// The ledger's allocation; `None` while the pod's node is unknown or too small (a pod seen
    /// bound before its node, or left over after its node shrank). It is placed when it can be.
    id: Option<u64>,
    node: String,
    request: Request,
    reserved: bool,
}

/// Nodes, the GPU pods bound to them, and the policy scoring new ones.
#[derive(Debug)]
pub struct Model {
    cluster: Cluster,
    ids: HashMap<String, NodeId>,
    pods: HashMap<String, Held>,
    pending: HashMap<String, PodRequest>,
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

    /// Adds a node or updates its capacity (a changed node rebuilds the ledger and replays its
    /// pods); pods seen bound to it before it was known take their GPUs now.
    pub fn upsert_node(&mut self, spec: NodeSpec) -> Result<(), ModelError> {
        match self.ids.get(&spec.name) {
            None => {
                let name = spec.name.clone();
                let id = self.cluster.add_node(spec)?;
                self.ids.insert(name.clone(), id);
                let mut waiting: Vec<String> =
                    self.pods.iter().filter(|(_, h)| h.node == name).map(|(k, _)| k.clone()).collect();
                waiting.sort();
                for key in waiting {
                    self.place_logged(&key);
                }
                Ok(())
            }
            Some(id) if self.cluster.nodes()[*id].spec == spec => Ok(()),
            Some(id) => {
                let mut specs = self.specs();
                specs[*id] = spec;
                self.rebuild(specs)
            }
        }
    }

    /// Forgets a node; its pods are kept, waiting for it to come back. Returns whether it was known.
    pub fn remove_node(&mut self, name: &str) -> Result<bool, ModelError> {
        if !self.ids.contains_key(name) {
            return Ok(false);
        }
        let specs = self.specs().into_iter().filter(|s| s.name != name).collect();
        self.rebuild(specs)?;
        Ok(true)
    }

    /// Makes the node set exactly `specs` (after a watcher's full list).
    pub fn replace_nodes(&mut self, specs: Vec<NodeSpec>) -> Result<(), ModelError> {
        if specs == self.specs() {
            return Ok(());
        }
        self.rebuild(specs)
    }

    fn specs(&self) -> Vec<NodeSpec> {
        self.cluster.nodes().iter().map(|n| n.spec.clone()).collect()
    }

    fn rebuild(&mut self, specs: Vec<NodeSpec>) -> Result<(), ModelError> {
        self.cluster = Cluster::new(specs)?;
        self.ids = self.cluster.nodes().iter().enumerate().map(|(i, n)| (n.spec.name.clone(), i)).collect();
        self.policy = self.kind.build(self.typical.clone());
        let mut keys: Vec<String> = self.pods.keys().cloned().collect();
        keys.sort();
        for key in keys {
            if let Some(h) = self.pods.get_mut(&key) {
                h.id = None;
            }
            self.place_logged(&key);
        }
        Ok(())
    }

    /// Places a held pod that has no allocation yet, logging why when it cannot.
    fn place_logged(&mut self, key: &str) {
        if let Err(e) = self.place(key) {
            tracing::warn!(pod = %key, error = %e, "a pod bound to a node the model cannot fit it on holds no GPUs in the model");
        }
    }

    fn place(&mut self, key: &str) -> Result<(), ModelError> {
        let Some(h) = self.pods.get(key) else { return Ok(()) };
        if h.id.is_some() {
            return Ok(());
        }
        let (node, request) = (h.node.clone(), h.request);
        let id = *self.ids.get(&node).ok_or_else(|| ModelError::UnknownNode(node.clone()))?;
        if let Some(reason) = self.cluster.nodes()[id].why_not(&request) {
            return Err(ModelError::DoesNotFit { node, reason: reason.to_string() });
        }
        let gpus = self.gpus_for(id, &request);
        self.next_id += 1;
        self.cluster.allocate(self.next_id, &request, &Placement { node: id, gpus })?;
        if let Some(h) = self.pods.get_mut(key) {
            h.id = Some(self.next_id);
        }
        Ok(())
    }

    /// The GPUs the policy takes on this node, as `gantry sim` would; the ledger's own pick only
    /// if the policy declines (it scores nodes the filter already accepted).
    fn gpus_for(&mut self, id: NodeId, request: &Request) -> Vec<u32> {
        let n = &self.cluster.nodes()[id];
        if request.gpus == 0 {
            Vec::new()
        } else if let Some(p) = self.policy.place(&self.cluster, request, &[id], &mut SplitMix64::new(0)) {
            p.gpus
        } else if request.is_slice() {
            best_fit_gpu(n, request).into_iter().collect()
        } else {
            n.lowest_idle_gpus(request.gpus).unwrap_or_default()
        }
    }

    /// Holds `request` on `node` for `key`, or changes nothing and says why it does not fit.
    fn hold(&mut self, key: &str, node: &str, request: Request, reserved: bool) -> Result<(), ModelError> {
        let id = *self.ids.get(node).ok_or_else(|| ModelError::UnknownNode(node.to_string()))?;
        if let Some(reason) = self.cluster.nodes()[id].why_not(&request) {
            return Err(ModelError::DoesNotFit { node: node.to_string(), reason: reason.to_string() });
        }
        self.pods.insert(key.to_string(), Held { id: None, node: node.to_string(), request, reserved });
        self.place(key).inspect_err(|_| {
            self.pods.remove(key);
        })
    }

    /// Records a pod bound to `node` (from `/bind` without an API server, tests, benchmarks);
    /// replaces an earlier record. A pod that does not fit is refused and not recorded.
    pub fn upsert_pod(&mut self, key: &str, node: &str, request: Request) -> Result<(), ModelError> {
        self.release(key);
        self.hold(key, node, request, false)?;
        self.pending.remove(key);
        Ok(())
    }

    /// Records what the API server says: `key` is bound to `node` with `request`. Unlike
    /// [`Model::upsert_pod`] the record is kept even when the pod cannot be placed in the model
    /// (its node is not known yet, or is full in the model's view): the API server is the truth,
    /// and the pod takes its GPUs once its node appears. The error says why it holds none.
    pub fn observe_pod(&mut self, key: &str, node: &str, request: Request) -> Result<(), ModelError> {
        self.pending.remove(key);
        if let Some(h) = self.pods.get_mut(key)
            && h.node == node
            && h.request == request
            && h.id.is_some()
        {
            h.reserved = false;
            return Ok(());
        }
        self.release(key);
        self.pods
            .insert(key.to_string(), Held { id: None, node: node.to_string(), request, reserved: false });
        self.place(key)
    }

    /// Makes the bound pods exactly `pods` (after a watcher's full list); reservations of binds
    /// under way are kept unless the list shows their pod bound. Returns the pods dropped.
    pub fn replace_pods(&mut self, pods: Vec<(String, String, Request)>) -> Vec<String> {
        let listed: std::collections::HashSet<&str> = pods.iter().map(|(k, _, _)| k.as_str()).collect();
        let stale: Vec<String> = self
            .pods
            .iter()
            .filter(|(k, h)| !h.reserved && !listed.contains(k.as_str()))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &stale {
            self.release(key);
        }
        for (key, node, request) in pods {
            if let Err(e) = self.observe_pod(&key, &node, request) {
                tracing::warn!(pod = %key, error = %e, "a bound pod holds no GPUs in the model");
            }
        }
        stale
    }

    /// Forgets a pod (deleted, or ended): its GPUs, its reservation and what filter saw of it.
    /// Returns whether it held GPUs.
    pub fn remove_pod(&mut self, key: &str) -> bool {
        self.pending.remove(key);
        self.release(key)
    }

    /// Frees what `key` holds (bound or reserved); returns whether it held GPUs.
    fn release(&mut self, key: &str) -> bool {
        match self.pods.remove(key) {
            Some(Held { id: Some(id), .. }) => self.cluster.release(id).is_ok(),
            _ => false,
        }
    }

    /// Remembers a pod's request for its `/bind` (filter and prioritize do this themselves).
    pub fn remember(&mut self, pod: &PodRequest) {
        if self.pending.len() >= PENDING_CAP {
            self.pending.clear();
        }
        self.pending.insert(pod.key.clone(), pod.clone());
    }

    /// What `/filter` last saw of a pod not yet bound.
    pub fn pending(&self, key: &str) -> Option<&PodRequest> {
        self.pending.get(key)
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

    /// Records kube-scheduler's decision for a pod seen by filter (no API server: nothing else
    /// will confirm it).
    pub fn bind(&mut self, key: &str, node: &str) -> Result<(), ModelError> {
        let request = self.pending.get(key).ok_or_else(|| ModelError::UnknownPod(key.to_string()))?.request;
        self.upsert_pod(key, node, request)
    }

    /// Reserves GPUs on `node` for a pod seen by filter while its Binding is being created (or
    /// its gang assembled). Refused, changing nothing, when the pod does not fit or the API
    /// server already shows it bound.
    pub fn reserve(&mut self, key: &str, node: &str) -> Result<(), ModelError> {
        let request = self.pending.get(key).ok_or_else(|| ModelError::UnknownPod(key.to_string()))?.request;
        match self.pods.get(key) {
            Some(h) if !h.reserved => {
                return Err(ModelError::AlreadyBound { pod: key.to_string(), node: h.node.clone() });
            }
            Some(_) => {
                self.release(key);
            }
            None => {}
        }
        self.hold(key, node, request, true)
    }

    /// The pod's Binding was created: its reservation is now a bound pod.
    pub fn confirm(&mut self, key: &str) {
        if let Some(h) = self.pods.get_mut(key) {
            h.reserved = false;
        }
        self.pending.remove(key);
    }

    /// Drops a reservation (its Binding failed, or its gang did not assemble in time); the
    /// model is as it was before [`Model::reserve`]. Returns whether there was one.
    pub fn unreserve(&mut self, key: &str) -> bool {
        match self.pods.get(key) {
            Some(h) if h.reserved => {
                self.release(key);
                true
            }
            _ => false,
        }
    }

    /// Where the model holds `key`: its node and whether that is a reservation.
    pub fn holding(&self, key: &str) -> Option<(&str, bool)> {
        self.pods.get(key).map(|h| (h.node.as_str(), h.reserved))
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
