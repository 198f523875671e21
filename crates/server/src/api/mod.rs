//! The HTTP API: routes, the OpenAPI document, health and metrics.

mod access;
mod agent;
mod audit;
mod capacity;
mod cluster;
mod dashboard;
mod errors;
mod extract;
mod history;
mod idle;
mod insight;
mod jobs;
mod outputs;
mod pools;
mod require;
mod services;
mod signin;
mod staging;
mod uploads;
pub use gantry_api::types;
mod validate;
pub(crate) mod volumes;
pub mod watch;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::{delete, get, post, put};
use axum::{Extension, Json, Router, middleware};
use gantry_store::{Store, StoreError};
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

use crate::app::App;
use crate::auth::Principal;
use crate::error::{ApiError, ErrorBody};
pub(crate) use require::bearer;
use require::require_token;

/// The OpenAPI document, generated from the handlers and types.
#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "Gantry control plane", description = "Jobs, nodes, GPUs, teams and the agent protocol."),
    paths(
        jobs::submit, jobs::apply, jobs::list, jobs::get, jobs::cancel, jobs::logs, jobs::log_times,
        cluster::nodes, cluster::set_scheduling, pools::list, pools::set, idle::list, idle::set, cluster::gpus, cluster::teams, cluster::set_quota, cluster::events, cluster::usage, history::history, watch::watch, insight::findings, insight::queues,
        access::create_token, access::list_tokens, access::revoke_token, access::users, access::set_user, access::whoami, signin::create_code, signin::redeem,
        audit::rows, audit::verify,
        services::apply, services::list, services::get, services::delete,
        volumes::create, volumes::list, volumes::delete,
        uploads::missing, uploads::put_blob, uploads::put_manifest, uploads::get_manifest,
        uploads::agent_manifest, uploads::agent_blob, uploads::agent_image, uploads::agent_registry_credentials,
        staging::agent_staging, outputs::agent_outputs, staging::list_cache, staging::list_images, staging::set_secret, staging::list_secrets,
        staging::list_public, staging::set_public,
        agent::join, agent::register, agent::heartbeat, agent::wake, healthz, ca_pem, metrics
    ),
    modifiers(&BearerAuth, &Described)
)]
pub struct ApiDoc;

#[derive(Debug)]
struct BearerAuth;

/// OpenAPI 3.1 requires a `description` on every response; a handler that states none gets its
/// status's reason phrase, so generated clients and validators accept the document.
#[derive(Debug)]
struct Described;

impl utoipa::Modify for Described {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        for item in doc.paths.paths.values_mut() {
            let ops = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
            for op in ops.into_iter().flatten() {
                for (status, response) in &mut op.responses.responses {
                    if let RefOr::T(r) = response
                        && r.description.is_empty()
                    {
                        let reason = status
                            .parse::<u16>()
                            .ok()
                            .and_then(|c| axum::http::StatusCode::from_u16(c).ok())
                            .and_then(|c| c.canonical_reason())
                            .unwrap_or("Response");
                        r.description = reason.to_owned();
                    }
                }
            }
        }
    }
}

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// Every route; all but `/healthz`, `/v1/ca.pem`, `/v1/signin` (whose code is its credential) and the dashboard's static files (`/`,
/// `/dashboard/*`, which hold no data) need a bearer token. Who may call each is checked in its
/// handler (or, for mutations, by the dispatcher) through [`Principal`]'s `require_*` methods:
/// jobs, logs, events, the watch stream, findings, queues — users, scoped to their teams (see
/// `watch` and `insight`); cancel and submit — members of the job's team and admins; services — read by
/// those who see their team, applied and deleted by its members and admins; quotas — operators; pools — users list, admins set; users, tokens, audit — admins (a user lists and revokes
/// its own tokens; any user's API token asks for a dashboard sign-in code); agent routes — the node's own credential; metrics — operators.
pub fn router(app: Arc<App>) -> Router {
    let limit = app.config.body_limit;
    // An upload's file may be as large as the cap; its manifest and digest list hold up to
    // 100 000 entries.
    const LISTS: usize = 32 << 20;
    let authed = Router::new()
        .route("/v1/jobs", post(jobs::submit).get(jobs::list))
        .route("/v1/jobs/apply", post(jobs::apply))
        .route("/v1/jobs/{id}", get(jobs::get))
        .route("/v1/jobs/{id}/cancel", post(jobs::cancel))
        .route("/v1/jobs/{id}/logs", get(jobs::logs))
        .route("/v1/jobs/{id}/logs/times", get(jobs::log_times))
        .route("/v1/services", post(services::apply).get(services::list))
        .route("/v1/services/{name}", get(services::get).delete(services::delete))
        .route("/v1/volumes", post(volumes::create).get(volumes::list))
        .route("/v1/volumes/{name}", delete(volumes::delete))
        .route("/v1/nodes", get(cluster::nodes))
        .route("/v1/nodes/{id}/scheduling", put(cluster::set_scheduling))
        .route("/v1/pools", get(pools::list))
        .route("/v1/pools/{name}", put(pools::set))
        .route("/v1/gpus", get(cluster::gpus))
        .route("/v1/teams", get(cluster::teams))
        .route("/v1/teams/{name}", put(cluster::set_quota))
        .route("/v1/teams/{name}/idle", put(idle::set))
        .route("/v1/idle-policies", get(idle::list))
        .route("/v1/tokens", post(access::create_token).get(access::list_tokens))
        .route("/v1/tokens/{id}", delete(access::revoke_token))
        .route("/v1/users", get(access::users))
        .route("/v1/users/{name}", put(access::set_user))
        .route("/v1/whoami", get(access::whoami))
        .route("/v1/signin-codes", post(signin::create_code))
        .route("/v1/audit", get(audit::rows))
        .route("/v1/audit/verify", get(audit::verify))
        .route("/v1/events", get(cluster::events))
        .route("/v1/usage", get(cluster::usage))
        .route("/v1/history", get(history::history))
        .route("/v1/watch", get(watch::watch))
        .route("/v1/findings", get(insight::findings))
        .route("/v1/queues", get(insight::queues))
        .route("/v1/uploads/missing", post(uploads::missing).layer(DefaultBodyLimit::max(LISTS)))
        // Streamed to disk under the upload cap by the handler itself.
        .route("/v1/uploads/blobs/{sha256}", put(uploads::put_blob))
        .route("/v1/uploads/manifest", put(uploads::put_manifest).layer(DefaultBodyLimit::max(LISTS)))
        .route("/v1/uploads/manifests/{digest}", get(uploads::get_manifest))
        .route("/v1/agent/jobs/{id}/upload", get(uploads::agent_manifest))
        .route("/v1/agent/jobs/{id}/image", post(uploads::agent_image))
        .route("/v1/agent/jobs/{id}/registry-credentials", get(uploads::agent_registry_credentials))
        .route("/v1/agent/jobs/{id}/upload/{sha256}", get(uploads::agent_blob))
        .route("/v1/agent/join", post(agent::join))
        .route("/v1/agent/register", post(agent::register))
        .route("/v1/agent/heartbeat", post(agent::heartbeat))
        .route("/v1/agent/wake", post(agent::wake))
        .route("/v1/agent/staging", post(staging::agent_staging))
        .route("/v1/agent/outputs", post(outputs::agent_outputs))
        .route("/v1/cache", get(staging::list_cache))
        .route("/v1/images", get(staging::list_images))
        .route("/v1/cache/public", get(staging::list_public).put(staging::set_public))
        .route("/v1/secrets", get(staging::list_secrets))
        .route("/v1/secrets/{name}", put(staging::set_secret))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), require_token));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/ca.pem", get(ca_pem))
        .route("/v1/signin", post(signin::redeem))
        .merge(dashboard::routes())
        .merge(authed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(app)
}

/// What `/healthz` answers.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`: the server answers.
    pub status: &'static str,
    /// `leader` (runs the scheduler and reconcilers) or `follower` (serves the API only).
    pub role: &'static str,
    /// The leader epoch this replica last saw (0: a single server, no election).
    pub epoch: u64,
}

/// Liveness and role, without a token: `{"status":"ok","role":"leader","epoch":3}`.
#[utoipa::path(get, path = "/healthz", responses((status = 200, body = Health)))]
async fn healthz(State(app): State<Arc<App>>) -> axum::Json<Health> {
    let (role, epoch) = app.leadership.get();
    let role = match role {
        crate::leader::Role::Leader => "leader",
        crate::leader::Role::Follower => "follower",
    };
    axum::Json(Health { status: "ok", role, epoch })
}

/// The cluster CA certificate (public, no token), for clients that pin it by SHA-256 before they
/// trust the connection that delivered it. 404 when the server does not speak TLS.
#[utoipa::path(get, path = "/v1/ca.pem",
    responses((status = 200, body = String, content_type = "application/x-pem-file"), (status = 404, body = ErrorBody)))]
async fn ca_pem(State(app): State<Arc<App>>) -> Result<impl IntoResponse, ApiError> {
    let pki = app.pki.as_ref().ok_or_else(|| ApiError::NotFound("this server does not use TLS".into()))?;
    Ok(([(CONTENT_TYPE, "application/x-pem-file")], pki.ca_pem().to_owned()))
}

/// The server's Prometheus metrics (OpenMetrics text).
#[utoipa::path(get, path = "/metrics", security(("bearer" = [])), responses((status = 200, body = String)))]
async fn metrics(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<impl IntoResponse, ApiError> {
    who.require_operator()?;
    let text = app.metrics.encode().map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(([(CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text))
}

async fn openapi(Extension(_who): Extension<Principal>) -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The `x-next-before` header of a newest-first page: set when the page is full.
pub(crate) fn next_page(len: usize, limit: u32, last_id: Option<i64>) -> axum::http::HeaderMap {
    let mut headers = axum::http::HeaderMap::new();
    if let Some(last) = last_id.filter(|_| len >= limit as usize) {
        headers.insert("x-next-before", axum::http::HeaderValue::from(last));
    }
    headers
}

/// Runs a store read on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    app: &Arc<App>,
    f: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = Arc::clone(&app.store);
    tokio::task::spawn_blocking(move || f(&*store))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(Into::into)
}
