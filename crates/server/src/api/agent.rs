//! The agent protocol, version 1: `POST /v1/agent/register` then `POST /v1/agent/heartbeat`
//! every interval. A heartbeat carries GPU health and samples and the state of the node's jobs;
//! the answer is the full list of jobs the node must run. A heartbeat with an old epoch gets 409
//! and the agent must stop everything and register again (fencing).

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use gantry_store::{Heartbeat, NodeRegistration};

use super::extract::Body;
use super::types::*;
use super::validate;
use crate::app::{App, now_ms};
use crate::auth::Principal;
use crate::command::{Command, Outcome};
use crate::error::{ApiError, ErrorBody};

/// Register (or re-register) a node; returns the new epoch.
#[utoipa::path(post, path = "/v1/agent/register", request_body = RegisterRequest, security(("bearer" = [])),
    responses((status = 200, body = RegisterResponse), (status = 403, body = ErrorBody)))]
pub async fn register(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<RegisterRequest>,
) -> Result<Json<RegisterResponse>, ApiError> {
    who.require_agent()?;
    validate::word("node_id", &req.node_id)?;
    let registration = NodeRegistration {
        node_id: req.node_id,
        hostname: req.hostname,
        cpu_milli: req.cpu_milli,
        memory_mib: req.memory_mib,
        gpus: req.gpus,
        at: now_ms(),
    };
    match app.dispatch(Command::RegisterNode(registration)).await? {
        Outcome::Registered(epoch) => Ok(Json(RegisterResponse {
            epoch,
            heartbeat_interval_ms: u64::try_from(app.config.heartbeat_interval.as_millis()).unwrap_or(1000),
        })),
        other => Err(ApiError::Internal(format!("register produced {other:?}"))),
    }
}

/// Report liveness, GPUs and jobs; get the jobs to run.
#[utoipa::path(post, path = "/v1/agent/heartbeat", request_body = Heartbeat, security(("bearer" = [])),
    responses((status = 200, body = HeartbeatResponse), (status = 409, body = ErrorBody, description = "stale epoch: register again")))]
pub async fn heartbeat(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(hb): Body<Heartbeat>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    who.require_agent()?;
    let finished = hb.jobs.iter().any(|j| j.exit.is_some());
    let outcome = app.dispatch(Command::Heartbeat(hb)).await?;
    if finished {
        app.wake.notify_one();
    }
    match outcome {
        Outcome::Assignments(jobs) => {
            let assignments = jobs
                .into_iter()
                .map(|job| Assignment { log_limit_bytes: app.config.log_limit_bytes, ..job.into() })
                .collect();
            Ok(Json(HeartbeatResponse { assignments }))
        }
        other => Err(ApiError::Internal(format!("heartbeat produced {other:?}"))),
    }
}
