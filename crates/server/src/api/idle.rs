//! Idle policies: `gantry team idle TEAM …` sets a team's rule for a job kind (admins);
//! `GET /v1/idle-policies` lists the ones set (every user). The reconciler that applies them is
//! [`crate::idle`].

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_api::idle::{IdlePolicyRequest, IdlePolicyView, KINDS};

use super::extract::{Body, Path};
use super::{blocking, validate};
use crate::app::App;
use crate::auth::Principal;
use crate::command::Command;
use crate::error::{ApiError, ErrorBody};

/// The idle policies admins set, by team and kind (others get the defaults: batch jobs warned
/// at 60 minutes and requeued at 120 below 1 %).
#[utoipa::path(get, path = "/v1/idle-policies", operation_id = "list_idle_policies", security(("bearer" = [])), responses((status = 200, body = Vec<IdlePolicyView>)))]
pub async fn list(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<IdlePolicyView>>, ApiError> {
    who.require_user()?;
    Ok(Json(blocking(&app, |s| s.idle_policies()).await?))
}

/// Set a team's idle policy for a job kind (admins): a job whose GPUs all stay below
/// `below_percent` for `warn_after_s` is warned (an event), for `act_after_s` requeued (its
/// retries unspent), cancelled, or lent (preemptible jobs borrow its GPUs until it uses them
/// again); every action is an event and an audit row with its samples.
#[utoipa::path(put, path = "/v1/teams/{name}/idle", operation_id = "set_idle_policy", params(("name" = String, Path, description = "team")),
    request_body = IdlePolicyRequest, security(("bearer" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(team): Path<String>,
    Body(req): Body<IdlePolicyRequest>,
) -> Result<StatusCode, ApiError> {
    validate::word("name", &team)?;
    let bad = |why: String| Err(ApiError::Unprocessable(why));
    if !KINDS.contains(&req.kind.as_str()) {
        return bad(format!("kind: `{}` is not a job kind (known: {})", req.kind, KINDS.join(", ")));
    }
    if gantry_core::idle::IdleAction::parse(&req.action).is_none() {
        return bad(format!("action: `{}` is not requeue, cancel or lend", req.action));
    }
    validate::at_most("act_after_s", req.act_after_s, 31 * 86_400)?;
    if req.act_after_s == 0 || req.warn_after_s > req.act_after_s {
        return bad("act_after_s: at least 1 s, and warn_after_s at most act_after_s".into());
    }
    if !(0.0..=100.0).contains(&req.below_percent) {
        return bad("below_percent: a utilisation from 0 to 100".into());
    }
    let policy = IdlePolicyView {
        team,
        kind: req.kind,
        warn_after_s: req.warn_after_s,
        act_after_s: req.act_after_s,
        below_percent: req.below_percent,
        action: req.action,
    };
    app.dispatch(Command::SetIdlePolicy { policy, by: who }).await?;
    Ok(StatusCode::NO_CONTENT)
}
