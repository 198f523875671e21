//! Users, tokens and the caller's own identity.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_store::{NewToken, Role, TokenKind, TokenRecord, User};

use super::extract::{Body, Path};
use super::types::*;
use super::{blocking, validate};
use crate::app::App;
use crate::auth::{self, Principal};
use crate::command::{Command, Outcome};
use crate::credentials::{self, JOIN_TOKEN_TTL, MAX_TTL, USER_TOKEN_TTL};
use crate::error::{ApiError, ErrorBody};

/// Create a token (admin): a user's token, or with role `agent` a one-time join token; with
/// `service`, an invoke token for that service (members of its team too), which calls the
/// service through the gateway and nothing else. The secret is returned once.
#[utoipa::path(post, path = "/v1/tokens", request_body = TokenRequest, security(("bearer" = [])),
    responses((status = 201, body = TokenResponse), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_token(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<TokenRequest>,
) -> Result<(StatusCode, Json<TokenResponse>), ApiError> {
    if req.service.is_none() {
        who.require_admin()?;
    }
    let ttl = match req.ttl_seconds {
        Some(0) => return Err(ApiError::Unprocessable("ttl_seconds: must be at least 1".into())),
        Some(s) if s > MAX_TTL.as_secs() => {
            return Err(ApiError::Unprocessable(format!(
                "ttl_seconds: at most {} (400 days)",
                MAX_TTL.as_secs()
            )));
        }
        Some(s) => Some(Duration::from_secs(s)),
        None => None,
    };
    let role = req.role.unwrap_or(Role::Member);
    let secret = auth::new_secret().map_err(|e| ApiError::Internal(e.to_string()))?;
    let token = if let Some(service) = &req.service {
        invoke_token(&app, &who, &req, service, &secret, ttl.unwrap_or(USER_TOKEN_TTL)).await?
    } else if role == Role::Agent {
        join_token(&req, &secret, ttl.unwrap_or(JOIN_TOKEN_TTL))?
    } else {
        let user = ensure_user(&app, &who, &req, role).await?;
        let name = req.name.clone().unwrap_or_else(|| user.clone());
        validate::label("name", &name)?;
        let ttl = Some(ttl.unwrap_or(USER_TOKEN_TTL));
        NewToken { user: Some(user), ..credentials::new_token(&secret, TokenKind::Api, &name, ttl) }
    };
    let (kind, expires_at) = (token.kind, token.expires_at);
    match app.dispatch(Command::CreateToken { token, by: who }).await? {
        Outcome::Token(id) => {
            Ok((StatusCode::CREATED, Json(TokenResponse { token: secret, id, kind, expires_at })))
        }
        other => Err(ApiError::Internal(format!("token creation produced {other:?}"))),
    }
}

/// An invoke token for one service the caller sees (else the 404 of a service that does not
/// exist); whether the caller may create it (a member of its team) is the dispatcher's check.
async fn invoke_token(
    app: &Arc<App>,
    who: &Principal,
    req: &TokenRequest,
    service: &str,
    secret: &str,
    ttl: Duration,
) -> Result<NewToken, ApiError> {
    if req.user.is_some() || req.node.is_some() || req.role.is_some_and(|r| r != Role::Member) {
        return Err(ApiError::Unprocessable(
            "service: an invoke token belongs to its service, not to a user, role or node".into(),
        ));
    }
    let team = match (&req.team, who.token.teams.as_slice()) {
        (Some(team), _) => team.clone(),
        (None, [only]) => only.clone(),
        (None, []) => "default".into(),
        _ => {
            return Err(ApiError::Unprocessable("team: you are in several teams; name the service's".into()));
        }
    };
    validate::word("team", &team)?;
    let missing = || ApiError::NotFound(format!("service {service} not found in team {team}"));
    if !who.sees_team(&team) {
        return Err(missing());
    }
    let (t, n) = (team.clone(), service.to_owned());
    blocking(app, move |s| s.service(&t, &n)).await?.ok_or_else(missing)?;
    let key = format!("{team}/{service}");
    let name = req.name.clone().unwrap_or_else(|| format!("invoke {key}"));
    validate::label("name", &name)?;
    // Bound to its creator: revoked when they no longer act for the team (a membership or role
    // change, in the store's transaction).
    let token = credentials::new_token(secret, TokenKind::Invoke, &name, Some(ttl));
    Ok(NewToken { service: Some(key), user: who.token.user.clone(), ..token })
}

fn join_token(req: &TokenRequest, secret: &str, ttl: Duration) -> Result<NewToken, ApiError> {
    if req.team.is_some() || req.user.is_some() {
        return Err(ApiError::Unprocessable(
            "team: a join token (role agent) belongs to no team or user".into(),
        ));
    }
    if let Some(node) = &req.node {
        validate::word("node", node)?;
    }
    let name =
        req.name.clone().or_else(|| req.node.as_ref().map(|n| format!("join {n}"))).unwrap_or("join".into());
    validate::label("name", &name)?;
    Ok(NewToken {
        node: req.node.clone(),
        ..credentials::new_token(secret, TokenKind::Join, &name, Some(ttl))
    })
}

/// Creates the token's user, or adds the team to it and sets the role when one was asked for.
async fn ensure_user(
    app: &Arc<App>,
    who: &Principal,
    req: &TokenRequest,
    role: Role,
) -> Result<String, ApiError> {
    if req.node.is_some() {
        return Err(ApiError::Unprocessable("node: only join tokens (role agent) name a node".into()));
    }
    // Unnamed, a member is the team's own user and any other role its own `<team>-<role>`: a
    // viewer's token for a team must not re-role (and become) the user who submits its jobs.
    let derived = |team: &String| match role {
        Role::Member => team.clone(),
        other => format!("{team}-{}", other.as_str()),
    };
    let name = req.user.clone().or_else(|| req.team.as_ref().map(derived)).ok_or_else(|| {
        ApiError::Unprocessable("user: name the user (or its team, which then names it too)".into())
    })?;
    validate::word("user", &name)?;
    if let Some(team) = &req.team {
        validate::word("team", team)?;
    }
    let lookup = name.clone();
    let existing = blocking(app, move |s| s.user(&lookup)).await?;
    let mut user = existing.unwrap_or(User { name: name.clone(), role, teams: Vec::new() });
    if req.role.is_some() {
        user.role = role;
    }
    if let Some(team) = &req.team
        && !user.teams.contains(team)
    {
        user.teams.push(team.clone());
    }
    if user.role == Role::Member && user.teams.is_empty() {
        return Err(ApiError::Unprocessable("team: a member needs a team".into()));
    }
    app.dispatch(Command::SetUser { user, by: who.clone() }).await?;
    Ok(name)
}

/// Tokens: all of them for an admin, else the caller's own and the invoke tokens of the
/// services of the teams it is a member of (which it may revoke). Secrets are never shown.
#[utoipa::path(get, path = "/v1/tokens", security(("bearer" = [])), responses((status = 200, body = Vec<TokenRecord>)))]
pub async fn list_tokens(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<TokenRecord>>, ApiError> {
    who.require_user()?;
    if who.require_admin().is_ok() {
        return Ok(Json(blocking(&app, |s| s.tokens(None)).await?));
    }
    let user = who.token.user.clone();
    let teams: Vec<String> =
        who.token.teams.iter().filter(|t| who.require_member_of(t).is_ok()).cloned().collect();
    let (mut own, team) = blocking(&app, move |s| {
        let team = if teams.is_empty() { Vec::new() } else { s.invoke_tokens(teams)? };
        Ok((s.tokens(user.as_deref())?, team))
    })
    .await?;
    own.extend(team.into_iter().filter(|t| !own.iter().any(|o| o.id == t.id)).collect::<Vec<_>>());
    own.sort_by_key(|t| std::cmp::Reverse(t.id));
    Ok(Json(own))
}

/// Revoke a token (admin, or the token's own user); it stops working on the next request.
#[utoipa::path(delete, path = "/v1/tokens/{id}", params(("id" = i64, Path, description = "token id")),
    security(("bearer" = [])), responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn revoke_token(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<i64>,
) -> Result<StatusCode, ApiError> {
    app.dispatch(Command::RevokeToken { id, by: who }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Users and their teams (admin).
#[utoipa::path(get, path = "/v1/users", security(("bearer" = [])), responses((status = 200, body = Vec<User>)))]
pub async fn users(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<User>>, ApiError> {
    who.require_admin()?;
    Ok(Json(blocking(&app, |s| s.users()).await?))
}

/// Create a user or set its role and teams (admin).
#[utoipa::path(put, path = "/v1/users/{name}", params(("name" = String, Path, description = "user")),
    request_body = UserRequest, security(("bearer" = [])), responses((status = 204), (status = 403, body = ErrorBody)))]
pub async fn set_user(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    Body(req): Body<UserRequest>,
) -> Result<StatusCode, ApiError> {
    validate::word("name", &name)?;
    if req.role == Role::Agent {
        return Err(ApiError::Unprocessable("role: agents are nodes, not users".into()));
    }
    for team in &req.teams {
        validate::word("teams", team)?;
    }
    let user = User { name, role: req.role, teams: req.teams };
    app.dispatch(Command::SetUser { user, by: who }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Who the caller is.
#[utoipa::path(get, path = "/v1/whoami", security(("bearer" = [])), responses((status = 200, body = WhoAmI)))]
pub async fn whoami(Extension(who): Extension<Principal>) -> Json<WhoAmI> {
    let t = who.token;
    Json(WhoAmI {
        token_id: t.id,
        kind: t.kind,
        user: t.user,
        role: t.role,
        teams: t.teams,
        node: t.node,
        expires_at: t.expires_at,
    })
}
