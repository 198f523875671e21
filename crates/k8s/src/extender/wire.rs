//! The extender's JSON, as `k8s.io/kube-scheduler/extender/v1` puts it on the wire.
//!
//! The Go structs carry no json tags, so the keys are the Go field names (`Pod`, `NodeNames`,
//! `FailedNodes`, `Host`, `Score`, ...). The pod and the node list stay `serde_json::Value`: we
//! read a handful of fields from them ([`crate::extender::pod`]) and echo nodes back untouched.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Highest score an extender may give (`MaxExtenderPriority`).
pub const MAX_EXTENDER_PRIORITY: i64 = 10;
/// Lowest score an extender may give (`MinExtenderPriority`).
pub const MIN_EXTENDER_PRIORITY: i64 = 0;

/// Body of `/filter` and `/prioritize`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled (a `v1.Pod`).
    #[serde(rename = "Pod")]
    pub pod: serde_json::Value,
    /// Candidate nodes as a `v1.NodeList`, sent only when `nodeCacheCapable` is false.
    #[serde(rename = "Nodes", default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<serde_json::Value>,
    /// Candidate node names, sent only when `nodeCacheCapable` is true.
    #[serde(rename = "NodeNames", default, skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
}

/// Answer to `/filter`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    /// Nodes that fit, as a `v1.NodeList` (when the request carried `Nodes`).
    #[serde(rename = "Nodes", default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<serde_json::Value>,
    /// Names of the nodes that fit (when the request carried `NodeNames`).
    #[serde(rename = "NodeNames", default, skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
    /// Node name → why the pod does not fit there (preemption might help).
    #[serde(rename = "FailedNodes", default)]
    pub failed_nodes: BTreeMap<String, String>,
    /// Node name → why the pod can never fit there (preemption will not help).
    #[serde(rename = "FailedAndUnresolvableNodes", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// A non-empty string fails the whole call.
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// One node's score in a `/prioritize` answer (`HostPriorityList` is a JSON array of these).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// Node name.
    #[serde(rename = "Host")]
    pub host: String,
    /// 0..=10.
    #[serde(rename = "Score")]
    pub score: i64,
}

/// Answer to `/prioritize`.
pub type HostPriorityList = Vec<HostPriority>;

/// Body of `/bind`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtenderBindingArgs {
    /// Pod name.
    #[serde(rename = "PodName")]
    pub pod_name: String,
    /// Pod namespace.
    #[serde(rename = "PodNamespace")]
    pub pod_namespace: String,
    /// Pod UID.
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    /// The node chosen by kube-scheduler.
    #[serde(rename = "Node")]
    pub node: String,
}

/// Answer to `/bind`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtenderBindingResult {
    /// Empty on success.
    #[serde(rename = "Error", default)]
    pub error: String,
}
