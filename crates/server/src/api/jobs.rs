//! Job endpoints: submit, list, get, cancel, logs. Handlers parse and validate, then hand a
//! [`Command`] to the dispatcher (reads go straight to the store).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_store::{Job, JobFilter, JobId, JobState, NewJob};

use super::extract::{Body, Path, Query};
use super::types::*;
use super::{blocking, validate};
use crate::app::{App, now_ms};
use crate::auth::Principal;
use crate::command::{Command, Outcome};
use crate::error::{ApiError, ErrorBody};
use crate::job_logs;

/// Largest log chunk returned at once.
const LOG_CHUNK: u64 = 1 << 20;

/// Submit a job.
#[utoipa::path(post, path = "/v1/jobs", request_body = SubmitRequest, security(("bearer" = [])),
    responses((status = 201, body = SubmitResponse), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "the job's team may not use its pool"), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "the team's pending limit is reached"),
        (status = 507, body = ErrorBody, description = "the server's data disk is below its free-space floor")))]
pub async fn submit(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<SubmitRequest>,
) -> Result<(StatusCode, Json<SubmitResponse>), ApiError> {
    let job = checked(&app, &who, req).await?;
    match app.dispatch(Command::Submit { job: Box::new(job), by: who }).await? {
        Outcome::Submitted { id, created } => Ok((StatusCode::CREATED, Json(SubmitResponse { id, created }))),
        other => Err(ApiError::Internal(format!("submit produced {other:?}"))),
    }
}

/// Apply a job file (`gantry apply`): the team's job of this `name` is left alone when the file
/// is the same (`unchanged`), updated in place while none of it has started (`configured`),
/// followed by a new one once it has ended (`created`), and, when it has started, refused (409)
/// unless `replace` (then what has not ended is cancelled and the file submitted: `replaced`).
/// The same checks as a submission.
#[utoipa::path(post, path = "/v1/jobs/apply", request_body = ApplyRequest, security(("bearer" = [])),
    responses((status = 200, body = ApplyResponse), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn apply(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<ApplyRequest>,
) -> Result<Json<ApplyResponse>, ApiError> {
    if req.job.name.is_none() {
        return Err(ApiError::Unprocessable(
            "job.name: applying needs the job's name (its identity in its team)".into(),
        ));
    }
    if !req.job.request_id.as_deref().is_some_and(|k| k.starts_with("apply-")) {
        return Err(ApiError::Unprocessable("job.request_id: must be the file's digest, `apply-…`".into()));
    }
    let job = checked(&app, &who, req.job).await?;
    match app.dispatch(Command::Apply { job: Box::new(job), replace: req.replace, by: who }).await? {
        Outcome::Applied(a) => {
            Ok(Json(ApplyResponse { id: a.id, action: a.action.as_str().into(), replaced: a.replaced }))
        }
        other => Err(ApiError::Internal(format!("apply produced {other:?}"))),
    }
}

/// The client's word for what it uploaded (a job's or a service's working directory), checked
/// against what `team` holds: 422 when it holds no such upload.
pub(super) async fn upload_held(
    app: &Arc<App>,
    team: &str,
    upload: gantry_api::upload::Upload,
) -> Result<(), ApiError> {
    let (app, team) = (Arc::clone(app), team.to_owned());
    tokio::task::spawn_blocking(move || app.uploads.confirm(&team, &upload))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| match e {
            crate::uploads::UploadError::NotFound(m) => ApiError::Unprocessable(format!("upload: {m}")),
            e => e.into(),
        })
}

/// A job's declared inputs: well formed, and the secret they name is one its team holds.
async fn inputs_checked(app: &Arc<App>, job: &NewJob) -> Result<(), ApiError> {
    gantry_api::inputs::check(&job.spec.inputs).map_err(ApiError::Unprocessable)?;
    let (secret, declared) = (job.spec.input_secret.as_deref(), !job.spec.inputs.is_empty());
    secret_checked(app, &job.team, "input_secret", "inputs", secret, declared).await.map(|_| ())
}

/// A job's declared outputs: well formed, and written with a secret its team holds that holds
/// S3 keys. Never with the node's own credentials: they may write where no team should
/// (another team's results, the shared datasets), and a member could overwrite anything they
/// reach (a secret holding only a region or an endpoint would have the agent sign with them).
async fn outputs_checked(app: &Arc<App>, job: &NewJob) -> Result<(), ApiError> {
    const KEYS: &str = "outputs: an upload is written with the team's own credentials: name them with --output-secret NAME (a secret made with `gantry secret set NAME AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=…`); the node's credentials are not lent for writes";
    gantry_api::outputs::check(&job.spec.outputs).map_err(ApiError::Unprocessable)?;
    if !job.spec.outputs.is_empty() && job.spec.output_secret.is_none() && job.spec.input_secret.is_none() {
        return Err(ApiError::Unprocessable(KEYS.into()));
    }
    let (secret, declared) = (job.spec.output_secret.as_deref(), !job.spec.outputs.is_empty());
    let named = secret_checked(app, &job.team, "output_secret", "outputs", secret, declared).await?;
    let used = match (named, job.spec.input_secret.as_deref().filter(|_| declared)) {
        (Some(values), _) => Some(values),
        (None, Some(name)) => {
            let (team, name) = (job.team.clone(), name.to_owned());
            blocking(app, move |s| s.secret(&team, &name)).await?
        }
        (None, None) => None,
    };
    if let Some(values) = used {
        let set = |k: &str| values.get(k).is_some_and(|v| !v.is_empty());
        if !(set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY")) {
            return Err(ApiError::Unprocessable(format!(
                "{KEYS}: the secret named holds no AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            )));
        }
    }
    Ok(())
}

/// A job's registry secret: beside an image, one its team holds, with a user name and password.
async fn registry_checked(app: &Arc<App>, job: &NewJob) -> Result<(), ApiError> {
    let secret = job.spec.registry_secret.as_deref();
    let named =
        secret_checked(app, &job.team, "registry_secret", "an image", secret, job.spec.image.is_some())
            .await?;
    if let Some(values) = named
        && gantry_api::types::RegistryCredentials::from_secret(&values).is_none()
    {
        return Err(ApiError::Unprocessable(
            "registry_secret: the secret must hold `username` and `password` (gantry secret set NAME username=… password=…)".into(),
        ));
    }
    Ok(())
}

/// The secret the field `field` names for a job's `what` (inputs or outputs): only beside some
/// (`declared`), and one `team` holds (another team's is as unknown as none); its values.
async fn secret_checked(
    app: &Arc<App>,
    team: &str,
    field: &str,
    what: &str,
    secret: Option<&str>,
    declared: bool,
) -> Result<Option<BTreeMap<String, String>>, ApiError> {
    let Some(name) = secret else { return Ok(None) };
    if !declared {
        return Err(ApiError::Unprocessable(format!("{field}: names the secret of {what}; declare one")));
    }
    let (owner, wanted) = (team.to_owned(), name.to_owned());
    match blocking(app, move |s| s.secret(&owner, &wanted)).await? {
        Some(values) => Ok(Some(values)),
        None => Err(ApiError::Unprocessable(format!(
            "{field}: team {team} has no secret `{name}` (gantry secret set {name} KEY=VALUE…)"
        ))),
    }
}

/// A submission checked as the API checks every one: fields, disk floor, dependencies the
/// caller may see, and (unless it waits for capacity) that some node could ever hold it.
async fn checked(app: &Arc<App>, who: &Principal, req: SubmitRequest) -> Result<NewJob, ApiError> {
    let mut job = new_job(req, who)?;
    // What an upload did is the agent's to report, never the submitter's.
    job.spec.outputs = job.spec.outputs.iter().map(gantry_api::outputs::Output::declared).collect();
    disk_floor(app)?;
    if let Some(upload) = job.spec.upload.clone() {
        upload_held(app, &job.team, upload).await?;
    }
    inputs_checked(app, &job).await?;
    outputs_checked(app, &job).await?;
    registry_checked(app, &job).await?;
    super::volumes::checked_mounts(app, &mut job).await?;
    for d in &job.spec.after {
        // Another team's job is as absent as one that never existed: its id reveals nothing.
        visible_job(app, who, d.job).await.map_err(|_| {
            ApiError::NotFound(format!("after: job {} not found (a job of a team you are in)", d.job))
        })?;
    }
    let pool_name = gantry_api::pools::pool_of(&job.spec.node_selector).to_owned();
    let view = {
        let app = Arc::clone(app);
        tokio::task::spawn_blocking(move || app.admission.view(&*app.store))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??
    };
    if let Some(pool) = view.pools.iter().find(|p| p.name == pool_name).filter(|p| !p.admits(&job.team)) {
        return Err(ApiError::Forbidden(format!(
            "team {} may not use pool {} (its teams: {}; an admin sets them with `gantry pool set`)",
            job.team,
            pool.name,
            pool.teams.join(", ")
        )));
    }
    if !job.spec.wait_for_capacity {
        let (nodes, gpus) = (&view.nodes, &view.gpus);
        let nodes = super::capacity::selected(&job.spec.node_selector, nodes, gpus)
            .map_err(ApiError::Unprocessable)?;
        let request = job.request();
        super::capacity::check(&request, &nodes, gpus).map_err(ApiError::Unprocessable)?;
        super::capacity::check_models(&job.spec.gpu_models, &nodes, gpus).map_err(ApiError::Unprocessable)?;
        super::capacity::check_gang(&request, job.replicas(), &nodes, gpus)
            .map_err(ApiError::Unprocessable)?;
        super::capacity::check_elastic(&request, &nodes, gpus).map_err(ApiError::Unprocessable)?;
    }
    Ok(job)
}

/// Refuses submissions (507) while the data disk has less free space than the floor: a job
/// accepted then could not keep its output, nor the store its state.
pub(super) fn disk_floor(app: &App) -> Result<(), ApiError> {
    let floor = app.config.output.min_free_disk;
    if floor == 0 {
        return Ok(());
    }
    let free = crate::output::free_bytes(&app.config.logs_dir)
        .map_err(|e| ApiError::Internal(format!("reading the data disk's free space: {e}")))?;
    if free < floor {
        return Err(ApiError::InsufficientStorage(format!(
            "the server's data disk has {} free, below its floor of {} (--min-free-disk): no jobs are accepted until an operator frees space",
            crate::output::size(free),
            crate::output::size(floor)
        )));
    }
    Ok(())
}

fn new_job(mut req: SubmitRequest, who: &Principal) -> Result<NewJob, ApiError> {
    validate::command(&req.command)?;
    validate::env(&req.env)?;
    validate::resources(&req)?;
    validate::workflow(&req)?;
    // The pool is one pair of the node selector from here on (`pool=NAME`).
    req.node_selector = gantry_api::pools::job_selector(req.pool.take().as_deref(), &req.node_selector)
        .map_err(ApiError::Unprocessable)?;
    if let Some(limit) = req.time_limit_s
        && !(1..=validate::MAX_TIME_LIMIT_S).contains(&limit)
    {
        return Err(ApiError::Unprocessable("time_limit_s: must be between 1 second and 31 days".into()));
    }
    let team = super::uploads::team_of(req.team.as_deref(), who)?;
    // A name taken from the program is cut to what a name may be, rather than refused.
    let program = req.command.first().map(|p| {
        let base = p.rsplit('/').next().unwrap_or(p);
        base.char_indices().take_while(|(i, c)| i + c.len_utf8() <= 128).map(|(_, c)| c).collect::<String>()
    });
    let name = req.name.clone().or(program).unwrap_or_default();
    validate::label("name", &name)?;
    if !(-1000..=1000).contains(&req.priority) {
        return Err(ApiError::Unprocessable("priority: must be between -1000 and 1000".into()));
    }
    if let Some(key) = &req.request_id {
        validate::label("request_id", key)?;
    }
    req.max_retries = Some(req.max_retries.unwrap_or(3).min(100));
    Ok(NewJob {
        spec: req,
        team,
        name,
        submitted_at: now_ms(),
        user: who.token.user.clone(),
        service: None,
        pending_limit: None,
        pending_bytes_limit: None,
    })
}

/// List jobs the caller may see, newest first, a page at a time.
#[utoipa::path(get, path = "/v1/jobs", params(ListQuery), security(("bearer" = [])),
    responses((status = 200, body = Vec<Job>), (status = 400, body = ErrorBody)))]
pub async fn list(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Query(q): Query<ListQuery>,
) -> Result<(axum::http::HeaderMap, Json<Vec<Job>>), ApiError> {
    who.require_user()?;
    let state = match q.state.as_deref() {
        None => None,
        Some(s) => Some(JobState::parse(s).ok_or_else(|| {
            let known: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::BadRequest(format!("state: unknown state `{s}` (known: {})", known.join(", ")))
        })?),
    };
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let labels = match q.label.as_deref() {
        None => Default::default(),
        Some(s) => gantry_api::workflow::parse_selector(s).map_err(ApiError::BadRequest)?,
    };
    let filter = JobFilter {
        state,
        team: q.team,
        teams: who.visible_teams(),
        before: q.before,
        limit: Some(limit),
        labels,
        array: q.array,
    };
    let mut jobs = blocking(&app, move |s| s.jobs(&filter)).await?;
    jobs.iter_mut().for_each(|j| {
        app.explain(j);
        who.redact_env(j);
    });
    Ok((super::next_page(jobs.len(), limit, jobs.last().map(|j| j.id)), Json(jobs)))
}

/// One job and its history.
#[utoipa::path(get, path = "/v1/jobs/{id}", params(("id" = i64, Path, description = "job id")), security(("bearer" = [])),
    responses((status = 200, body = JobDetail), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<JobId>,
) -> Result<Json<JobDetail>, ApiError> {
    who.require_user()?;
    let mut job = visible_job(&app, &who, id).await?;
    app.explain(&mut job);
    let gang = job.gang.as_ref().is_some_and(|g| !g.is_worker());
    let (transitions, attempts, mut workers, nodes, teams, mut loans, stall) = blocking(&app, move |s| {
        let workers = if gang { s.workers(id)? } else { Vec::new() };
        let (measured, stalled) = s.gpu_stall_of_job(id)?;
        let stall = gantry_api::types::JobStall::from_milli_ms(measured, stalled);
        Ok((s.transitions(id)?, s.attempts(id)?, workers, s.nodes()?, s.teams()?, s.loans()?, stall))
    })
    .await?;
    loans.retain(|l| l.owner == id || l.borrower == Some(id));
    who.redact_env(&mut job);
    workers.iter_mut().for_each(|w| who.redact_env(w));
    // The node it runs on, else the one its last attempt ran on.
    let node = job.node_id.clone().or_else(|| attempts.last().map(|a| a.node_id.clone()));
    let defaults = node.and_then(|n| nodes.into_iter().find(|x| x.id == n)).and_then(|n| n.job_defaults);
    let team_pids = teams.iter().find(|t| t.name == job.team).and_then(|t| t.pids_limit);
    let limits = defaults.map(|d| {
        d.for_job(job.request.memory_mib, job.request.cpu_milli, job.request.gpus as usize, team_pids)
    });
    let log_limit_bytes = app.config.log_limit_bytes;
    Ok(Json(JobDetail { job, transitions, attempts, log_limit_bytes, workers, limits, loans, stall }))
}

/// Cancel a job: pending jobs end now, running ones are stopped (SIGTERM, grace, SIGKILL). With
/// `array=true`, every unfinished member of the job's array.
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", params(("id" = i64, Path, description = "job id"), CancelQuery),
    security(("bearer" = [])), responses((status = 200, body = Job), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn cancel(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<JobId>,
    Query(q): Query<CancelQuery>,
) -> Result<Json<Job>, ApiError> {
    match app.dispatch(Command::Cancel { id, array: q.array, by: who.clone() }).await? {
        Outcome::Job(mut job) => {
            who.redact_env(&mut job);
            Ok(Json(*job))
        }
        other => Err(ApiError::Internal(format!("cancel produced {other:?}"))),
    }
}

/// A job's output from `offset`, a position in the whole stream (the agent writes it; this serves
/// the files), of its latest attempt or the one `attempt` names (each attempt's output is kept).
/// Output beyond the job's log limit is rotated away: a reader asking for it gets the oldest output
/// kept, and the `x-gantry-log-offset` header says where that starts. A gang's output is its rank 0
/// worker's (as torchrun prints it); each worker's own is under its id.
#[utoipa::path(get, path = "/v1/jobs/{id}/logs", params(("id" = i64, Path, description = "job id"), LogQuery),
    security(("bearer" = [])), responses((status = 200, body = String, content_type = "text/plain",
        headers(("x-gantry-log-offset" = u64, description = "position of the first byte returned"))),
        (status = 404, body = ErrorBody)))]
pub async fn logs(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<JobId>,
    Query(q): Query<LogQuery>,
) -> Result<([(&'static str, String); 1], Vec<u8>), ApiError> {
    let (dir, stream, id) = log_source(&app, &who, id, &q).await?;
    let offset = q.offset.unwrap_or(0);
    validate::at_most("offset", offset, validate::MAX_OFFSET)?;
    let chunk = tokio::task::spawn_blocking(move || job_logs::read(&dir, &stream, offset, LOG_CHUNK))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| ApiError::Internal(format!("reading the output of job {id}: {e}")))?;
    Ok(([(job_logs::OFFSET_HEADER, chunk.offset.to_string())], chunk.bytes))
}

/// When the job's output was written (`gantry logs --timestamps` and `--since`): for the
/// stream and attempt the logs endpoint would read, the record that dates `offset` and the later
/// ones, at most 100,000 (page on with the last one's offset), each `{offset, at_ms}`. Who may
/// call it and what it reveals are the logs endpoint's.
#[utoipa::path(get, path = "/v1/jobs/{id}/logs/times", params(("id" = i64, Path, description = "job id"), LogQuery),
    security(("bearer" = [])), responses((status = 200, body = Vec<gantry_api::job_log_times::Written>),
        (status = 404, body = ErrorBody)))]
pub async fn log_times(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<JobId>,
    Query(q): Query<LogQuery>,
) -> Result<Json<Vec<gantry_api::job_log_times::Written>>, ApiError> {
    let (dir, stream, id) = log_source(&app, &who, id, &q).await?;
    let offset = q.offset.unwrap_or(0);
    validate::at_most("offset", offset, validate::MAX_OFFSET)?;
    let times =
        tokio::task::spawn_blocking(move || gantry_api::job_log_times::from(&dir, &stream, offset, 100_000))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(|e| ApiError::Internal(format!("reading the output times of job {id}: {e}")))?;
    Ok(Json(times))
}

/// The directory and stream a logs request reads, and the job whose output it is (a gang's
/// rank 0 worker for the gang); 404 for a job the caller may not see or an attempt it lacks.
async fn log_source(
    app: &Arc<App>,
    who: &Principal,
    id: JobId,
    q: &LogQuery,
) -> Result<(std::path::PathBuf, String, JobId), ApiError> {
    who.require_user()?;
    let stream = match q.stream.as_deref().unwrap_or("stdout") {
        s @ ("stdout" | "stderr") => s.to_owned(),
        s => {
            return Err(ApiError::BadRequest(format!("stream: must be stdout or stderr, not `{s}`")));
        }
    };
    let job = visible_job(app, who, id).await?;
    let asked = id;
    let job = if job.gang.as_ref().is_some_and(|g| !g.is_worker()) {
        blocking(app, move |s| s.workers(id)).await?.into_iter().next().unwrap_or(job)
    } else {
        job
    };
    let id = job.id;
    let attempt = q.attempt.unwrap_or(job.attempt);
    if q.attempt.is_some() && (attempt == 0 || attempt > job.attempt) {
        let has = match job.attempt {
            0 => "has not run yet".to_owned(),
            1 => "has only attempt 1".to_owned(),
            n => format!("has attempts 1 to {n}"),
        };
        return Err(ApiError::NotFound(format!("job {asked} has no attempt {attempt}: it {has}")));
    }
    Ok((job_logs::read_dir_for(&app.config.logs_dir, id, attempt, job.attempt), stream, id))
}

/// The job, if the caller may see it; 404 either way otherwise, so another team's job ids reveal
/// nothing.
async fn visible_job(app: &Arc<App>, who: &Principal, id: JobId) -> Result<Job, ApiError> {
    match blocking(app, move |s| s.job(id)).await? {
        Some(job) if who.sees_team(&job.team) => Ok(job),
        _ => Err(not_found(id)),
    }
}

fn not_found(id: JobId) -> ApiError {
    ApiError::NotFound(format!("job {id} not found"))
}
