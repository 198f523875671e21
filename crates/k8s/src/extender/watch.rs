//! The API server's view of nodes and bound pods, applied to the [`Model`] by kube-rs watchers.
//!
//! Thin: [`node_spec`] and [`pod_view`] read a `Node` / `Pod`, [`NodeFeed`] and [`PodFeed`] apply
//! one watcher event each (buffering a full list between `Init` and `InitDone`, which then
//! replaces what the model held, so objects deleted while the watch was down are dropped), and
//! [`run`] drives both watchers until the process ends.
//!
//! **Nodes.** Capacity comes from `status.allocatable`: `cpu`, `memory`, `gantry.dev/gpu` (whole
//! GPUs) and `gantry.dev/gpu-memory` (MiB on the GPUs the device plugin offers as slices). The
//! GPU model and the memory of one GPU come from the labels `gantry.dev/gpu-model` and
//! `gantry.dev/gpu-memory-mib`, or NVIDIA GPU feature discovery's `nvidia.com/gpu.product` and
//! `nvidia.com/gpu.memory`. The slice GPUs are `gpu-memory / memory of one GPU` (one GPU when
//! that memory is not labelled). The model packs all of a node's GPUs as one set; kube-scheduler
//! itself keeps each resource within its allocatable (`ignoredByScheduler: false`).
//!
//! **Pods.** Those bound to a node and not finished (kube-scheduler's own field selector
//! `spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed`) that ask for a Gantry GPU
//! resource, whoever bound them. A pod leaving that set (deleted, or `Succeeded`/`Failed`) frees
//! its GPUs. Pods without a GPU request are not kept: kube-scheduler accounts their CPU.

use std::pin::pin;
use std::sync::Arc;

use futures_util::StreamExt;
use gantry_core::{NodeSpec, Request};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::bind::Extender;
use super::model::Model;
use super::pod::{self, GPU, GPU_MEMORY};

/// Node label: the GPU model (else `nvidia.com/gpu.product`).
pub const GPU_MODEL_LABEL: &str = "gantry.dev/gpu-model";
/// Node label: MiB of memory of one GPU (else `nvidia.com/gpu.memory`).
pub const GPU_MEMORY_LABEL: &str = "gantry.dev/gpu-memory-mib";
/// The bound, unfinished pods (kube-scheduler's selector for assigned pods).
pub const BOUND_PODS: &str = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/// The model's view of a node, or why it cannot be read.
pub fn node_spec(node: &Node) -> Result<NodeSpec, String> {
    let name = node.metadata.name.clone().ok_or("a node without a name")?;
    let alloc = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let get = |key: &str| -> Result<u64, String> {
        match alloc.and_then(|a| a.get(key)) {
            None => Ok(0),
            Some(q) => pod::quantity_str(&q.0, key).map_err(|e| format!("node {name}: {e}")),
        }
    };
    let labels = node.metadata.labels.as_ref();
    let label = |keys: [&str; 2]| keys.iter().find_map(|k| labels.and_then(|l| l.get(*k))).cloned();
    let per_gpu_mib = label([GPU_MEMORY_LABEL, "nvidia.com/gpu.memory"])
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|m| *m > 0);
    let (whole, slice_mib) = (get(GPU)?, get(GPU_MEMORY)?);
    let slice_gpus = match (slice_mib, per_gpu_mib) {
        (0, _) => 0,
        (m, Some(per)) => m.div_ceil(per),
        (_, None) => 1,
    };
    let gpus = u32::try_from(whole + slice_gpus).map_err(|_| format!("node {name}: too many GPUs"))?;
    let gpu_memory_mib = match (per_gpu_mib, slice_gpus) {
        (Some(per), _) => per,
        (None, 1) if whole == 0 => slice_mib,
        _ => 0,
    };
    let gpu_model =
        (gpus > 0).then(|| label([GPU_MODEL_LABEL, "nvidia.com/gpu.product"]).unwrap_or("GPU".into()));
    Ok(NodeSpec { cpu_milli: get("cpu")?, memory_mib: get("memory")?, gpus, gpu_model, gpu_memory_mib, name })
}

/// What a pod event means for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodView {
    /// Bound to a node, asking for Gantry GPUs: `namespace/name`, node, request.
    Bound(String, String, Request),
    /// Finished: its GPUs are free.
    Ended(String),
    /// Not bound yet, or asks for no Gantry GPU: nothing to hold.
    Ignored(String),
}

/// Reads a pod event's object.
pub fn pod_view(p: &Pod) -> PodView {
    let key = format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or("default"),
        p.metadata.name.as_deref().unwrap_or_default()
    );
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return PodView::Ended(key);
    }
    let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()) else {
        return PodView::Ignored(key);
    };
    let parsed = serde_json::to_value(p).map_err(|e| e.to_string()).and_then(|v| pod::parse_request(&v));
    match parsed {
        Ok(r) if r.request.gpus > 0 => PodView::Bound(key, node, r.request),
        Ok(_) => PodView::Ignored(key),
        Err(e) => {
            tracing::warn!(pod = %key, error = %e, "a bound pod's GPU request cannot be read; not counted");
            PodView::Ignored(key)
        }
    }
}

/// Applies node events; a full list replaces the model's nodes.
#[derive(Debug, Default)]
pub struct NodeFeed {
    listing: Option<Vec<NodeSpec>>,
}

impl NodeFeed {
    /// Applies one event; returns whether it ended a full list (the model now matches it).
    pub fn apply(&mut self, model: &mut Model, event: Event<Node>) -> bool {
        let outcome = match event {
            Event::Init => {
                self.listing = Some(Vec::new());
                Ok(())
            }
            Event::InitApply(n) => {
                if let (Some(list), Some(spec)) = (self.listing.as_mut(), logged(node_spec(&n))) {
                    list.push(spec);
                }
                Ok(())
            }
            Event::InitDone => {
                let specs = self.listing.take().unwrap_or_default();
                let done = model.replace_nodes(specs);
                if let Err(e) = done {
                    tracing::error!(error = %e, "the listed nodes do not form a cluster");
                }
                return true;
            }
            Event::Apply(n) => match logged(node_spec(&n)) {
                Some(spec) => model.upsert_node(spec),
                None => Ok(()),
            },
            Event::Delete(n) => model.remove_node(n.metadata.name.as_deref().unwrap_or_default()).map(drop),
        };
        if let Err(e) = outcome {
            tracing::error!(error = %e, "a node event could not be applied");
        }
        false
    }
}

fn logged(spec: Result<NodeSpec, String>) -> Option<NodeSpec> {
    spec.inspect_err(|e| tracing::warn!(error = %e, "a node is left out of the model")).ok()
}

/// Applies pod events; a full list replaces the model's bound pods (not its reservations).
#[derive(Debug, Default)]
pub struct PodFeed {
    listing: Option<Vec<(String, String, Request)>>,
}

/// What a pod event did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodsApplied {
    /// Pods gone (deleted, finished, or missing from a full list): their GPUs are free.
    pub gone: Vec<String>,
    /// The event ended a full list.
    pub listed: bool,
}

impl PodFeed {
    /// Applies one event.
    pub fn apply(&mut self, model: &mut Model, event: Event<Pod>) -> PodsApplied {
        let mut out = PodsApplied::default();
        match event {
            Event::Init => self.listing = Some(Vec::new()),
            Event::InitApply(p) => {
                if let (Some(list), PodView::Bound(k, n, r)) = (self.listing.as_mut(), pod_view(&p)) {
                    list.push((k, n, r));
                }
            }
            Event::InitDone => {
                out.gone = model.replace_pods(self.listing.take().unwrap_or_default());
                out.listed = true;
            }
            Event::Apply(p) => match pod_view(&p) {
                PodView::Bound(key, node, request) => {
                    if let Err(e) = model.observe_pod(&key, &node, request) {
                        tracing::warn!(pod = %key, error = %e, "a bound pod holds no GPUs in the model");
                    }
                }
                PodView::Ended(key) => {
                    model.remove_pod(&key);
                    out.gone.push(key);
                }
                PodView::Ignored(_) => {}
            },
            Event::Delete(p) => {
                let key = match pod_view(&p) {
                    PodView::Bound(k, _, _) | PodView::Ended(k) | PodView::Ignored(k) => k,
                };
                model.remove_pod(&key);
                out.gone.push(key);
            }
        }
        out
    }
}

/// Why no API-server client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Neither an in-cluster service account nor a kubeconfig was found or usable.
    #[error("no Kubernetes API server configured (not in a cluster, no usable kubeconfig): {0}")]
    NoConfig(#[from] kube::config::InferConfigError),
    /// The configuration was found but a client could not be built from it.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

/// A client from the in-cluster service account, else the kubeconfig (`KUBECONFIG`,
/// `~/.kube/config`), and the API server's URL (for the log).
pub async fn connect() -> Result<(kube::Client, String), ConnectError> {
    let config = kube::Config::infer().await?;
    let url = config.cluster_url.to_string();
    Ok((kube::Client::try_from(config)?, url))
}

/// Watches nodes and bound pods through `client` and keeps `ext`'s model current, until the
/// process ends (watch errors are logged and retried with kube's default backoff). `listed` is
/// called with `"nodes"` or `"pods"` each time a full list has been applied.
pub async fn run(client: kube::Client, ext: Arc<Extender>, listed: impl Fn(&'static str) + Send + Sync) {
    let nodes = async {
        let mut feed = NodeFeed::default();
        let stream = watcher(Api::<Node>::all(client.clone()), watcher::Config::default());
        let mut stream = pin!(stream);
        while let Some(event) = stream.next().await {
            let Some(event) = event else { continue };
            let Ok(mut model) = ext.lock_model() else { return };
            if feed.apply(&mut model, event) {
                drop(model);
                listed("nodes");
            }
        }
    };
    let pods = async {
        let mut feed = PodFeed::default();
        let config = watcher::Config::default().fields(BOUND_PODS);
        let stream = watcher(Api::<Pod>::all(client.clone()), config);
        let mut stream = pin!(stream);
        while let Some(event) = stream.next().await {
            let Some(event) = event else { continue };
            let Ok(mut model) = ext.lock_model() else { return };
            let applied = feed.apply(&mut model, event);
            drop(model);
            for key in &applied.gone {
                let _ = ext.pod_gone(key);
            }
            if applied.listed {
                listed("pods");
            }
        }
    };
    futures_util::future::join(nodes, pods).await;
}

/// A watcher with kube's default backoff; errors are logged and become `None`.
fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl futures_util::Stream<Item = Option<Event<K>>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, config).default_backoff().map(|r| {
        r.inspect_err(|e| tracing::warn!(error = %e, "watch of the API server failed; retrying")).ok()
    })
}
