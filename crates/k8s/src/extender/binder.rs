//! Where a bind goes: the API server (a `Binding`, as kube-scheduler's default binder creates it)
//! or, without one, nowhere but the model.
//!
//! `POST /api/v1/namespaces/{ns}/pods/{name}/binding` with the pod's UID as a precondition, so a
//! pod deleted and re-created under the same name is not bound by a decision made for the old
//! one. The API server sets `spec.nodeName` only if it is still empty: a pod bound by someone
//! else meanwhile gets 409 Conflict. That optimistic check is the only lock; the extender's own
//! binds are serialised by its model (a reservation is taken before the request is sent).
//! A pod `/filter` did not show this process is read with `GET pods/{name}` before it is bound.

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use super::pod::PodRequest;

/// The pod and node of one bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod UID (empty: no precondition).
    pub uid: String,
    /// Node chosen by kube-scheduler.
    pub node: String,
}

/// Why the API server did not bind a pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// The API server answered with an error status (409: bound by someone else meanwhile, or
    /// re-created under the same name; 404: deleted; 403: the extender's role lacks the right).
    #[error("the API server refused to bind {pod} to {node}: {message} ({code} {reason})")]
    Refused {
        /// `namespace/name`.
        pod: String,
        /// The node.
        node: String,
        /// HTTP status.
        code: u16,
        /// The API's reason (`Conflict`, `NotFound`, ...).
        reason: String,
        /// The API's message.
        message: String,
    },
    /// The request did not get an answer.
    #[error("binding {pod} to {node} failed: {0}", pod = .1, node = .2)]
    Unreachable(String, String, String),
}

impl BindError {
    /// Whether the API server said 409 Conflict.
    pub fn is_conflict(&self) -> bool {
        matches!(self, BindError::Refused { code: 409, .. })
    }
}

/// How `/bind` takes effect.
#[derive(Clone)]
pub enum Binder {
    /// No API server (`--no-kube`): a bind is recorded in the model only.
    Record,
    /// Create the `Binding` through this client.
    Api(kube::Client),
}

impl std::fmt::Debug for Binder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Binder::Record => "Binder::Record",
            Binder::Api(_) => "Binder::Api",
        })
    }
}

impl Binder {
    /// Reads a pod `/filter` did not show this process (it restarted between filter and bind):
    /// `Ok(None)` without an API server. A pod already bound is refused with its node.
    pub async fn fetch(&self, namespace: &str, name: &str) -> Result<Option<PodRequest>, String> {
        let Binder::Api(client) = self else { return Ok(None) };
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let pod = pods.get(name).await.map_err(|e| format!("reading pod {namespace}/{name}: {e}"))?;
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()) {
            return Err(format!("pod {namespace}/{name} is already bound to node {node}"));
        }
        let value = serde_json::to_value(&pod).map_err(|e| e.to_string())?;
        super::pod::parse(&value).map(Some)
    }

    /// Binds the pod (a no-op for [`Binder::Record`]).
    pub async fn bind(&self, t: &Target) -> Result<(), BindError> {
        let Binder::Api(client) = self else { return Ok(()) };
        let pods: Api<Pod> = Api::namespaced(client.clone(), &t.namespace);
        let created: Result<serde_json::Value, kube::Error> =
            pods.create_subresource("binding", &t.name, &PostParams::default(), &binding(t)).await;
        let pod = format!("{}/{}", t.namespace, t.name);
        match created {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) => Err(BindError::Refused {
                pod,
                node: t.node.clone(),
                code: s.code,
                reason: s.reason.clone(),
                message: s.message.clone(),
            }),
            Err(e) => Err(BindError::Unreachable(e.to_string(), pod, t.node.clone())),
        }
    }
}

/// The `Binding` kube-scheduler's default binder would create for `t`.
pub fn binding(t: &Target) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: Some(t.name.clone()),
            namespace: Some(t.namespace.clone()),
            uid: (!t.uid.is_empty()).then(|| t.uid.clone()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(t.node.clone()),
            ..Default::default()
        },
    }
}
