//! The dashboard's one-time sign-in (`gantry dashboard`): a user's token asks for a code; the
//! page trades the code, once, for a session token of the same user. See [`crate::signin`].

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_store::{NewToken, TokenKind};

use super::extract::Body;
use super::types::{SignInCode, SignInRequest, TokenResponse};
use super::validate;
use crate::app::{App, now_ms};
use crate::auth::{self, Principal};
use crate::command::{Command, Outcome};
use crate::credentials;
use crate::error::{ApiError, ErrorBody};
use crate::signin::session_expiry;

/// A one-time sign-in code for the dashboard (any user's own API token; not a node's or a
/// join token). The code is shown once and works once, for two minutes.
#[utoipa::path(post, path = "/v1/signin-codes", security(("bearer" = [])),
    responses((status = 201, body = SignInCode), (status = 403, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn create_code(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<(StatusCode, Json<SignInCode>), ApiError> {
    if who.token.kind != TokenKind::Api || who.token.user.is_none() {
        return Err(ApiError::Forbidden("only a user's API token signs a dashboard in".into()));
    }
    let code = auth::new_secret().map_err(|e| ApiError::Internal(e.to_string()))?;
    let code = code.trim_start_matches("gty_").to_owned();
    let expires_at = app.signin.add(&code, who, now_ms()).map_err(|e| ApiError::TooMany(e.to_string()))?;
    Ok((StatusCode::CREATED, Json(SignInCode { code, expires_at })))
}

/// Trades a sign-in code for a session token (no bearer token: the code is the credential). The
/// session belongs to the code's owner and lives at most 12 hours, never past that owner's
/// token. An unknown, used or expired code gets 401, and counts as a failed sign-in of the
/// caller's address.
#[utoipa::path(post, path = "/v1/signin", request_body = SignInRequest,
    responses((status = 201, body = TokenResponse), (status = 401, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn redeem(
    State(app): State<Arc<App>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Body(req): Body<SignInRequest>,
) -> Result<(StatusCode, Json<TokenResponse>), ApiError> {
    let ip = peer.map_or(IpAddr::from([0, 0, 0, 0]), |p| p.0.0.ip());
    if app.failures.blocked(ip) {
        return Err(ApiError::TooManyFailures);
    }
    validate::label("code", &req.code)?;
    let now = now_ms();
    let Some(by) = app.signin.redeem(&req.code, now) else {
        app.failures.failed(ip);
        return Err(ApiError::SignInRefused(
            "that sign-in code is unknown, used or expired; run `gantry dashboard` again",
        ));
    };
    // The owner's token may have been revoked since it asked.
    let id = by.token.id;
    let current = super::blocking(&app, move |s| s.token(id)).await?;
    let Some(current) = current.filter(|t| t.refusal(now).is_none()) else {
        return Err(ApiError::SignInRefused("the token that asked for this sign-in code no longer works"));
    };
    let secret = auth::new_secret().map_err(|e| ApiError::Internal(e.to_string()))?;
    let expires_at = session_expiry(now, current.expires_at);
    let ttl = std::time::Duration::from_millis(u64::try_from(expires_at - now).unwrap_or(0));
    let token = NewToken {
        user: current.user.clone(),
        ..credentials::new_token(&secret, TokenKind::Api, "dashboard sign-in", Some(ttl))
    };
    match app.dispatch(Command::StartSession { token, by }).await? {
        Outcome::Token(id) => Ok((
            StatusCode::CREATED,
            Json(TokenResponse { token: secret, id, kind: TokenKind::Api, expires_at: Some(expires_at) }),
        )),
        other => Err(ApiError::Internal(format!("session creation produced {other:?}"))),
    }
}
