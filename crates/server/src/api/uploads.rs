//! Upload endpoints ([`crate::uploads`]): the client asks which file digests its team lacks
//! (`POST /v1/uploads/missing`), puts those (`PUT /v1/uploads/blobs/{sha256}`), then the
//! manifest (`PUT /v1/uploads/manifest`), and submits the job with the answer. An agent fetches
//! the manifest and files of a job placed on its node (`GET /v1/agent/jobs/{id}/upload[/{sha256}]`).
//!
//! Who may call: the user endpoints take members of the team (and admins), the team named by
//! `?team=` or the token's one team, as a submission does; a read of another team's upload is
//! a 404, as for an upload that never was. The agent endpoints take the node credential of the
//! node the job is placed on, and serve only files its manifest names. These write files, not
//! store state, so they build no [`crate::command::Command`] (as job output does not).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use gantry_api::types::{RegistryCredentials, ResolvedImage};
use gantry_api::upload::{Manifest, MissingRequest, MissingResponse, Upload};
use gantry_store::JobId;
use serde::Deserialize;

use super::blocking;
use super::extract::{Body, Path, Query};
use crate::app::App;
use crate::auth::Principal;
use crate::error::{ApiError, ErrorBody};
use crate::uploads::UploadError;

/// The team an upload is for.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct TeamQuery {
    /// The team (default: the token's one team).
    pub team: Option<String>,
}

impl From<UploadError> for ApiError {
    fn from(e: UploadError) -> Self {
        match e {
            UploadError::Refused(m) => ApiError::Unprocessable(m),
            UploadError::NotFound(m) => ApiError::NotFound(m),
            UploadError::TooLarge(m) => ApiError::Rejected(axum::http::StatusCode::PAYLOAD_TOO_LARGE, m),
            UploadError::QuotaFull(m) => ApiError::InsufficientStorage(m),
            e @ UploadError::Io { .. } => ApiError::Internal(e.to_string()),
        }
    }
}

/// The team of an upload or a submission: the one named, else the token's only team.
pub(super) fn team_of(team: Option<&str>, who: &Principal) -> Result<String, ApiError> {
    let team = match (team, who.token.teams.as_slice()) {
        (Some(team), _) => team.to_owned(),
        (None, [only]) => only.clone(),
        (None, []) => "default".into(),
        (None, _) => return Err(ApiError::Unprocessable("team: you are in several teams; name one".into())),
    };
    super::validate::word("team", &team)?;
    Ok(team)
}

/// Runs an upload step on the blocking pool.
async fn on_disk<T: Send + 'static>(
    app: &Arc<App>,
    f: impl FnOnce(&crate::uploads::Uploads) -> Result<T, UploadError> + Send + 'static,
) -> Result<T, ApiError> {
    let app = Arc::clone(app);
    Ok(tokio::task::spawn_blocking(move || f(&app.uploads))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??)
}

/// Which of these file digests the team does not hold yet, and the cap on a working directory.
#[utoipa::path(post, path = "/v1/uploads/missing", params(TeamQuery), request_body = MissingRequest,
    security(("bearer" = [])),
    responses((status = 200, body = MissingResponse), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn missing(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Query(q): Query<TeamQuery>,
    Body(req): Body<MissingRequest>,
) -> Result<Json<MissingResponse>, ApiError> {
    let team = team_of(q.team.as_deref(), &who)?;
    who.require_member_of(&team)?;
    if req.digests.len() > gantry_api::upload::MAX_ENTRIES {
        return Err(ApiError::Unprocessable(format!(
            "digests: at most {} at once",
            gantry_api::upload::MAX_ENTRIES
        )));
    }
    let limit_bytes = app.uploads.limit();
    let missing = on_disk(&app, move |u| u.missing(&team, &req.digests)).await?;
    Ok(Json(MissingResponse { missing, limit_bytes }))
}

/// Upload one file's bytes, named by their SHA-256 (422 when they hash to something else, 413
/// above the cap).
#[utoipa::path(put, path = "/v1/uploads/blobs/{sha256}", params(("sha256" = String, Path, description = "hex SHA-256 of the body"), TeamQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"), security(("bearer" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 507, body = ErrorBody, description = "the server's data disk is below its free-space floor")))]
pub async fn put_blob(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(sha256): Path<String>,
    Query(q): Query<TeamQuery>,
    body: axum::body::Body,
) -> Result<StatusCode, ApiError> {
    let team = team_of(q.team.as_deref(), &who)?;
    who.require_member_of(&team)?;
    super::jobs::disk_floor(&app)?;
    // Streamed to disk as it arrives: a body is never held in memory whole, and a declared
    // length past the cap or the team's quota is refused before a byte is read.
    let declared = http_body::Body::size_hint(&body).exact();
    let mut frames = body.into_data_stream();
    let mut writer = match on_disk(&app, move |u| u.blob_writer(&team, &sha256, declared)).await {
        Ok(w) => w,
        Err(e) => return Err(drained(&mut frames, e).await),
    };
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_SIZE);
    loop {
        let frame = futures_util::StreamExt::next(&mut frames).await;
        let end = match frame {
            Some(Ok(bytes)) => {
                buf.extend_from_slice(&bytes);
                false
            }
            Some(Err(e)) => return Err(ApiError::BadRequest(format!("the body could not be read: {e}"))),
            None => true,
        };
        if buf.len() >= WRITE_SIZE || (end && !buf.is_empty()) {
            let chunk = std::mem::replace(&mut buf, Vec::with_capacity(WRITE_SIZE));
            let written = tokio::task::spawn_blocking(move || writer.write(&chunk).map(|()| writer))
                .await
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            writer = match written {
                Ok(w) => w,
                Err(e) => return Err(drained(&mut frames, e).await),
            };
        }
        if end {
            break;
        }
    }
    on_disk(&app, move |u| u.finish_blob(writer)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Reads and discards the rest of a refused body (at most [`DRAIN_LIMIT`] bytes), then gives
/// back `error`. An HTTP/1.1 client sends its whole body before it reads the answer: closing
/// the connection on unread bytes resets it, and the client would see a broken pipe instead
/// of the sentence. Nothing read is kept.
async fn drained<S, E>(frames: &mut S, error: impl Into<ApiError>) -> ApiError
where
    S: futures_util::Stream<Item = Result<axum::body::Bytes, E>> + Unpin,
{
    let mut read = 0u64;
    while read < DRAIN_LIMIT {
        match futures_util::StreamExt::next(frames).await {
            Some(Ok(bytes)) => read += bytes.len() as u64,
            _ => break,
        }
    }
    error.into()
}

/// Most bytes of a refused body read (and discarded) so that its client sees the answer.
const DRAIN_LIMIT: u64 = 256 << 20;

/// Bytes of a blob gathered before each write to disk.
const WRITE_SIZE: usize = 1 << 20;

/// Post a working directory's manifest once its files are uploaded: checked (paths and links
/// inside, under the cap, every file present with its size) and kept; the answer is what a
/// submission names in `upload`.
#[utoipa::path(put, path = "/v1/uploads/manifest", params(TeamQuery), request_body = Manifest,
    security(("bearer" = [])),
    responses((status = 200, body = Upload), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn put_manifest(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Query(q): Query<TeamQuery>,
    Body(manifest): Body<Manifest>,
) -> Result<Json<Upload>, ApiError> {
    let team = team_of(q.team.as_deref(), &who)?;
    who.require_member_of(&team)?;
    Ok(Json(on_disk(&app, move |u| u.put_manifest(&team, &manifest)).await?))
}

/// A manifest of a team the caller sees (404 for any other).
#[utoipa::path(get, path = "/v1/uploads/manifests/{digest}", params(("digest" = String, Path, description = "sha256:…"), TeamQuery),
    security(("bearer" = [])), responses((status = 200, body = Manifest), (status = 404, body = ErrorBody)))]
pub async fn get_manifest(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(digest): Path<String>,
    Query(q): Query<TeamQuery>,
) -> Result<Json<Manifest>, ApiError> {
    who.require_user()?;
    let team = team_of(q.team.as_deref(), &who)?;
    if !who.sees_team(&team) {
        return Err(ApiError::NotFound(format!("upload {digest} not found (an upload of your team)")));
    }
    Ok(Json(on_disk(&app, move |u| u.manifest(&team, &digest)).await?))
}

/// The manifest of the working directory of a job placed on the caller's node.
#[utoipa::path(get, path = "/v1/agent/jobs/{id}/upload", params(("id" = i64, Path, description = "job id")),
    security(("bearer" = [])), responses((status = 200, body = Manifest), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn agent_manifest(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<JobId>,
) -> Result<Json<Manifest>, ApiError> {
    let (team, upload) = placed_here(&app, &who, id).await?;
    Ok(Json(on_disk(&app, move |u| u.manifest(&team, &upload.digest)).await?))
}

/// A node's word for the manifest digest a job's image resolved to (its tag, pulled there):
/// the job records the first one, and every later attempt runs that digest.
#[utoipa::path(post, path = "/v1/agent/jobs/{id}/image", params(("id" = i64, Path, description = "job id")),
    request_body = ResolvedImage, security(("bearer" = [])),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn agent_image(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<JobId>,
    Body(req): Body<ResolvedImage>,
) -> Result<StatusCode, ApiError> {
    let node = who.token.node.clone().unwrap_or_default();
    who.require_node(&node)?;
    let valid = req.digest.strip_prefix("sha256:").is_some_and(gantry_api::upload::is_hex_sha256);
    if !valid {
        return Err(ApiError::Unprocessable("digest: sha256: and 64 lowercase hex digits".into()));
    }
    let job = blocking(&app, move |s| s.job(id)).await?;
    match job {
        Some(j) if j.node_id.as_deref() == Some(node.as_str()) && j.image.is_some() => {}
        _ => return Err(ApiError::NotFound(format!("job {id} with an image is not placed on node {node}"))),
    }
    blocking(&app, move |s| s.resolved_image(id, &req.digest)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The registry login of the image of a job placed on the caller's node: the values of the
/// team secret the job names (`registry_secret`), over the node's authenticated channel only.
#[utoipa::path(get, path = "/v1/agent/jobs/{id}/registry-credentials", params(("id" = i64, Path, description = "job id")),
    security(("bearer" = [])), responses((status = 200, body = RegistryCredentials), (status = 404, body = ErrorBody)))]
pub async fn agent_registry_credentials(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<JobId>,
) -> Result<Json<RegistryCredentials>, ApiError> {
    let node = who.token.node.clone().unwrap_or_default();
    who.require_node(&node)?;
    let job = blocking(&app, move |s| s.job(id)).await?;
    let found = job.filter(|j| j.node_id.as_deref() == Some(node.as_str()) && !j.state.is_terminal());
    let Some((team, Some(name))) = found.map(|j| (j.team, j.image.and_then(|i| i.secret))) else {
        return Err(ApiError::NotFound(format!(
            "job {id} with a registry secret is not placed on node {node}"
        )));
    };
    let (owner, wanted) = (team.clone(), name.clone());
    let values = blocking(&app, move |s| s.secret(&owner, &wanted)).await?.unwrap_or_default();
    RegistryCredentials::from_secret(&values).map(Json).ok_or_else(|| {
        ApiError::NotFound(format!("team {team}'s secret `{name}` holds no username and password"))
    })
}

/// One file of the working directory of a job placed on the caller's node.
#[utoipa::path(get, path = "/v1/agent/jobs/{id}/upload/{sha256}",
    params(("id" = i64, Path, description = "job id"), ("sha256" = String, Path, description = "the file's hex SHA-256")),
    security(("bearer" = [])), responses((status = 200, body = Vec<u8>, content_type = "application/octet-stream"), (status = 404, body = ErrorBody)))]
pub async fn agent_blob(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path((id, sha256)): Path<(JobId, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let (team, upload) = placed_here(&app, &who, id).await?;
    let bytes = on_disk(&app, move |u| {
        if !u.names(&team, &upload.digest, &sha256)? {
            return Err(UploadError::NotFound(format!("file {sha256} is not in job {id}'s upload")));
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut u.blob(&team, &sha256)?, &mut bytes)
            .map_err(|source| UploadError::Io { what: format!("reading file {sha256}"), source })?;
        Ok(bytes)
    })
    .await?;
    Ok(([(CONTENT_TYPE, "application/octet-stream")], bytes))
}

/// The team and upload of job `id`, when it is placed on the caller's node and not ended; 404
/// otherwise (a node learns nothing of jobs placed elsewhere).
async fn placed_here(app: &Arc<App>, who: &Principal, id: JobId) -> Result<(String, Upload), ApiError> {
    let node = who.token.node.clone().unwrap_or_default();
    who.require_node(&node)?;
    let job = blocking(app, move |s| s.job(id)).await?;
    match job {
        Some(j) if j.node_id.as_deref() == Some(node.as_str()) && !j.state.is_terminal() => match j.upload {
            Some(upload) => Ok((j.team, upload)),
            None => Err(ApiError::NotFound(format!("job {id} has no upload"))),
        },
        _ => Err(ApiError::NotFound(format!("job {id} is not placed on node {node}"))),
    }
}
