//! Nodes, GPUs, teams and events. Members and viewers see their own teams only: other teams'
//! jobs are left out of GPU holders, team lists and events.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_store::{Event, EventFilter, JobFilter, JobState, Store, StoreError, Team, Usage};

use super::extract::{Body, Path, Query};
use super::types::*;
use super::{blocking, validate};
use crate::app::App;
use crate::auth::Principal;
use crate::command::Command;
use crate::error::{ApiError, ErrorBody};

/// Nodes, their liveness and GPU counts (free, unhealthy); counts only, no job names.
#[utoipa::path(get, path = "/v1/nodes", security(("bearer" = [])), responses((status = 200, body = Vec<NodeView>)))]
pub async fn nodes(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<NodeView>>, ApiError> {
    who.require_user()?;
    let views = blocking(&app, node_views).await?;
    Ok(Json(views))
}

/// Cordon (no new work), uncordon, or drain (no new work; running jobs stopped and requeued,
/// their retries not spent, after `grace_s`) a node. Operators and admins; 404 for an unknown
/// node. Registering again keeps the setting.
#[utoipa::path(put, path = "/v1/nodes/{id}/scheduling", params(("id" = String, Path, description = "node id")),
    request_body = NodeSchedulingRequest, security(("bearer" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_scheduling(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(node): Path<String>,
    Body(req): Body<NodeSchedulingRequest>,
) -> Result<StatusCode, ApiError> {
    validate::word("node", &node)?;
    let grace = req.grace_s.unwrap_or(0);
    validate::at_most("grace_s", grace, 7 * 86_400)?;
    if req.grace_s.is_some() && req.scheduling != gantry_store::NodeScheduling::Draining {
        return Err(ApiError::Unprocessable(
            "grace_s: only a drain (scheduling: draining) has a grace period".into(),
        ));
    }
    let grace_ms = i64::try_from(grace * 1000).unwrap_or(i64::MAX);
    app.dispatch(Command::SetNodeScheduling { node, scheduling: req.scheduling, grace_ms, by: who }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// GPUs with health, latest sample and holders.
#[utoipa::path(get, path = "/v1/gpus", security(("bearer" = [])), responses((status = 200, body = Vec<GpuView>)))]
pub async fn gpus(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<GpuView>>, ApiError> {
    who.require_user()?;
    let teams = who.visible_teams();
    let views = blocking(&app, move |s| gpu_views(s, teams)).await?;
    Ok(Json(views))
}

/// Nodes with their GPU counts (no job names: every user may see them).
pub(crate) fn node_views(s: &dyn Store) -> Result<Vec<NodeView>, StoreError> {
    let (nodes, gpus, held) = (s.nodes()?, s.gpus()?, s.allocations(true)?);
    let busy: std::collections::HashSet<String> = held.into_iter().map(|a| a.gpu_uuid).collect();
    let views = nodes
        .into_iter()
        .map(|node| {
            let mine: Vec<_> = gpus.iter().filter(|g| g.node_id == node.id).collect();
            let healthy = |g: &&gantry_store::Gpu| g.health == gantry_store::GpuHealth::Healthy;
            NodeView {
                gpu_model: mine.first().map(|g| g.info.model.clone()),
                gpus: mine.len() as u32,
                gpus_free: mine.iter().filter(|g| healthy(g) && !busy.contains(&g.info.uuid)).count() as u32,
                gpus_unhealthy: mine.iter().filter(|g| !healthy(g)).count() as u32,
                node,
            }
        })
        .collect();
    Ok(views)
}

/// Every GPU with its holders; with `teams` set (a member's or viewer's), holders of those
/// teams' active jobs only, and no findings in the sample of a GPU only other teams hold (as
/// `/v1/findings` leaves them out: whether another team's job idles is not the caller's to read).
pub(crate) fn gpu_views(s: &dyn Store, teams: Option<Vec<String>>) -> Result<Vec<GpuView>, StoreError> {
    let visible = match teams {
        None => None,
        Some(teams) => {
            let mut ids = HashSet::new();
            for state in JobState::ALL.iter().filter(|s| s.is_active()) {
                let filter =
                    JobFilter { state: Some(*state), teams: Some(teams.clone()), ..JobFilter::default() };
                ids.extend(s.jobs(&filter)?.into_iter().map(|j| j.id));
            }
            Some(ids)
        }
    };
    let (gpus, held) = (s.gpus()?, s.allocations(true)?);
    let others: HashSet<String> = match &visible {
        None => HashSet::new(),
        Some(_) => held.iter().map(|a| a.gpu_uuid.clone()).collect(),
    };
    let mut holders: HashMap<String, Vec<GpuHolder>> = HashMap::new();
    for a in held.into_iter().filter(|a| visible.as_ref().is_none_or(|v| v.contains(&a.job_id))) {
        let holder = GpuHolder { job_id: a.job_id, share_milli: a.share_milli, memory_mib: a.memory_mib };
        holders.entry(a.gpu_uuid).or_default().push(holder);
    }
    let views = gpus
        .into_iter()
        .map(|mut gpu| {
            let holders = holders.remove(&gpu.info.uuid).unwrap_or_default();
            if holders.is_empty()
                && others.contains(&gpu.info.uuid)
                && let Some(findings) = gpu.sample.as_mut().and_then(|s| s.get_mut("findings"))
            {
                *findings = serde_json::Value::Array(Vec::new());
            }
            GpuView { gpu, holders }
        })
        .collect();
    Ok(views)
}

/// Teams, quotas and queue sizes, with each team's limits and the job output kept for it.
#[utoipa::path(get, path = "/v1/teams", security(("bearer" = [])), responses((status = 200, body = Vec<TeamView>)))]
pub async fn teams(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<TeamView>>, ApiError> {
    who.require_user()?;
    let (mut teams, mut counts) = blocking(&app, |s| Ok((s.teams()?, s.job_counts()?))).await?;
    teams.retain(|t| who.sees_team(&t.name));
    counts.retain(|(team, _, _)| who.sees_team(team));
    let limits = app.config.output;
    let view = |name: String, t: Option<&gantry_store::Team>| TeamView {
        name,
        gpu_quota: t.and_then(|t| t.gpu_quota),
        pids_limit: t.and_then(|t| t.pids_limit),
        pending: 0,
        active: 0,
        pending_limit: t.and_then(|t| t.pending_limit).unwrap_or(crate::command::DEFAULT_PENDING_LIMIT),
        log_bytes: 0,
        log_quota_bytes: t.and_then(|t| t.log_quota_bytes).unwrap_or(limits.team_quota),
        max_priority: t
            .map_or(gantry_store::Team::DEFAULT_MAX_PRIORITY, gantry_store::Team::priority_ceiling),
        preempt_other_teams: t.is_some_and(gantry_store::Team::preempts_other_teams),
        max_services: t.map_or(gantry_store::Team::DEFAULT_MAX_SERVICES, gantry_store::Team::service_cap),
        max_replicas: t.map_or(gantry_store::Team::DEFAULT_MAX_REPLICAS, gantry_store::Team::replica_cap),
        pending_bytes_limit: t
            .map_or(gantry_store::Team::DEFAULT_PENDING_BYTES, gantry_store::Team::pending_bytes_cap),
    };
    let mut views: HashMap<String, TeamView> =
        teams.iter().map(|t| (t.name.clone(), view(t.name.clone(), Some(t)))).collect();
    for (team, state, n) in counts {
        let view = views.entry(team.clone()).or_insert_with(|| view(team, None));
        match state {
            JobState::Pending => view.pending += n,
            s if s.is_active() => view.active += n,
            _ => {}
        }
    }
    let mut views: Vec<TeamView> = views.into_values().collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    let views = tokio::task::spawn_blocking(move || {
        for v in &mut views {
            v.log_bytes = app.output.used(&*app.store, &app.config.logs_dir, &v.name);
        }
        views
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(Json(views))
}

/// The highest `pids_limit` a team may be given (the kernel's own `pid_max` ceiling).
const MAX_PIDS_LIMIT: u64 = 4_194_304;

/// Set a team's GPU quota (operator or admin), the `pids.max` of its jobs (operator or admin),
/// and what it may keep, queue and preempt (`log_quota_bytes`, `pending_limit`, `max_priority`,
/// `preempt_other_teams`: admin only).
#[utoipa::path(put, path = "/v1/teams/{name}", params(("name" = String, Path, description = "team")),
    request_body = QuotaRequest, security(("bearer" = [])), responses((status = 204), (status = 403, body = ErrorBody)))]
pub async fn set_quota(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    Body(req): Body<QuotaRequest>,
) -> Result<StatusCode, ApiError> {
    validate::word("name", &name)?;
    if let Some(bytes) = req.log_quota_bytes {
        validate::at_most("log_quota_bytes", bytes, 1 << 60)?;
    }
    if let Some(jobs) = req.pending_limit {
        validate::at_most("pending_limit", jobs, 1 << 40)?;
    }
    if let Some(n) = req.max_services {
        validate::at_most("max_services", u64::from(n), 100_000)?;
    }
    if let Some(bytes) = req.pending_bytes_limit {
        validate::at_most("pending_bytes_limit", bytes, 1 << 40)?;
    }
    if let Some(n) = req.max_replicas {
        validate::at_most("max_replicas", u64::from(n), 1_000_000)?;
    }
    if let Some(p) = req.max_priority
        && !(-1000..=1000).contains(&p)
    {
        return Err(ApiError::Unprocessable("max_priority: must be between -1000 and 1000".into()));
    }
    if req.pids_limit.is_some_and(|n| n > MAX_PIDS_LIMIT) {
        return Err(ApiError::BadRequest(format!("pids_limit: at most {MAX_PIDS_LIMIT} processes")));
    }
    // Absent: the team keeps its limit; 0: back to each node's default.
    let pids_limit = match req.pids_limit {
        Some(0) => None,
        Some(n) => Some(n),
        None => {
            let wanted = name.clone();
            let teams = blocking(&app, |s| s.teams()).await?;
            teams.into_iter().find(|t| t.name == wanted).and_then(|t| t.pids_limit)
        }
    };
    let team = Team {
        name,
        gpu_quota: req.gpu_quota,
        log_quota_bytes: req.log_quota_bytes,
        pending_limit: req.pending_limit,
        max_priority: req.max_priority,
        preempt_other_teams: req.preempt_other_teams,
        pids_limit,
        max_services: req.max_services,
        max_replicas: req.max_replicas,
        pending_bytes_limit: req.pending_bytes_limit,
    };
    app.dispatch(Command::SetTeam { team, by: who }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Events, newest first: node registered or lost, GPU health changes, tokens created (cluster
/// events, for operators and admins) and events of the caller's teams.
#[utoipa::path(get, path = "/v1/events", params(EventQuery), security(("bearer" = [])),
    responses((status = 200, body = Vec<Event>)))]
pub async fn events(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Query(q): Query<EventQuery>,
) -> Result<(axum::http::HeaderMap, Json<Vec<Event>>), ApiError> {
    who.require_user()?;
    let limit = q.limit.unwrap_or(100).clamp(1, 10_000);
    if let Some(since) = q.since {
        validate::epoch_ms("since", since)?;
    }
    if let Some(subject) = &q.subject {
        validate::label("subject", subject)?;
    }
    let filter = EventFilter {
        limit,
        before: q.before,
        teams: who.visible_teams(),
        since: q.since,
        after: q.after,
        subject: q.subject,
    };
    let events = blocking(&app, move |s| s.events(&filter)).await?;
    Ok((super::next_page(events.len(), limit, events.last().map(|e| e.id)), Json(events)))
}

/// GPU-hours allocated per team (or per user) over a period, from the allocation history;
/// members and viewers see their own teams only.
#[utoipa::path(get, path = "/v1/usage", params(UsageQuery), security(("bearer" = [])),
    responses((status = 200, body = Vec<Usage>), (status = 400, body = ErrorBody)))]
pub async fn usage(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Query(q): Query<UsageQuery>,
) -> Result<Json<Vec<Usage>>, ApiError> {
    who.require_user()?;
    let now = crate::app::now_ms();
    let until = q.until.unwrap_or(now);
    validate::epoch_ms("until", until)?;
    let since = q.since.unwrap_or(until.saturating_sub(7 * 24 * 3_600_000).max(0));
    validate::epoch_ms("since", since)?;
    if since >= until {
        return Err(ApiError::Unprocessable("since: must be before until".into()));
    }
    let by_user = match q.by.as_deref().unwrap_or("team") {
        "team" => false,
        "user" => true,
        other => return Err(ApiError::BadRequest(format!("by: must be team or user, not `{other}`"))),
    };
    let teams = who.visible_teams();
    Ok(Json(blocking(&app, move |s| s.usage(since, until, by_user, teams)).await?))
}
