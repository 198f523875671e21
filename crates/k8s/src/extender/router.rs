//! HTTP: `POST /filter`, `/prioritize`, `/bind`, as kube-scheduler calls them (`urlPrefix/verb`).
//!
//! Who may call: kube-scheduler only. The Service is cluster-internal (no Ingress, no NodePort).
//! The extender's credentials can only read nodes and pods and create `pods/binding`, so the
//! worst a caller that reaches the port can do is what kube-scheduler does: bind a pending pod
//! to a node where it fits (the model refuses the rest, the API server refuses bound pods).
//! `/filter` answers reveal node names and free-GPU reasons, nothing from pod specs. Bodies are
//! parsed here, so malformed JSON is a 400 with the parser's sentence, not axum's 422.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::de::DeserializeOwned;

use super::bind::{DEFAULT_GANG_TIMEOUT, Extender, Poisoned, SharedModel};
use super::binder::Binder;
use super::pod;
use super::wire::{ExtenderArgs, ExtenderBindingArgs, ExtenderBindingResult, ExtenderFilterResult};

/// Errors that become HTTP statuses (the one place that maps them).
#[derive(Debug, thiserror::Error)]
pub enum ExtenderError {
    /// The body is not the JSON kube-scheduler sends.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The model lock was poisoned by a panic elsewhere.
    #[error("internal error")]
    Poisoned,
}

impl IntoResponse for ExtenderError {
    fn into_response(self) -> Response {
        let status = match self {
            ExtenderError::Malformed(_) => StatusCode::BAD_REQUEST,
            ExtenderError::Poisoned => {
                tracing::error!("extender model lock poisoned");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        (status, self.to_string()).into_response()
    }
}

impl From<Poisoned> for ExtenderError {
    fn from(_: Poisoned) -> Self {
        ExtenderError::Poisoned
    }
}

/// The extender's routes over `model` with no API server: `/bind` records in the model only.
pub fn router(model: SharedModel) -> Router {
    routes(Extender::new(model, Binder::Record, DEFAULT_GANG_TIMEOUT))
}

/// The extender's routes over `ext`.
pub fn routes(ext: Arc<Extender>) -> Router {
    Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/bind", post(bind))
        .with_state(ext)
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ExtenderError> {
    serde_json::from_slice(body).map_err(|e| ExtenderError::Malformed(e.to_string()))
}

/// Candidate names from `NodeNames` or, without a node cache, from `Nodes.items[].metadata.name`.
fn candidates(args: &ExtenderArgs) -> Vec<String> {
    if let Some(names) = &args.node_names {
        return names.clone();
    }
    let items = args.nodes.as_ref().and_then(|n| n["items"].as_array());
    items
        .map(|items| {
            items.iter().filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string)).collect()
        })
        .unwrap_or_default()
}

async fn filter(State(ext): State<Arc<Extender>>, body: Bytes) -> Result<Response, ExtenderError> {
    let args: ExtenderArgs = parse(&body)?;
    let pod = match pod::parse(&args.pod) {
        Ok(p) => p,
        Err(e) => {
            return Ok(axum::Json(ExtenderFilterResult { error: e, ..Default::default() }).into_response());
        }
    };
    let names = candidates(&args);
    let filtered = ext.lock_model()?.filter(&pod, &names);
    let mut result = ExtenderFilterResult {
        failed_nodes: filtered.failed.into_iter().collect::<BTreeMap<_, _>>(),
        failed_and_unresolvable_nodes: filtered.unresolvable.into_iter().collect(),
        ..Default::default()
    };
    if args.node_names.is_some() {
        result.node_names = Some(filtered.fit);
    } else if let Some(mut nodes) = args.nodes {
        if let Some(items) = nodes.get_mut("items").and_then(|i| i.as_array_mut()) {
            items.retain(|n| {
                n["metadata"]["name"].as_str().is_some_and(|name| filtered.fit.iter().any(|f| f == name))
            });
        }
        result.nodes = Some(nodes);
    }
    Ok(axum::Json(result).into_response())
}

async fn prioritize(State(ext): State<Arc<Extender>>, body: Bytes) -> Result<Response, ExtenderError> {
    let args: ExtenderArgs = parse(&body)?;
    let pod = pod::parse(&args.pod).map_err(ExtenderError::Malformed)?;
    let names = candidates(&args);
    let scores = ext.lock_model()?.prioritize(&pod, &names);
    Ok(axum::Json(scores).into_response())
}

async fn bind(State(ext): State<Arc<Extender>>, body: Bytes) -> Result<Response, ExtenderError> {
    let args: ExtenderBindingArgs = parse(&body)?;
    let error = ext.bind(&args).await?.err().unwrap_or_default();
    Ok(axum::Json(ExtenderBindingResult { error }).into_response())
}
