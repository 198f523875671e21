//! Declared outputs over HTTP (issue 22, stage-out): the agents' report of each ended
//! attempt's uploads.
//!
//! `POST /v1/agent/outputs` — a node's agent, with its own credential and current epoch,
//! reports where the upload of one ended attempt's outputs stands: first `uploading` (answered
//! with the values of the team secret the job's outputs are uploaded with, over the agent's
//! authenticated channel only; never logged), then `uploaded` or `failed` with the bytes,
//! files, skipped entries, time and error. Deny by default: the attempt must be one this node
//! ran (the job's attempt history says where each ran); a report about another node's attempt
//! is refused (403) and changes nothing, and a report naming an output the job did not declare
//! is refused (422).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use gantry_api::outputs::{MAX_OUTPUTS, OutputAnswer, OutputReport, OutputState};

use super::blocking;
use super::extract::Body;
use crate::app::App;
use crate::auth::Principal;
use crate::command::Command;
use crate::error::{ApiError, ErrorBody};

/// Report an ended attempt's output uploads (the node that ran it, current epoch).
#[utoipa::path(post, path = "/v1/agent/outputs", operation_id = "agent_outputs", request_body = OutputReport,
    security(("bearer" = [])),
    responses((status = 200, body = OutputAnswer),
        (status = 403, body = ErrorBody, description = "the attempt did not run on this node"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "stale epoch: register again"),
        (status = 422, body = ErrorBody, description = "an output the job did not declare")))]
pub async fn agent_outputs(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<OutputReport>,
) -> Result<Json<OutputAnswer>, ApiError> {
    super::validate::word("node_id", &req.node_id)?;
    who.require_node(&req.node_id)?;
    if req.outputs.len() > MAX_OUTPUTS {
        return Err(ApiError::Unprocessable(format!("outputs: at most {MAX_OUTPUTS}")));
    }
    let (node, epoch) = (req.node_id.clone(), req.epoch);
    let nodes = blocking(&app, |s| s.nodes()).await?;
    if !nodes.iter().any(|n| n.id == node && n.epoch == epoch) {
        return Err(ApiError::Conflict(format!("node {node}: epoch {epoch} is not current; register again")));
    }
    let id = req.job_id;
    let job = blocking(&app, move |s| s.job(id)).await?;
    let Some(job) = job else { return Err(ApiError::NotFound(format!("job {id} not found"))) };
    let attempts = blocking(&app, move |s| s.attempts(id)).await?;
    if !attempts.iter().any(|a| a.attempt == req.attempt && a.node_id == node) {
        return Err(ApiError::Forbidden(format!(
            "node {node} did not run attempt {} of job {id}: it reports only its own attempts' outputs",
            req.attempt
        )));
    }
    for o in &req.outputs {
        if !job.outputs.iter().any(|d| d.name == o.name && d.url == o.url) {
            return Err(ApiError::Unprocessable(format!(
                "outputs: job {id} declares no output `{}` to {}",
                o.name, o.url
            )));
        }
    }
    let uploading = req.outputs.iter().any(|o| o.state == OutputState::Uploading);
    let (attempt, mut outputs) = (req.attempt, req.outputs);
    for o in &mut outputs {
        o.error = o.error.as_deref().map(gantry_api::inputs::reason);
    }
    app.dispatch(Command::ReportedOutputs { job: id, attempt, outputs }).await?;
    let secret = match job.output_secret.or(job.input_secret).filter(|_| uploading) {
        Some(name) => {
            let team = job.team.clone();
            blocking(&app, move |s| s.secret(&team, &name)).await?.unwrap_or_default()
        }
        None => BTreeMap::new(),
    };
    Ok(Json(OutputAnswer { secret }))
}
