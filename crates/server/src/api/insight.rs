//! Read-only views for people looking at waste and shares: findings per GPU and each team's
//! queue (guarantee, use, borrowing, fair share).
//!
//! **Findings** (`GET /v1/findings`, any user): admins and operators see every one. Members and
//! viewers see findings on GPUs their teams hold and on GPUs nobody holds, and the health of
//! every GPU (which `/v1/nodes` already counts for everyone); a finding about a GPU another team
//! holds (its job idling, throttled, starved) is left out, and the jobs named are only the
//! caller's teams'.
//!
//! `input_starved` also names the job: a job holding the GPU that lost at least
//! [`STARVED_SHARE`] of the GPU time its agent judged (at least [`STARVED_MEASURED_MS`] of it,
//! its running attempt; the rule is `gantry_gpu::stall`) gets `job 12 lost 38 % of its GPU time
//! waiting for input (data: s3://…)`, before the GPU layer's swing figures when that fires too.
//! **Queues** (`GET /v1/queues`, any user): one row per team the caller sees
//! (members and viewers: their own), as `/v1/teams` does.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use gantry_store::{GpuHealth, Job, JobFilter, JobState, Store, StoreError};
use serde_json::Value;

use super::blocking;
use super::cluster::gpu_views;
use super::types::{FindingView, JobRef, QueueView};
use crate::app::App;
use crate::auth::Principal;
use crate::error::ApiError;

/// Active (scheduled, running) jobs of `teams` (`None`: all).
fn active_jobs(s: &dyn Store, teams: Option<Vec<String>>) -> Result<Vec<Job>, StoreError> {
    let mut jobs = Vec::new();
    for state in JobState::ALL.iter().filter(|s| s.is_active()) {
        jobs.extend(s.jobs(&JobFilter {
            state: Some(*state),
            teams: teams.clone(),
            ..JobFilter::default()
        })?);
    }
    Ok(jobs)
}

/// Share of its judged GPU time a job must have lost to data stalls for `input_starved`.
pub const STARVED_SHARE: f64 = 0.1;

/// GPU time a job must have been judged for before `input_starved` names it, milli-GPU-ms
/// (10 GPU-seconds: one stalled heartbeat is not a pattern).
pub const STARVED_MEASURED_MS: i64 = 10 * 1000 * 1000;

/// `job 12 lost 38 % of its GPU time waiting for input (data: s3://…)`.
pub fn starved_sentence(job: &Job, share: f64) -> String {
    let inputs = if job.inputs.is_empty() {
        "it declares no inputs".to_owned()
    } else {
        job.inputs.iter().map(|i| format!("{}: {}", i.name, i.url)).collect::<Vec<_>>().join(", ")
    };
    format!("job {} lost {:.0} % of its GPU time waiting for input ({inputs})", job.id, share * 100.0)
}

/// Findings on GPUs (idle allocations, memory near its limit, throttling, input starvation) and
/// GPUs that are not healthy, scoped as the module documentation says.
#[utoipa::path(get, path = "/v1/findings", security(("bearer" = [])), responses((status = 200, body = Vec<FindingView>)))]
pub async fn findings(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<FindingView>>, ApiError> {
    who.require_user()?;
    let teams = who.visible_teams();
    let (views, held, jobs, stalls) = blocking(&app, move |s| {
        let held: HashSet<String> = s.allocations(true)?.into_iter().map(|a| a.gpu_uuid).collect();
        Ok((gpu_views(s, teams.clone())?, held, active_jobs(s, teams)?, s.gpu_stalls_held()?))
    })
    .await?;
    let jobs: HashMap<i64, Job> = jobs.into_iter().map(|j| (j.id, j)).collect();
    let starved: HashMap<i64, f64> = stalls
        .into_iter()
        .filter(|(_, measured, _)| *measured >= STARVED_MEASURED_MS)
        .map(|(job, measured, stalled)| (job, stalled as f64 / measured as f64))
        .filter(|(_, share)| *share >= STARVED_SHARE)
        .collect();
    let mut out = Vec::new();
    for v in views {
        let refs: Vec<JobRef> = v
            .holders
            .iter()
            .filter_map(|h| jobs.get(&h.job_id))
            .map(|j| JobRef { id: j.id, name: j.name.clone(), team: j.team.clone() })
            .collect();
        // Held, but by none of the caller's jobs: another team's.
        let others = held.contains(&v.gpu.info.uuid) && refs.is_empty();
        let finding = |kind: &str, detail: String| FindingView {
            node_id: v.gpu.node_id.clone(),
            gpu_uuid: v.gpu.info.uuid.clone(),
            gpu_index: v.gpu.info.index,
            kind: kind.to_owned(),
            detail,
            jobs: refs.clone(),
        };
        if v.gpu.health != GpuHealth::Healthy {
            out.push(finding("gpu_health", health_detail(v.gpu.health, v.gpu.sample.as_ref())));
        }
        if others && who.visible_teams().is_some() {
            continue;
        }
        let sentences: Vec<String> = v
            .holders
            .iter()
            .filter_map(|h| Some((jobs.get(&h.job_id)?, *starved.get(&h.job_id)?)))
            .map(|(j, share)| starved_sentence(j, share))
            .collect();
        let mut named = sentences.is_empty();
        let listed = v.gpu.sample.as_ref().and_then(|s| s.get("findings")).and_then(Value::as_array);
        for f in listed.into_iter().flatten() {
            let kind = f.get("kind").and_then(Value::as_str).unwrap_or("unknown");
            let mut detail = f.get("detail").and_then(Value::as_str).unwrap_or_default().to_owned();
            if kind == "input_starved" && !named {
                detail = format!("{}; {detail}", sentences.join("; "));
                named = true;
            }
            out.push(finding(kind, detail));
        }
        if !named {
            out.push(finding("input_starved", sentences.join("; ")));
        }
    }
    out.sort_by(|a, b| {
        a.kind.cmp(&b.kind).then_with(|| a.node_id.cmp(&b.node_id)).then(a.gpu_index.cmp(&b.gpu_index))
    });
    Ok(Json(out))
}

/// `unhealthy: XID 79 ×2; NVML error …`, from the health and what the sample says.
fn health_detail(health: GpuHealth, sample: Option<&Value>) -> String {
    let mut parts = vec![health.to_string()];
    if let Some(xids) = sample.and_then(|s| s.get("xid_counts")).and_then(Value::as_object) {
        let mut xids: Vec<String> = xids.iter().map(|(x, n)| format!("XID {x} ×{n}")).collect();
        xids.sort();
        parts.extend(xids);
    }
    if let Some(e) = sample.and_then(|s| s.get("error")).and_then(Value::as_str) {
        parts.push(e.to_owned());
    }
    parts.join("; ")
}

/// Each team's guarantee, the GPUs it uses and borrows, its cap and its decayed usage (fair
/// share) as of the last scheduling pass; members and viewers see their own teams only.
#[utoipa::path(get, path = "/v1/queues", security(("bearer" = [])), responses((status = 200, body = Vec<QueueView>)))]
pub async fn queues(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<QueueView>>, ApiError> {
    who.require_user()?;
    let (teams, counts, held, jobs, gpus) = blocking(&app, |s| {
        let jobs = active_jobs(s, None)?;
        Ok((s.teams()?, s.job_counts()?, s.allocations(true)?, jobs, s.gpus()?.len() as u32))
    })
    .await?;
    let queue = app.queue.read().map_err(|_| ApiError::Internal("queue state poisoned".into()))?.clone();
    let team_of: HashMap<i64, &str> = jobs.iter().map(|j| (j.id, j.team.as_str())).collect();
    let mut used: HashMap<&str, f64> = HashMap::new();
    for a in &held {
        if let Some(team) = team_of.get(&a.job_id) {
            *used.entry(team).or_default() += f64::from(a.share_milli) / 1000.0;
        }
    }
    let borrow = (queue.weights.borrow_limit * f64::from(gpus)).round().max(0.0) as u32;
    let mut names: Vec<String> = teams.iter().map(|t| t.name.clone()).collect();
    names.extend(counts.iter().map(|(t, _, _)| t.clone()));
    names.sort();
    names.dedup();
    names.retain(|t| who.sees_team(t));
    let views = names
        .into_iter()
        .map(|name| {
            let guaranteed = teams.iter().find(|t| t.name == name).and_then(|t| t.gpu_quota).unwrap_or(0);
            let use_ = used.get(name.as_str()).copied().unwrap_or(0.0);
            let count = |f: fn(JobState) -> bool| {
                counts.iter().filter(|(t, s, _)| *t == name && f(*s)).map(|(_, _, n)| n).sum::<u64>()
            };
            let decayed = queue.teams.iter().position(|t| *t == name).map_or(0.0, |i| queue.usage.of(i));
            QueueView {
                guaranteed_gpus: guaranteed,
                used_gpus: use_,
                borrowed_gpus: (use_ - f64::from(guaranteed)).max(0.0),
                max_gpus: guaranteed.saturating_add(borrow).min(gpus.max(guaranteed)),
                cluster_gpus: gpus,
                decayed_gpu_hours: decayed / 3600.0,
                pending: count(|s| s == JobState::Pending),
                active: count(JobState::is_active),
                team: name,
            }
        })
        .collect();
    Ok(Json(views))
}
