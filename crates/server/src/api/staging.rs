//! Declared inputs over HTTP (issue 22): the agents' staging channel, `gantry cache` and
//! `gantry secret`.
//!
//! - `POST /v1/agent/staging` — a node's agent, with its own credential and current epoch,
//!   reports how each staging ordered of it stands and what its cache holds, and is answered
//!   the stagings ordered of it now ([`crate::staging`]), with the values of the team secret
//!   each job names (over the agent's authenticated channel only; never logged).
//! - `GET /v1/cache` — the nodes' caches, each dataset with its team, size, last use and hits;
//!   a user sees its teams' entries and the public ones, operators and admins every team's.
//! - `GET /v1/cache/public`, `PUT /v1/cache/public` — the sources an admin marked public
//!   (`gantry cache public add|remove URL`): their cached copies are shared by every team on a
//!   node; marking is for admins only, and audited.
//! - `PUT /v1/secrets/{name}` — a team's member sets a secret (keys and values); `GET
//!   /v1/secrets` lists names and keys, never values.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_api::inputs::{self, CacheEntry, PUBLIC_SCOPE, PublicSource, SecretData, SetPublic, StageOrder};
use gantry_api::types::{StagingRequest, StagingResponse};
use serde::{Deserialize, Serialize};

use super::blocking;
use super::extract::{Body, Path};
use crate::app::App;
use crate::auth::Principal;
use crate::command::Command;
use crate::error::{ApiError, ErrorBody};

/// Most reports and cache entries one request may carry.
const MAX_ENTRIES: usize = 10_000;

/// Report staging and cache; get what to stage (the node's own credential, current epoch).
#[utoipa::path(post, path = "/v1/agent/staging", operation_id = "agent_staging", request_body = StagingRequest,
    security(("bearer" = [])),
    responses((status = 200, body = StagingResponse), (status = 409, body = ErrorBody, description = "stale epoch: register again")))]
pub async fn agent_staging(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<StagingRequest>,
) -> Result<Json<StagingResponse>, ApiError> {
    super::validate::word("node_id", &req.node_id)?;
    who.require_node(&req.node_id)?;
    if req.reports.len() > MAX_ENTRIES || req.cache.len() > MAX_ENTRIES {
        return Err(ApiError::Unprocessable(format!("at most {MAX_ENTRIES} reports and cache entries")));
    }
    let node = req.node_id.clone();
    let nodes = blocking(&app, |s| s.nodes()).await?;
    if !nodes.iter().any(|n| n.id == node && n.epoch == req.epoch) {
        return Err(ApiError::Conflict(format!(
            "node {node}: epoch {} is not current; register again",
            req.epoch
        )));
    }
    let mut reports = req.reports;
    for r in &mut reports {
        r.error = r.error.as_deref().map(inputs::reason);
    }
    if req.images.len() > MAX_ENTRIES {
        return Err(ApiError::Unprocessable(format!("at most {MAX_ENTRIES} images")));
    }
    app.staging.report_images(&node, req.images);
    let (wake, finished) = app.staging.report(&node, reports, req.cache);
    record_metrics(&app, &finished);
    for (job, inputs) in finished {
        app.dispatch(Command::StagedInputs { job, inputs }).await?;
    }
    if wake {
        app.changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        app.wake.notify_one();
    }
    let mut orders = Vec::new();
    let ordered = app.staging.orders(&node);
    let public: Vec<String> = if ordered.is_empty() {
        Vec::new()
    } else {
        blocking(&app, |s| s.public_sources()).await?.into_iter().map(|(url, _)| url).collect()
    };
    for crate::staging::Order { job: job_id, team, inputs, secret, image } in ordered {
        let public_inputs =
            inputs.iter().filter(|i| inputs::is_public(&i.url, &public)).map(|i| i.name.clone()).collect();
        let secret = match secret {
            Some(name) => {
                let t = team.clone();
                blocking(&app, move |s| s.secret(&t, &name)).await?.unwrap_or_default()
            }
            None => BTreeMap::new(),
        };
        let registry_login = match image.as_ref().and_then(|i| i.secret.clone()) {
            Some(name) => {
                let t = team.clone();
                let values = blocking(&app, move |s| s.secret(&t, &name)).await?.unwrap_or_default();
                gantry_api::types::RegistryCredentials::from_secret(&values)
            }
            None => None,
        };
        orders.push(StageOrder {
            job_id,
            team,
            inputs,
            secret,
            public: public_inputs,
            image,
            registry_login,
        });
    }
    Ok(Json(StagingResponse { orders }))
}

/// The cache and staging metrics: every node's cache per team, and each finished staging's
/// inputs (hits, bytes copied, durations).
fn record_metrics(app: &App, finished: &[(gantry_store::JobId, Vec<gantry_api::inputs::Input>)]) {
    let m = &app.metrics;
    for (_, inputs) in finished {
        for i in inputs {
            if i.cache_hit == Some(true) {
                m.cache_hits.inc();
            } else if let Some(b) = i.bytes {
                m.stage_bytes.inc_by(b);
            }
            if let Some(s) = i.staged_s {
                m.stage_duration.observe(s);
            }
        }
    }
    let mut per: BTreeMap<(String, String), u64> = BTreeMap::new();
    for e in app.staging.caches() {
        *per.entry((e.node, e.team)).or_default() += e.bytes;
    }
    m.cache_bytes.clear();
    for ((node, team), bytes) in per {
        let label = crate::metrics::NodeTeamLabel { node, team };
        m.cache_bytes.get_or_create(&label).set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}

/// The nodes' caches: each dataset with its node, team, source, version, size, last use, hits
/// and how many jobs use it now (a user sees its teams', operators and admins every team's).
#[utoipa::path(get, path = "/v1/cache", operation_id = "list_cache", security(("bearer" = [])),
    responses((status = 200, body = Vec<CacheEntry>)))]
pub async fn list_cache(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<CacheEntry>>, ApiError> {
    who.require_user()?;
    let mut all = app.staging.caches();
    all.retain(|e| e.team == PUBLIC_SCOPE || who.sees_team(&e.team));
    Ok(Json(all))
}

/// The container images the nodes hold: reference, digest, size, last use, attempts running in
/// it, and the teams whose jobs pulled it (a user sees its teams' images, operators and admins
/// every one). `?node=N` keeps one node's.
#[utoipa::path(get, path = "/v1/images", operation_id = "list_images", params(ImagesQuery), security(("bearer" = [])),
    responses((status = 200, body = Vec<gantry_api::types::NodeImage>)))]
pub async fn list_images(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    axum::extract::Query(q): axum::extract::Query<ImagesQuery>,
) -> Result<Json<Vec<gantry_api::types::NodeImage>>, ApiError> {
    who.require_user()?;
    let mut all = app.staging.images();
    all.retain(|i| q.node.as_deref().is_none_or(|n| n == i.node));
    all.retain(|i| who.require_operator().is_ok() || i.teams.iter().any(|t| who.sees_team(t)));
    Ok(Json(all))
}

/// `GET /v1/images`'s filter.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct ImagesQuery {
    /// One node's images only.
    pub node: Option<String>,
}

/// The sources an admin marked public, by URL (any user).
#[utoipa::path(get, path = "/v1/cache/public", operation_id = "list_public_sources", security(("bearer" = [])),
    responses((status = 200, body = Vec<PublicSource>)))]
pub async fn list_public(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<PublicSource>>, ApiError> {
    who.require_user()?;
    let all = blocking(&app, |s| s.public_sources()).await?;
    Ok(Json(all.into_iter().map(|(url, added_at)| PublicSource { url, added_at }).collect()))
}

/// Mark a source public (its cached copies are shared by every team on a node) or private
/// again (admins only; audited).
#[utoipa::path(put, path = "/v1/cache/public", operation_id = "set_public_source", request_body = SetPublic,
    security(("bearer" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_public(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<SetPublic>,
) -> Result<StatusCode, ApiError> {
    inputs::Source::parse(&req.url).map_err(|e| ApiError::Unprocessable(format!("url: {e}")))?;
    app.dispatch(Command::SetPublicSource { url: req.url, public: req.public, by: who }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A secret to set: its team (default: the caller's only team) and its keys and values.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretRequest {
    /// The team (default: the caller's team when it has one).
    #[serde(default)]
    pub team: Option<String>,
    /// `KEY: VALUE`; keys are upper case (`AWS_ACCESS_KEY_ID`).
    pub data: BTreeMap<String, String>,
}

/// A secret as listed: never its values.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecretView {
    /// The team.
    pub team: String,
    /// The name.
    pub name: String,
    /// Its keys.
    pub keys: Vec<String>,
    /// When it was set, ms since the epoch.
    pub updated_at: i64,
}

/// Set a team's secret (members of the team and admins); its values are never shown again.
#[utoipa::path(put, path = "/v1/secrets/{name}", operation_id = "set_secret", params(("name" = String, Path, description = "secret")),
    request_body = SecretRequest, security(("bearer" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_secret(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    Body(req): Body<SecretRequest>,
) -> Result<StatusCode, ApiError> {
    inputs::check_secret(&name, &req.data).map_err(ApiError::Unprocessable)?;
    let team = match req.team {
        Some(team) => team,
        None => match who.token.teams.as_slice() {
            [only] => only.clone(),
            _ => return Err(ApiError::Unprocessable("team: say which team the secret is for".into())),
        },
    };
    super::validate::word("team", &team)?;
    app.dispatch(Command::SetSecret { team, name, data: SecretData(req.data), by: who }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The secrets of the caller's teams (every team's for operators and admins): names and keys.
#[utoipa::path(get, path = "/v1/secrets", operation_id = "list_secrets", security(("bearer" = [])),
    responses((status = 200, body = Vec<SecretView>)))]
pub async fn list_secrets(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<SecretView>>, ApiError> {
    who.require_user()?;
    let all = blocking(&app, |s| s.secrets(None)).await?;
    let views = all
        .into_iter()
        .filter(|(team, ..)| who.sees_team(team))
        .map(|(team, name, keys, updated_at)| SecretView { team, name, keys, updated_at })
        .collect();
    Ok(Json(views))
}
