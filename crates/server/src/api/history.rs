//! `GET /v1/history`: the recorded jobs `gantry whatif` replays.
//!
//! Admins only: the replay needs every team's jobs (a fleet's waits come from all of them), and
//! a member must not learn other teams' job names and sizes. It reveals no command, environment
//! or output. The window defaults to 30 days and is read in one blocking call.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use gantry_api::history::{
    HistoryAttempt, HistoryJob, HistoryNode, HistoryQuery, HistoryResponse, HistoryTeam,
};
use gantry_store::{Job, JobFilter, Store, StoreError};

use super::extract::Query;
use super::{blocking, validate};
use crate::app::App;
use crate::auth::Principal;
use crate::error::{ApiError, ErrorBody};

const DEFAULT_WINDOW_MS: i64 = 30 * 24 * 3_600_000;

/// Every job submitted since `since` (default 30 days ago) with its attempts and the GPU model
/// each ran on, the fleet and the teams' guarantees: what `gantry whatif` replays. Admins only.
#[utoipa::path(get, path = "/v1/history", params(HistoryQuery), security(("bearer" = [])),
    responses((status = 200, body = HistoryResponse), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn history(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<HistoryResponse>, ApiError> {
    who.require_admin()?;
    let until = crate::app::now_ms();
    let since = q.since.unwrap_or(until - DEFAULT_WINDOW_MS).max(0);
    validate::epoch_ms("since", since)?;
    if since >= until {
        return Err(ApiError::Unprocessable("since: must be in the past".into()));
    }
    Ok(Json(blocking(&app, move |s| read(s, since, until)).await?))
}

fn read(s: &dyn Store, since: i64, until: i64) -> Result<HistoryResponse, StoreError> {
    let gpus = s.gpus()?;
    let model_of: HashMap<&str, &str> =
        gpus.iter().map(|g| (g.info.uuid.as_str(), g.info.model.as_str())).collect();
    let mut per_node: HashMap<&str, Vec<&str>> = HashMap::new();
    for g in &gpus {
        per_node.entry(g.node_id.as_str()).or_default().push(g.info.model.as_str());
    }
    let nodes = s
        .nodes()?
        .into_iter()
        .filter_map(|n| {
            let models = per_node.get(n.id.as_str())?;
            Some(HistoryNode { gpus: models.len() as u32, model: most_common(models).to_string(), id: n.id })
        })
        .collect();
    let teams = s
        .teams()?
        .into_iter()
        .map(|t| HistoryTeam { guaranteed_gpus: t.gpu_quota.unwrap_or(0), name: t.name })
        .collect();
    let all = s.jobs(&JobFilter::default())?;
    let mut first_worker: HashMap<i64, &Job> = HashMap::new();
    for j in &all {
        if let Some(g) = j.gang.as_ref().filter(|g| g.rank == Some(0)) {
            first_worker.insert(g.id, j);
        }
    }
    let mut used: HashMap<i64, i64> = HashMap::new();
    let parent: HashMap<i64, i64> =
        all.iter().filter_map(|j| Some((j.id, j.gang.as_ref().filter(|g| g.rank.is_some())?.id))).collect();
    for (job, milli_ms) in s.gpu_use_by_job(since)? {
        *used.entry(parent.get(&job).copied().unwrap_or(job)).or_default() += milli_ms;
    }
    let mut jobs = Vec::new();
    for j in
        all.iter().filter(|j| j.submitted_at >= since && j.gang.as_ref().is_none_or(|g| g.rank.is_none()))
    {
        let workers = j.gang.as_ref().map_or(1, |g| g.replicas.max(1));
        let source = if j.gang.is_some() { first_worker.get(&j.id).map_or(j.id, |w| w.id) } else { j.id };
        let attempts = s
            .attempts(source)?
            .into_iter()
            .map(|a| HistoryAttempt {
                model: a.gpu_uuids.first().and_then(|u| model_of.get(u.as_str())).map(|m| (*m).to_string()),
                placed_at: a.placed_at,
                started_at: a.started_at,
                finished_at: a.finished_at,
                outcome: a.outcome,
            })
            .collect();
        let slice = j.request.gpu_memory_mib > 0
            || (j.request.gpu_compute_pct > 0 && j.request.gpu_compute_pct < 100);
        jobs.push(HistoryJob {
            id: j.id,
            team: j.team.clone(),
            name: j.name.clone(),
            job_type: j.labels.get("job_type").cloned(),
            priority: j.priority,
            gpus: j.request.gpus,
            workers,
            gpu_milli: if slice { (j.request.gpu_compute_pct.clamp(1, 100) * 10).min(1000) } else { 1000 },
            gpu_models: j.gpu_models.clone(),
            submitted_at: j.submitted_at,
            state: j.state,
            attempts,
            used_gpu_s: used.get(&j.id).map(|m| *m as f64 / 1e6),
        });
    }
    Ok(HistoryResponse { since, until, nodes, teams, jobs })
}

fn most_common<'a>(models: &[&'a str]) -> &'a str {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for m in models {
        *counts.entry(m).or_default() += 1;
    }
    counts.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0))).map_or("", |(m, _)| m)
}
