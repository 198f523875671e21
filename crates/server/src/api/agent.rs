//! The agent protocol, version 1: once, `POST /v1/agent/join` with a one-time join token, which
//! answers the node's own credential (and, over TLS, a client certificate); then, with that
//! credential, `POST /v1/agent/register` and `POST /v1/agent/heartbeat` every interval. A node
//! credential acts for its node alone: it registers only that node id, claims no GPU a live node
//! holds, and its reports about jobs placed elsewhere change nothing. A heartbeat carries GPU health and samples and the state of the node's jobs;
//! the answer is the full list of jobs the node must run. A credential that a join over TLS
//! issued is bound to the client certificate issued with it: without that certificate it is
//! refused (403), so a credential copied off a node (or out of a log) is of no use alone. A heartbeat with an old epoch gets 409
//! and the agent must stop everything and register again (fencing).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_store::{Heartbeat, NewToken, NodeRegistration, TokenKind};

use super::extract::{Body, Query};
use super::types::*;
use super::{blocking, validate};
use crate::app::{App, now_ms};
use crate::auth::Principal;
use crate::command::{Command, Outcome};
use crate::credentials;
use crate::error::{ApiError, ErrorBody};

/// Trade a join token for the node's credential (shown once). Joining again with a new join
/// token revokes the node's earlier credentials.
#[utoipa::path(post, path = "/v1/agent/join", request_body = JoinRequest, security(("bearer" = [])),
    responses((status = 200, body = JoinResponse), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn join(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<JoinRequest>,
) -> Result<Json<JoinResponse>, ApiError> {
    validate::word("node_id", &req.node_id)?;
    let secret = crate::auth::new_secret().map_err(|e| ApiError::Internal(e.to_string()))?;
    let name = format!("node {}", req.node_id);
    // Issue the certificate first: a failure then leaves the join token unused.
    let tls = match &app.pki {
        Some(pki) => {
            let (cert, key) =
                pki.issue_client(&req.node_id).map_err(|e| ApiError::Internal(e.to_string()))?;
            Some((pki.ca_pem().to_owned(), cert, key))
        }
        None => None,
    };
    // Over TLS the credential is bound to that certificate: one without the other is refused.
    let cert_sha256 = match &tls {
        Some((_, cert, _)) => Some(pem_sha256(cert)?),
        None => None,
    };
    let credential = NewToken {
        node: Some(req.node_id.clone()),
        cert_sha256,
        ..credentials::new_token(&secret, TokenKind::Node, &name, None)
    };
    app.dispatch(Command::Join { credential, by: who }).await?;
    let (ca_pem, client_cert_pem, client_key_pem) = match tls {
        Some((ca, cert, key)) => (Some(ca), Some(cert), Some(key)),
        None => (None, None, None),
    };
    Ok(Json(JoinResponse {
        node_id: req.node_id,
        credential: secret,
        ca_pem,
        client_cert_pem,
        client_key_pem,
    }))
}

/// Hex SHA-256 of the DER of a certificate in PEM, as the listener reports a client's.
fn pem_sha256(pem: &str) -> Result<String, ApiError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let der = CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| ApiError::Internal(format!("the issued client certificate: {e}")))?;
    Ok(crate::tls::sha256_hex(&der))
}

/// Register (or re-register) a node; returns the new epoch.
#[utoipa::path(post, path = "/v1/agent/register", request_body = RegisterRequest, security(("bearer" = [])),
    responses((status = 200, body = RegisterResponse), (status = 403, body = ErrorBody)))]
pub async fn register(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<RegisterRequest>,
) -> Result<Json<RegisterResponse>, ApiError> {
    validate::word("node_id", &req.node_id)?;
    validate::inventory(&req)?;
    if let Some(addr) = &req.advertise_addr {
        validate::address("advertise_addr", addr)?;
    }
    let registration = NodeRegistration { request: req, at: now_ms() };
    match app.dispatch(Command::RegisterNode { registration, by: who }).await? {
        Outcome::Registered(epoch) => Ok(Json(RegisterResponse {
            epoch,
            heartbeat_interval_ms: u64::try_from(app.config.heartbeat_interval.as_millis()).unwrap_or(1000),
        })),
        other => Err(ApiError::Internal(format!("register produced {other:?}"))),
    }
}

/// Answer the node's held heartbeat now: its agent has news (a job ended) that would otherwise
/// wait for the hold to pass, and with it the room the job frees. The node's own credential
/// only; it writes nothing.
#[utoipa::path(post, path = "/v1/agent/wake", request_body = WakeRequest, security(("bearer" = [])),
    responses((status = 204, description = "the node's held heartbeat, if any, is answered"),
        (status = 403, body = ErrorBody, description = "not this node's credential")))]
pub async fn wake(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Body(req): Body<WakeRequest>,
) -> Result<StatusCode, ApiError> {
    validate::word("node_id", &req.node_id)?;
    who.require_node(&req.node_id)?;
    app.assigned.changed(&req.node_id);
    Ok(StatusCode::NO_CONTENT)
}

/// Report liveness, GPUs and jobs; get the jobs to run. With `wait_ms` and `known`, the answer
/// waits (at most `wait_ms` and the heartbeat interval) while the node's jobs are still the
/// `known` ones.
#[utoipa::path(post, path = "/v1/agent/heartbeat", request_body = Heartbeat, params(HeartbeatWait), security(("bearer" = [])),
    responses((status = 200, body = HeartbeatResponse), (status = 409, body = ErrorBody, description = "stale epoch: register again")))]
pub async fn heartbeat(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Query(wait): Query<HeartbeatWait>,
    Body(mut hb): Body<Heartbeat>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    // Before anything quotes it (a refusal's audit row, a log line): a node id is a short word.
    validate::word("node_id", &hb.node_id)?;
    // A node's word for why a job ended becomes the job's reason: at most a sentence, whatever
    // the agent (or whoever holds its credential) sends.
    for exit in hb.jobs.iter_mut().filter_map(|j| j.exit.as_mut()) {
        exit.reason = exit.reason.as_deref().map(gantry_api::inputs::reason);
    }
    let (node, epoch) = (hb.node_id.clone(), hb.epoch);
    let hold = hold_for(&app, &wait);
    // Before the store reads the assignments: a change committed after that read is seen. Only
    // for the node's own credential (another's report is refused below), so that no caller
    // makes the server keep a signal for node ids that are not its own.
    let mut changes = hold.filter(|_| who.require_node(&node).is_ok()).map(|_| app.assigned.subscribe(&node));
    let finished = hb.jobs.iter().any(|j| j.exit.is_some());
    let chunks = decode_logs(&hb)?;
    if !chunks.is_empty() && who.require_node(&hb.node_id).is_ok() {
        // Before the heartbeat is applied: a client that sees the job end reads all its output.
        store_logs(&app, &hb, chunks).await?;
    }
    let outcome = app.dispatch(Command::Heartbeat { heartbeat: hb, by: who }).await?;
    if finished {
        app.wake.notify_one();
    }
    let Outcome::Assignments(mut jobs) = outcome else {
        return Err(ApiError::Internal(format!("heartbeat produced {outcome:?}")));
    };
    // The dispatcher let the report in: the caller is this node's agent.
    if let (Some(hold), Some(changes)) = (hold, changes.as_mut())
        && wait.known.as_deref() == Some(crate::assigned::version(&jobs).as_str())
        && held(&app, changes, hold).await
    {
        jobs = blocking(&app, move |s| s.assignments(&node, epoch)).await?;
    }
    let version = hold.map(|_| crate::assigned::version(&jobs));
    let (teams, loans) = if jobs.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        blocking(&app, |s| Ok((s.teams()?, s.loans()?))).await?
    };
    let gangs: Vec<i64> = {
        let mut ids: Vec<i64> =
            jobs.iter().filter_map(|j| j.gang.as_ref().filter(|g| g.is_worker()).map(|g| g.id)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    };
    // A worker's node among its gang's, and the gang's name (a worker's own is `name-rank`).
    let (places, names) = if gangs.is_empty() {
        (std::collections::HashMap::new(), std::collections::HashMap::new())
    } else {
        blocking(&app, move |s| {
            let (mut places, mut names) =
                (std::collections::HashMap::new(), std::collections::HashMap::new());
            for g in gangs {
                places.extend(node_places(&s.workers(g)?));
                if let Some(gang) = s.job(g)? {
                    names.insert(g, gang.name);
                }
            }
            Ok((places, names))
        })
        .await?
    };
    // Service replicas get their `$PORT` on their node, the first time they are handed to it.
    // One the node's range has no room for is not handed out yet: it waits, placed, until a
    // replica of the node ends.
    let ported = crate::services::assign_ports(app.config.service_ports, &mut jobs);
    let portless: Vec<i64> = ported.iter().filter(|(_, p)| p.is_none()).map(|(id, _)| *id).collect();
    if !portless.is_empty() {
        let (lo, hi) = app.config.service_ports;
        tracing::warn!(?portless, "no replica port of {lo}-{hi} (--service-ports) is free on the node");
        jobs.retain(|j| !portless.contains(&j.id));
    }
    let ported: Vec<(i64, u16)> = ported.into_iter().filter_map(|(id, p)| Some((id, p?))).collect();
    if !ported.is_empty() {
        blocking(&app, move |s| ported.iter().try_for_each(|(id, port)| s.set_replica_port(*id, *port)))
            .await?;
    }
    let volumes = if jobs.iter().any(|j| !j.volumes.is_empty()) {
        blocking(&app, |s| s.volumes(None)).await?
    } else {
        Vec::new()
    };
    let pids_limit = |team: &str| teams.iter().find(|t| t.name == team).and_then(|t| t.pids_limit);
    let assignments = jobs
        .into_iter()
        .map(|job| {
            let borrowed = borrowed_memory(&loans, job.id, job.attempt);
            let place = places.get(&job.id).copied();
            let gang_name =
                job.gang.as_ref().filter(|g| g.is_worker()).and_then(|g| names.get(&g.id)).cloned();
            let mounts = super::volumes::assigned(&job, &volumes);
            let mut a: Assignment = job.into();
            a.volumes = mounts;
            if let Some(name) = gang_name {
                a.launch.name = name;
            }
            if let Some((node_rank, nodes)) = place {
                (a.launch.node_rank, a.launch.nodes) = (Some(node_rank), Some(nodes));
            }
            a.log_limit_bytes = app.config.log_limit_bytes;
            a.pids_limit = pids_limit(&a.team);
            if let Some(mib) = borrowed {
                a.gpu_memory_mib = if a.gpu_memory_mib == 0 { mib } else { a.gpu_memory_mib.min(mib) };
            }
            a
        })
        .collect();
    Ok(Json(HeartbeatResponse { assignments, version }))
}

/// Each placed worker's node among its gang's nodes (numbered in the order of their first
/// worker's rank) and how many nodes the gang is on: Slurm's `SLURM_NODEID` and
/// `SLURM_JOB_NUM_NODES`.
fn node_places(workers: &[gantry_store::Job]) -> Vec<(i64, (u32, u32))> {
    let mut ranked: Vec<&gantry_store::Job> = workers.iter().filter(|w| w.node_id.is_some()).collect();
    ranked.sort_by_key(|w| w.gang.as_ref().and_then(|g| g.rank));
    let mut nodes: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for w in &ranked {
        let node = w.node_id.as_deref().unwrap_or_default();
        let index = nodes.iter().position(|n| *n == node).unwrap_or_else(|| {
            nodes.push(node);
            nodes.len() - 1
        });
        out.push((w.id, index as u32));
    }
    let count = nodes.len() as u32;
    out.into_iter().map(|(id, index)| (id, (index, count))).collect()
}

/// The GPU memory a borrower on lent GPUs may use (what the owners' processes left free, the
/// least over its GPUs), enforced by the agent as a slice's grant is; `None` for a job that
/// borrows nothing. Without it a borrower could take the memory its owner resumes into.
fn borrowed_memory(loans: &[gantry_api::idle::Loan], job: i64, attempt: u32) -> Option<u64> {
    loans
        .iter()
        .filter(|l| l.borrower == Some(job) && l.borrower_attempt == Some(attempt))
        .map(|l| l.memory_mib.max(1))
        .min()
}

/// How long this heartbeat may be held: what the agent allows, at most the heartbeat interval
/// (so the server still hears from it that often) and half the request timeout; none when the
/// agent asks for none or the server does not hold heartbeats.
fn hold_for(app: &App, wait: &HeartbeatWait) -> Option<std::time::Duration> {
    let asked = std::time::Duration::from_millis(wait.wait_ms.filter(|ms| *ms > 0)?);
    let config = &app.config;
    config.hold_heartbeats.then(|| asked.min(config.heartbeat_interval).min(config.request_timeout / 2))
}

/// Waits until the node's work changes (true), or the hold passes or the server begins to stop
/// (false).
async fn held(app: &App, changes: &mut tokio::sync::watch::Receiver<u64>, hold: std::time::Duration) -> bool {
    let mut closing = app.closing.subscribe();
    tokio::select! {
        changed = changes.changed() => changed.is_ok(),
        () = tokio::time::sleep(hold) => false,
        _ = closing.wait_for(|closing| *closing) => false,
    }
}

/// The heartbeat's log chunks, decoded; a bad stream name or encoding is a 422.
fn decode_logs(hb: &Heartbeat) -> Result<Vec<(usize, Vec<u8>)>, ApiError> {
    use base64::Engine;
    hb.logs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if c.stream != "stdout" && c.stream != "stderr" {
                return Err(ApiError::Unprocessable(format!("logs[{i}].stream: must be stdout or stderr")));
            }
            validate::at_most("logs.offset", c.offset, validate::MAX_OFFSET)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&c.data)
                .map_err(|_| ApiError::Unprocessable(format!("logs[{i}].data: not base64")))?;
            Ok((i, bytes))
        })
        .collect()
}

/// Appends shipped output to the server's copy, for attempts placed on this node under this
/// epoch only (a node cannot write another node's jobs' logs), within each team's output quota.
async fn store_logs(app: &Arc<App>, hb: &Heartbeat, chunks: Vec<(usize, Vec<u8>)>) -> Result<(), ApiError> {
    let app = Arc::clone(app);
    let (node, epoch, meta) = (hb.node_id.clone(), hb.epoch, hb.logs.clone());
    tokio::task::spawn_blocking(move || -> Result<(), ApiError> {
        let (store, logs, limits) = (&*app.store, &app.config.logs_dir, app.config.output);
        let quotas: std::collections::HashMap<String, u64> =
            store.teams()?.into_iter().filter_map(|t| t.log_quota_bytes.map(|q| (t.name, q))).collect();
        for (i, bytes) in chunks {
            let c = &meta[i];
            let Some(job) = store.job(c.job_id)?.filter(|j| {
                j.node_id.as_deref() == Some(node.as_str())
                    && j.epoch == Some(epoch)
                    && j.attempt == c.attempt
            }) else {
                continue;
            };
            let quota = quotas.get(&job.team).copied().unwrap_or(limits.team_quota);
            let write = crate::output::Shipped {
                job: &job,
                attempt: c.attempt,
                stream: &c.stream,
                offset: c.offset,
                bytes: &bytes,
                quota,
                limit: app.config.log_limit_bytes,
            };
            app.output
                .write(store, logs, write)
                .map_err(|e| ApiError::Internal(format!("storing output of job {}: {e}", c.job_id)))?;
        }
        Ok(())
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
}
