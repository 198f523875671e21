//! Volumes (`gantry volume create|rm`, `gantry volumes`): a team's directories that outlive its
//! jobs, shared under an admin-allowed root or on one node. Operators and admins create and
//! delete them; members list their teams'. A job names the ones it mounts
//! ([`checked_mounts`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_api::volumes::{AssignedVolume, Volume, VolumeRequest};
use gantry_store::NewJob;

use super::extract::{Body, Path, Query};
use super::services::TeamQuery;
use super::{blocking, validate};
use crate::app::{App, now_ms};
use crate::auth::Principal;
use crate::command::Command;
use crate::error::{ApiError, ErrorBody};

/// Create a volume (operators and admins): `path` a directory under one of the server's
/// `--volume-root`s (shared by every node), or `node` the node it lives on (default: the only
/// registered node).
#[utoipa::path(post, path = "/v1/volumes", operation_id = "create_volume", request_body = VolumeRequest,
    security(("bearer" = [])), responses((status = 201, body = Volume), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<VolumeRequest>,
) -> Result<(StatusCode, Json<Volume>), ApiError> {
    who.require_user()?;
    who.require_operator()?;
    gantry_api::volumes::check_name(&req.name).map_err(ApiError::Unprocessable)?;
    let team = super::uploads::team_of(req.team.as_deref(), &who)?;
    if let Some(size) = req.size_bytes {
        validate::at_most("size_bytes", size, 1 << 50)?;
    }
    let nodes = blocking(&app, |s| s.nodes()).await?;
    let (path, node) = match (req.path, req.node) {
        (Some(_), Some(_)) => {
            return Err(ApiError::Unprocessable(
                "name either path (shared) or node (node-local), not both".into(),
            ));
        }
        (Some(path), None) => {
            let p = std::path::Path::new(&path);
            let plain = p.is_absolute()
                && p.components()
                    .all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_)));
            let allowed = app.config.volume_roots.iter().any(|root| p.starts_with(root) && p != root);
            if !plain || !allowed {
                let roots: Vec<String> =
                    app.config.volume_roots.iter().map(|r| r.display().to_string()).collect();
                return Err(ApiError::Unprocessable(format!(
                    "path: `{path}` is not a plain path under a shared root the server allows ({}; --volume-root)",
                    if roots.is_empty() { "none".to_owned() } else { roots.join(", ") }
                )));
            }
            (Some(path), None)
        }
        (None, Some(node)) => {
            if !nodes.iter().any(|n| n.id == node) {
                return Err(ApiError::Unprocessable(format!("node: no registered node {node}")));
            }
            (None, Some(node))
        }
        (None, None) => match nodes.as_slice() {
            [only] => (None, Some(only.id.clone())),
            _ => {
                return Err(ApiError::Unprocessable(format!(
                    "name --node NODE (a node-local volume) or --path DIR (under a --volume-root); there are {} nodes",
                    nodes.len()
                )));
            }
        },
    };
    let volume =
        Volume { name: req.name, team, path, node, size_bytes: req.size_bytes, created_at: now_ms() };
    app.dispatch(Command::CreateVolume { volume: volume.clone(), by: who }).await?;
    Ok((StatusCode::CREATED, Json(volume)))
}

/// The volumes of the caller's teams (every team's for operators and admins).
#[utoipa::path(get, path = "/v1/volumes", operation_id = "list_volumes", security(("bearer" = [])),
    responses((status = 200, body = Vec<Volume>)))]
pub async fn list(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<Volume>>, ApiError> {
    who.require_user()?;
    let teams = who.visible_teams();
    Ok(Json(blocking(&app, move |s| s.volumes(teams)).await?))
}

/// Delete a volume's record (operators and admins; 409 while a job that has not ended mounts
/// it). Its files stay where they are.
#[utoipa::path(delete, path = "/v1/volumes/{name}", operation_id = "delete_volume",
    params(("name" = String, Path, description = "volume name"), TeamQuery),
    security(("bearer" = [])), responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub async fn delete(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    Query(q): Query<TeamQuery>,
) -> Result<StatusCode, ApiError> {
    who.require_user()?;
    let team = super::uploads::team_of(q.team.as_deref(), &who)?;
    app.dispatch(Command::DeleteVolume { team, name, by: who }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Checks a submission's volumes: well formed, each one of its team's (404 otherwise), not
/// with a container image (not yet), and at most one node among the node-local ones, whose
/// node the job is then held to (`node.id` in its node selector).
pub(super) async fn checked_mounts(app: &Arc<App>, job: &mut NewJob) -> Result<(), ApiError> {
    if job.spec.volumes.is_empty() {
        return Ok(());
    }
    let Some(node) = node_of(app, &job.team, &job.spec.volumes).await? else { return Ok(()) };
    let key = gantry_api::pools::NODE_ID.to_owned();
    if job.spec.node_selector.get(&key).is_some_and(|n| *n != node) {
        return Err(ApiError::Unprocessable(format!("volumes: they live on node {node}, not the one named")));
    }
    job.spec.node_selector.insert(key, node);
    Ok(())
}

/// Checks `mounts` of a job or service of `team`: well formed and each one of the team's
/// volumes (404 otherwise); the node the node-local ones live on, if any (422 when they live
/// on two).
pub(super) async fn node_of(
    app: &Arc<App>,
    team: &str,
    mounts: &[gantry_api::volumes::VolumeMount],
) -> Result<Option<String>, ApiError> {
    gantry_api::volumes::check_mounts(mounts).map_err(ApiError::Unprocessable)?;
    if mounts.is_empty() {
        return Ok(None);
    }
    let owner = team.to_owned();
    let have = blocking(app, move |s| s.volumes(Some(vec![owner]))).await?;
    let mut nodes = std::collections::BTreeSet::new();
    for m in mounts {
        let Some(v) = have.iter().find(|v| v.name == m.name) else {
            return Err(ApiError::NotFound(format!(
                "volume {} not found in team {team} (gantry volumes lists them)",
                m.name
            )));
        };
        nodes.extend(v.node.clone());
    }
    if nodes.len() > 1 {
        return Err(ApiError::Unprocessable(format!(
            "volumes: they live on different nodes ({}); a job runs on one",
            nodes.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(nodes.into_iter().next())
}

/// The volumes a job mounts as its node finds them (`volumes` of its team, read once per
/// heartbeat). A volume is not deleted while a job that has not ended or a service mounts it,
/// so every mount finds its volume.
pub(super) fn assigned(job: &gantry_store::Job, volumes: &[Volume]) -> Vec<AssignedVolume> {
    job.volumes
        .iter()
        .filter_map(|m| {
            let v = volumes.iter().find(|v| v.team == job.team && v.name == m.name)?;
            Some(AssignedVolume {
                name: m.name.clone(),
                path: m.path.clone(),
                read_only: m.read_only,
                source: v.path.clone(),
                size_bytes: v.size_bytes,
            })
        })
        .collect()
}
