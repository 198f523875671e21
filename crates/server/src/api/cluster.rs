//! Nodes, GPUs, teams and tokens.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_store::{Event, JobState, Node, Role, Team};

use super::extract::{Body, Path, Query};
use super::types::*;
use super::{blocking, validate};
use crate::app::App;
use crate::auth::Principal;
use crate::command::{Command, Outcome};
use crate::error::{ApiError, ErrorBody};

/// Nodes and their liveness.
#[utoipa::path(get, path = "/v1/nodes", security(("bearer" = [])), responses((status = 200, body = Vec<Node>)))]
pub async fn nodes(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<Node>>, ApiError> {
    who.require_user()?;
    Ok(Json(blocking(&app, |s| s.nodes()).await?))
}

/// GPUs with health, latest sample and holders.
#[utoipa::path(get, path = "/v1/gpus", security(("bearer" = [])), responses((status = 200, body = Vec<GpuView>)))]
pub async fn gpus(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<GpuView>>, ApiError> {
    who.require_user()?;
    let (gpus, held) = blocking(&app, |s| Ok((s.gpus()?, s.allocations(true)?))).await?;
    let mut holders: HashMap<String, Vec<GpuHolder>> = HashMap::new();
    for a in held {
        let holder = GpuHolder { job_id: a.job_id, share_milli: a.share_milli, memory_mib: a.memory_mib };
        holders.entry(a.gpu_uuid).or_default().push(holder);
    }
    let views = gpus
        .into_iter()
        .map(|gpu| {
            let holders = holders.remove(&gpu.info.uuid).unwrap_or_default();
            GpuView { gpu, holders }
        })
        .collect();
    Ok(Json(views))
}

/// Teams, quotas and queue sizes.
#[utoipa::path(get, path = "/v1/teams", security(("bearer" = [])), responses((status = 200, body = Vec<TeamView>)))]
pub async fn teams(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<TeamView>>, ApiError> {
    who.require_user()?;
    let (teams, counts) = blocking(&app, |s| Ok((s.teams()?, s.job_counts()?))).await?;
    let mut views: HashMap<String, TeamView> = teams
        .into_iter()
        .map(|t| (t.name.clone(), TeamView { name: t.name, gpu_quota: t.gpu_quota, pending: 0, active: 0 }))
        .collect();
    for (team, state, n) in counts {
        let view = views.entry(team.clone()).or_insert_with(|| TeamView {
            name: team,
            gpu_quota: None,
            pending: 0,
            active: 0,
        });
        match state {
            JobState::Pending => view.pending += n,
            s if s.is_active() => view.active += n,
            _ => {}
        }
    }
    let mut views: Vec<TeamView> = views.into_values().collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(views))
}

/// Set a team's GPU quota (admin).
#[utoipa::path(put, path = "/v1/teams/{name}", params(("name" = String, Path, description = "team")),
    request_body = QuotaRequest, security(("bearer" = [])), responses((status = 204), (status = 403, body = ErrorBody)))]
pub async fn set_quota(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    Body(req): Body<QuotaRequest>,
) -> Result<StatusCode, ApiError> {
    who.require_admin()?;
    validate::word("name", &name)?;
    app.dispatch(Command::SetTeam(Team { name, gpu_quota: req.gpu_quota })).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Create a token (admin). The secret is returned once.
#[utoipa::path(post, path = "/v1/tokens", request_body = TokenRequest, security(("bearer" = [])),
    responses((status = 201, body = TokenResponse), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_token(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<TokenRequest>,
) -> Result<(StatusCode, Json<TokenResponse>), ApiError> {
    who.require_admin()?;
    let role = req.role.unwrap_or(Role::User);
    if role == Role::User && req.team.is_none() {
        return Err(ApiError::Unprocessable("team: a user token needs a team".into()));
    }
    if let Some(team) = &req.team {
        validate::word("team", team)?;
    }
    let name = req.name.or_else(|| req.team.clone()).unwrap_or_else(|| role.to_string());
    validate::label("name", &name)?;
    match app.dispatch(Command::CreateToken { role, team: req.team, name }).await? {
        Outcome::Token(token) => Ok((StatusCode::CREATED, Json(TokenResponse { token }))),
        other => Err(ApiError::Internal(format!("token creation produced {other:?}"))),
    }
}

/// Recent events (node registered or lost, GPU health changes, tokens created), newest first.
#[utoipa::path(get, path = "/v1/events", params(EventQuery), security(("bearer" = [])),
    responses((status = 200, body = Vec<Event>)))]
pub async fn events(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Query(q): Query<EventQuery>,
) -> Result<Json<Vec<Event>>, ApiError> {
    who.require_user()?;
    let limit = q.limit.unwrap_or(100).min(10_000);
    Ok(Json(blocking(&app, move |s| s.events(limit)).await?))
}
