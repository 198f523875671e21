//! Service endpoints: apply, list, get, delete. Applying checks the file (its own rules, the
//! `autoscale` block with the core's types, that some node could hold a replica) and hands the
//! dispatcher one audited command; the controller ([`crate::services`]) does the rest.
//!
//! A service is its team's: a caller who does not see the team gets the 404 of a service that
//! does not exist, and only members (and admins) change it.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_api::service::{
    ReplicaCounts, ReplicaView, ServiceApplied, ServiceSpec, ServiceTraffic, ServiceView,
};
use gantry_store::{JobRequest, Service};
use serde::Deserialize;
use sha2::Digest as _;

use super::extract::{Body, Path, Query};
use super::{blocking, validate};
use crate::app::App;
use crate::auth::Principal;
use crate::command::{Command, Outcome};
use crate::error::{ApiError, ErrorBody};
use crate::gateway::ServiceKey;

/// Decisions `get` shows.
const DECISIONS_SHOWN: u32 = 20;

/// Which team's service (`?team=`; default: the caller's only team).
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct TeamQuery {
    /// The team (default: the caller's only team, else `default`).
    pub team: Option<String>,
}

/// Apply a service file: a new service (`created`), the same file again (`unchanged`), or a
/// changed one (`configured`: a new generation, its replicas replaced one at a time, a new
/// one ready before an old one drains). Members of the service's team and admins.
#[utoipa::path(post, path = "/v1/services", operation_id = "apply_service", request_body = ServiceSpec, security(("bearer" = [])),
    responses((status = 200, body = ServiceApplied), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn apply(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(mut spec): Body<ServiceSpec>,
) -> Result<Json<ServiceApplied>, ApiError> {
    who.require_user()?;
    let team = team_of(&who, spec.team.as_deref())?;
    spec.team = Some(team.clone());
    check(&app, &spec).await?;
    super::volumes::node_of(&app, &team, &spec.volumes).await?;
    if let Some(name) = spec.registry_secret.clone() {
        let (owner, wanted) = (team.clone(), name.clone());
        let values = blocking(&app, move |s| s.secret(&owner, &wanted)).await?;
        let ok = values.is_some_and(|v| gantry_api::types::RegistryCredentials::from_secret(&v).is_some());
        if !ok {
            return Err(ApiError::Unprocessable(format!(
                "registry_secret: team {team} has no secret `{name}` holding username and password"
            )));
        }
    }
    if let Some(upload) = spec.upload.clone() {
        super::jobs::upload_held(&app, &team, upload).await?;
    }
    let digest = digest(&spec)?;
    let name = spec.name.clone();
    let command = Command::ApplyService { team: team.clone(), spec: Box::new(spec), digest, by: who };
    match app.dispatch(command).await? {
        Outcome::Service { action, generation } => {
            Ok(Json(ServiceApplied { name, team, action: action.as_str().into(), generation }))
        }
        other => Err(ApiError::Internal(format!("service apply produced {other:?}"))),
    }
}

/// The caller's services (every team's for operators and admins), by team and name.
#[utoipa::path(get, path = "/v1/services", operation_id = "list_services", security(("bearer" = [])),
    responses((status = 200, body = Vec<ServiceView>)))]
pub async fn list(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<ServiceView>>, ApiError> {
    who.require_user()?;
    let teams = who.visible_teams();
    let services = blocking(&app, move |s| s.services(teams)).await?;
    let mut out = Vec::with_capacity(services.len());
    for s in services {
        out.push(view(&app, s).await?);
    }
    Ok(Json(out))
}

/// One service: its counts, replicas (state, node, GPUs, ready), the gateway's figures and the
/// last decisions with their reasons.
#[utoipa::path(get, path = "/v1/services/{name}", operation_id = "get_service", params(("name" = String, Path, description = "service name"), TeamQuery),
    security(("bearer" = [])), responses((status = 200, body = ServiceView), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    Query(q): Query<TeamQuery>,
) -> Result<Json<ServiceView>, ApiError> {
    who.require_user()?;
    let service = visible(&app, &who, q.team.as_deref(), name).await?;
    Ok(Json(view(&app, service).await?))
}

/// Delete a service: its replicas stop and its path answers 404. Members of its team and admins.
#[utoipa::path(delete, path = "/v1/services/{name}", operation_id = "delete_service", params(("name" = String, Path, description = "service name"), TeamQuery),
    security(("bearer" = [])), responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    Query(q): Query<TeamQuery>,
) -> Result<StatusCode, ApiError> {
    who.require_user()?;
    let team = team_of(&who, q.team.as_deref())?;
    let key = crate::gateway::ServiceKey::new(&team, &name);
    app.dispatch(Command::DeleteService { team, name, by: who }).await?;
    app.gateway.remove(&key);
    Ok(StatusCode::NO_CONTENT)
}

/// The team a request names, else the caller's only one, else `default`.
fn team_of(who: &Principal, named: Option<&str>) -> Result<String, ApiError> {
    let team = match (named, who.token.teams.as_slice()) {
        (Some(team), _) => team.to_owned(),
        (None, [only]) => only.clone(),
        (None, []) => "default".into(),
        (None, _) => return Err(ApiError::Unprocessable("team: you are in several teams; name one".into())),
    };
    validate::word("team", &team)?;
    Ok(team)
}

/// The service if the caller sees its team; else the 404 of one that does not exist.
async fn visible(
    app: &Arc<App>,
    who: &Principal,
    team: Option<&str>,
    name: String,
) -> Result<Service, ApiError> {
    let team = team_of(who, team)?;
    let missing = || ApiError::NotFound(format!("service {name} not found in team {team}"));
    if !who.sees_team(&team) {
        return Err(missing());
    }
    let (t, n) = (team.clone(), name.clone());
    blocking(app, move |s| s.service(&t, &n)).await?.ok_or_else(missing)
}

/// The file's own rules, the environment and labels as a job's, the autoscale block, and that
/// some node could hold a replica.
async fn check(app: &Arc<App>, spec: &ServiceSpec) -> Result<(), ApiError> {
    spec.check().map_err(ApiError::Unprocessable)?;
    if let Some(image) = &spec.image {
        validate::image_ref(image)?;
    }
    if !spec.command.is_empty() {
        validate::command(&spec.command)?;
    }
    validate::env(&spec.env)?;
    crate::services::scale::autoscale_config(spec).map_err(ApiError::Unprocessable)?;
    if !(-1000..=1000).contains(&spec.priority) {
        return Err(ApiError::Unprocessable("priority: must be between -1000 and 1000".into()));
    }
    let request = JobRequest {
        gpus: spec.gpus,
        gpu_memory_mib: spec.gpu_memory.unwrap_or(0),
        cpu_milli: spec.cpu.map_or(0, |c| (c * 1000.0).round() as u64),
        memory_mib: spec.memory.unwrap_or(0),
        ..JobRequest::default()
    };
    let (nodes, gpus) = blocking(app, |s| Ok((s.nodes()?, s.gpus()?))).await?;
    super::capacity::check(&request, &nodes, &gpus)
        .map_err(|e| ApiError::Unprocessable(format!("a replica: {e}")))
}

/// The digest of the file's meaning (its JSON, keys in order): the same file is a no-op.
fn digest(spec: &ServiceSpec) -> Result<String, ApiError> {
    let text = serde_json::to_string(spec).map_err(|e| ApiError::Internal(e.to_string()))?;
    let hash = sha2::Sha256::digest(text.as_bytes());
    Ok(hash.iter().map(|b| format!("{b:02x}")).collect())
}

/// What `service get` shows.
async fn view(app: &Arc<App>, s: Service) -> Result<ServiceView, ApiError> {
    let (team, name, id) = (s.team.clone(), s.name.clone(), s.id);
    let (replicas, decisions) = blocking(app, move |st| {
        Ok((st.service_replicas(&team, &name, 0)?, st.service_decisions(id, DECISIONS_SHOWN)?))
    })
    .await?;
    let status = app.service_status.get(&s.team, &s.name);
    let mut list = Vec::new();
    for r in replicas {
        let seen = status.replicas.get(&r.job.id);
        let mut reason = seen.and_then(|x| x.reason.clone());
        if reason.is_none() && r.job.state == gantry_store::JobState::Pending {
            let mut job = r.job.clone();
            app.explain(&mut job);
            reason = job.reason;
        }
        list.push(ReplicaView {
            job: r.job.id,
            state: r.job.state,
            generation: r.generation,
            node: r.job.node_id.clone(),
            gpus: r.job.gpu_uuids.clone(),
            address: seen.and_then(|x| x.address).map(|a| a.to_string()),
            ready: seen.is_some_and(|x| x.ready),
            reason,
        });
    }
    let ready = list.iter().filter(|r| r.ready).count() as u32;
    let snapshot = app.gateway.snapshot(&ServiceKey::new(&s.team, &s.name));
    let traffic = snapshot.map_or_else(ServiceTraffic::default, |t| ServiceTraffic {
        rps: t.rps,
        in_flight: t.in_flight as u64,
        queue_length: t.queue_length as u64,
        latency_p50_s: t.latency_p50_s,
        latency_p95_s: t.latency_p95_s,
        ttfb_p50_s: t.ttft_p50_s,
        ttfb_p95_s: t.ttft_p95_s,
        errors: t.errors,
    });
    let path = format!("/{}/{}/", s.team, s.name);
    let endpoint = match app.config.gateway_listen {
        Some(addr) => {
            let scheme = if app.gateway.config().tls { "https" } else { "http" };
            format!("{scheme}://{addr}{path}")
        }
        None => path,
    };
    let r = s.spec.replicas;
    Ok(ServiceView {
        name: s.name,
        team: s.team,
        endpoint,
        public: s.spec.public,
        generation: s.generation,
        replicas: ReplicaCounts { desired: s.desired, ready, min: r.min, max: r.max },
        reason: status.short,
        rollout: status.rollout,
        replica_list: list,
        traffic,
        decisions,
        spec: s.spec,
        created_at: s.created_at,
    })
}
