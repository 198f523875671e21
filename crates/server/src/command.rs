//! Every mutation of the control plane is a [`Command`]; [`App::dispatch`] is the one place
//! that applies them. HTTP handlers and the scheduler only build commands.
//!
//! A command made for a caller carries the caller's [`Principal`]: the dispatcher checks what
//! the caller may do, then hands the store one audited [`Change`], which is applied and appended
//! to the audit log in the same transaction. A refusal is audited too (`denied: …`). Heartbeats
//! are checked but not audited (they arrive several times a second per node; the job
//! transitions they cause are recorded with the job), and the scheduler's own commands have no
//! caller.

use std::sync::Arc;

use gantry_store::{
    AuditEntry, Change, Changed, GangPlacement, Heartbeat, Job, JobId, NewJob, NewToken, NodeRegistration,
    Placement, Store, Team, TokenKind, User,
};

use crate::admission::{AdmissionCache, View};
use crate::app::{self, App};
use crate::auth::Principal;

mod error;
pub use error::CommandError;

/// A mutation.
#[derive(Debug, Clone)]
pub enum Command {
    /// Queue a job.
    Submit {
        /// The job (boxed: it is by far the largest command).
        job: Box<NewJob>,
        /// Who asks.
        by: Principal,
    },
    /// Apply a job file (`gantry apply`): create, leave, update in place or replace the team's
    /// job of that name.
    Apply {
        /// The job, named, with the file's digest as request id.
        job: Box<NewJob>,
        /// Whether a started job may be cancelled and submitted anew.
        replace: bool,
        /// Who asks.
        by: Principal,
    },
    /// Cancel a job (or every unfinished member of its array).
    Cancel {
        /// The job.
        id: JobId,
        /// The whole array the job belongs to.
        array: bool,
        /// Who asks.
        by: Principal,
    },
    /// Create or change a team's quota.
    SetTeam {
        /// The team.
        team: Team,
        /// Who asks.
        by: Principal,
    },
    /// Create or replace a user.
    SetUser {
        /// The user.
        user: User,
        /// Who asks.
        by: Principal,
    },
    /// Store a token (its secret stays with the caller).
    CreateToken {
        /// The token.
        token: NewToken,
        /// Who asks.
        by: Principal,
    },
    /// Store a dashboard session token for the user whose one-time sign-in code was redeemed
    /// (`crate::signin`).
    StartSession {
        /// The session token, of the code's owner.
        token: NewToken,
        /// Who asked for the code.
        by: Principal,
    },
    /// Revoke a token.
    RevokeToken {
        /// The token's id.
        id: i64,
        /// Who asks.
        by: Principal,
    },
    /// An agent trades its join token for a node credential.
    Join {
        /// The credential to store (bound to the node).
        credential: NewToken,
        /// The join token's holder.
        by: Principal,
    },
    /// A node (re)registers.
    RegisterNode {
        /// What it reports.
        registration: NodeRegistration,
        /// Its agent.
        by: Principal,
    },
    /// An agent reports.
    Heartbeat {
        /// The report.
        heartbeat: Heartbeat,
        /// Its agent.
        by: Principal,
    },
    /// Record a scheduling decision.
    Place(Placement),
    /// Record a gang's placement: every worker at once (a scheduling decision).
    PlaceGang(GangPlacement),
    /// Record a preemptible job placed on GPUs an idle job lent (a scheduling decision).
    Borrow(Placement),
    /// Stop a running job for another and requeue it (a scheduling decision).
    Preempt {
        /// The victim.
        job: JobId,
        /// Why, with who preempted it.
        reason: String,
    },
    /// Stop a running elastic job to restart it at another width (a scheduling decision).
    Resize {
        /// The job.
        job: JobId,
        /// Why, with the widths (`resized 2 → 4 GPUs: idle GPUs`).
        reason: String,
    },
    /// Record what staging found of a job's inputs (bytes, cache hit, time), reported by the
    /// agent of the node it was staged on.
    StagedInputs {
        /// The job.
        job: JobId,
        /// Its inputs with the results.
        inputs: Vec<gantry_api::inputs::Input>,
    },
    /// Record where the upload of an ended attempt's declared outputs stands, reported by the
    /// agent of the node it ran on.
    ReportedOutputs {
        /// The job.
        job: JobId,
        /// The attempt that ended.
        attempt: u32,
        /// Its outputs with where each upload stands.
        outputs: Vec<gantry_api::outputs::Output>,
    },
    /// Create or replace a team's secret (`gantry secret set`; members of the team and admins).
    SetSecret {
        /// The team.
        team: String,
        /// The secret's name.
        name: String,
        /// Its keys and values (never shown again).
        data: gantry_api::inputs::SecretData,
        /// Who asks.
        by: Principal,
    },
    /// Mark an input source public (its cached copies shared by every team on a node) or
    /// private again (`gantry cache public add|remove URL`; admins only, audited).
    SetPublicSource {
        /// The source URL.
        url: String,
        /// Public, or private again.
        public: bool,
        /// Who asks.
        by: Principal,
    },
    /// End a pending job whose dependency can never be met (a scheduling decision).
    DependencyFailed {
        /// The job.
        job: JobId,
        /// Why, naming the dependency.
        reason: String,
    },
    /// Set a team's idle policy for a job kind (admins).
    SetIdlePolicy {
        /// The policy.
        policy: gantry_api::idle::IdlePolicyView,
        /// Who asks.
        by: Principal,
    },
    /// Warn the owner of a job that left its GPUs idle, requeue or cancel it, lend its GPUs, or
    /// give lent GPUs back to it (the idle reconciler, [`crate::idle`]); audited as the system
    /// with the samples.
    Idle {
        /// The job.
        job: i64,
        /// `warn`, `requeue`, `cancel`, `lend` or `give-back`.
        action: String,
        /// The samples that justified it, in words.
        evidence: String,
    },
    /// Set a node pool's placement and teams (admins).
    SetPool {
        /// The pool's settings.
        pool: gantry_api::pools::Pool,
        /// Who asks.
        by: Principal,
    },
    /// Cordon, uncordon or drain a node (operators).
    SetNodeScheduling {
        /// The node.
        node: String,
        /// Whether it takes new work.
        scheduling: gantry_store::NodeScheduling,
        /// For a drain: how long its running jobs have before they are stopped and requeued.
        grace_ms: i64,
        /// Who asks.
        by: Principal,
    },
    /// Create a volume (operators, admins).
    CreateVolume {
        /// The volume, checked by the handler.
        volume: gantry_store::Volume,
        /// Who asks.
        by: Principal,
    },
    /// Delete a volume's record (operators, admins).
    DeleteVolume {
        /// The team.
        team: String,
        /// The volume.
        name: String,
        /// Who asks.
        by: Principal,
    },
    /// Apply a service file (members of its team, admins).
    ApplyService {
        /// The service's team.
        team: String,
        /// The file, checked by the handler.
        spec: Box<gantry_store::ServiceSpec>,
        /// The digest of its meaning.
        digest: String,
        /// Who asks.
        by: Principal,
    },
    /// Delete a service and stop its replicas (members of its team, admins).
    DeleteService {
        /// The service's team.
        team: String,
        /// The service.
        name: String,
        /// Who asks.
        by: Principal,
    },
    /// Mark silent nodes not responding, and long-silent ones lost; stop the running jobs of
    /// nodes whose drain is due.
    ExpireNodes {
        /// Ready nodes silent since before this (ms) are not responding (no new work).
        silent: i64,
        /// Nodes silent since before this (ms) are lost and their jobs requeued.
        lost: i64,
    },
}

/// What a command produced.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A job id; `created` is false when the team's request id was seen before.
    Submitted {
        /// The job.
        id: JobId,
        /// Whether this call created it.
        created: bool,
    },
    /// The job after the command.
    Job(Box<Job>),
    /// Nothing to return.
    Done,
    /// A stored token's id.
    Token(i64),
    /// A node's new epoch.
    Registered(u64),
    /// Jobs a node must run.
    Assignments(Vec<Job>),
    /// Nodes just marked lost.
    Expired(Vec<String>),
    /// What applying a job file did.
    Applied(gantry_store::Applied),
    /// What applying a service file did, and the generation it is now.
    Service {
        /// Created, unchanged or configured.
        action: gantry_store::ServiceAction,
        /// The file's generation.
        generation: u64,
    },
}

impl App {
    /// Applies a command (store calls run on the blocking pool).
    pub async fn dispatch(self: &Arc<Self>, command: Command) -> Result<Outcome, CommandError> {
        let wakes = matches!(
            command,
            Command::Submit { .. }
                | Command::Apply { .. }
                | Command::Cancel { .. }
                | Command::RegisterNode { .. }
                | Command::SetTeam { .. }
                | Command::SetNodeScheduling { .. }
                | Command::DeleteService { .. }
                | Command::SetPool { .. }
                | Command::Idle { .. }
        );
        // A job ending or a GPU changing health frees (or takes) room.
        let frees = match &command {
            Command::Heartbeat { heartbeat, .. } => {
                heartbeat.jobs.iter().any(|j| j.exit.is_some())
                    || heartbeat.gpus.iter().any(|g| g.health != gantry_store::GpuHealth::Healthy)
            }
            _ => false,
        };
        let credentials_change = matches!(
            command,
            Command::SetUser { .. }
                | Command::CreateToken { .. }
                | Command::StartSession { .. }
                | Command::RevokeToken { .. }
                | Command::Join { .. }
        );
        // A submission counts itself in the admission view; a heartbeat that ends no job and
        // changes no GPU's health leaves it as it is; anything else may change what it holds.
        let keeps_view = matches!(command, Command::Submit { .. })
            || matches!(command, Command::Heartbeat { .. }) && !frees;
        let touches = crate::assigned::touches(&command);
        let app = Arc::clone(self);
        let (outcome, touched) = tokio::task::spawn_blocking(move || {
            let store = &*app.store;
            let outcome = apply(store, &app.admission, command);
            let touched = if outcome.is_ok() { crate::assigned::touched(store, touches) } else { Vec::new() };
            (outcome, touched)
        })
        .await
        .map_err(|e| CommandError::Aborted(e.to_string()))?;
        if credentials_change {
            self.tokens.clear();
        }
        if !keeps_view {
            self.admission.forget();
        }
        // Committed: the agents it concerns hear of it now, not on their next poll.
        for node in &touched {
            self.assigned.changed(node);
        }
        let outcome = outcome?;
        if let Outcome::Submitted { created: true, .. } = outcome {
            self.metrics.submissions.inc();
        }
        let lost = matches!(&outcome, Outcome::Expired(lost) if !lost.is_empty());
        if wakes || frees || lost {
            self.changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if wakes || lost {
            self.wake.notify_one();
        }
        Ok(outcome)
    }
}

fn apply(store: &dyn Store, admission: &AdmissionCache, command: Command) -> Result<Outcome, CommandError> {
    let now = app::now_ms();
    match command {
        Command::Submit { mut job, by } => {
            let team = job.team.clone();
            let view = admission.view(store)?;
            let check = may_queue(&view, admission, &job, &by);
            // Checked again in the insert's transaction: submissions racing each other (on
            // this replica or another) cannot each pass the view's count.
            job.pending_limit =
                Some(view.team(&team).and_then(|t| t.pending_limit).unwrap_or(DEFAULT_PENDING_LIMIT));
            job.pending_bytes_limit = Some(
                view.team(&team)
                    .map_or(gantry_store::Team::DEFAULT_PENDING_BYTES, gantry_store::Team::pending_bytes_cap),
            );
            let adding = queued(&job);
            let entry = entry(&by, "job.submit", format!("team/{team}"), Some(&team), now);
            let outcome = audited(store, check, Change::Submit(job), entry)?;
            if let Outcome::Submitted { created: true, .. } = outcome {
                admission.added(&view, &team, adding);
            }
            Ok(outcome)
        }
        Command::Apply { job, replace, by } => {
            let team = job.team.clone();
            let view = admission.view(store)?;
            let check = may_queue(&view, admission, &job, &by);
            let entry = entry(&by, "job.apply", format!("team/{team}"), Some(&team), now);
            audited(store, check, Change::Apply { job, replace }, entry)
        }
        Command::Cancel { id, array, by } => cancel(store, id, array, &by, now),
        Command::SetTeam { team, by } => {
            let entry = entry(&by, "team.set", format!("team/{}", team.name), Some(&team.name), now);
            // GPU quotas are the operators'; what a team may store and queue, and how high its
            // jobs may rank and whom they may preempt, the admins'.
            let admins = team.log_quota_bytes.is_some()
                || team.pending_limit.is_some()
                || team.max_priority.is_some()
                || team.preempt_other_teams.is_some()
                || team.max_services.is_some()
                || team.pending_bytes_limit.is_some()
                || team.max_replicas.is_some();
            let check = if admins { by.require_admin() } else { by.require_operator() };
            audited(store, check, Change::SetTeam(team), entry)
        }
        Command::SetUser { user, by } => {
            let entry = entry(&by, "user.set", format!("user/{}", user.name), None, now);
            audited(store, by.require_admin(), Change::SetUser(user), entry)
        }
        Command::CreateToken { token, by } => {
            let entry = entry(&by, "token.create", String::new(), None, now);
            // An invoke token reaches one service: its team's members may make one.
            let check = match (&token.kind, &token.service) {
                (TokenKind::Invoke, Some(key)) => {
                    let team = key.split_once('/').map_or(key.as_str(), |(team, _)| team);
                    by.require_member_of(team)
                }
                _ => by.require_admin(),
            };
            audited(store, check, Change::CreateToken(token), entry)
        }
        Command::StartSession { token, by } => {
            let entry = entry(&by, "token.session", String::new(), None, now);
            let own =
                by.token.kind == TokenKind::Api && by.token.user.is_some() && by.token.user == token.user;
            let check = if own {
                Ok(())
            } else {
                Err(CommandError::Forbidden("a session is its owner's own".into()))
            };
            audited(store, check, Change::CreateToken(token), entry)
        }
        Command::RevokeToken { id, by } => revoke(store, id, &by, now),
        Command::Join { credential, by } => {
            let node = credential.node.clone().unwrap_or_default();
            let entry = entry(&by, "node.join", format!("node/{node}"), None, now);
            let check = by.require_join(&node).and_then(|()| join_target_free(store, &by, &node));
            let change = Change::Join { join_token: by.token.id, credential };
            audited(store, check, change, entry)
        }
        Command::RegisterNode { registration, by } => {
            let node = registration.request.node_id.clone();
            let entry = entry(&by, "node.register", format!("node/{node}"), None, now);
            audited(store, by.require_node(&node), Change::RegisterNode(registration), entry)
        }
        Command::Heartbeat { heartbeat, by } => {
            let node = heartbeat.node_id.clone();
            let entry = entry(&by, "node.heartbeat", format!("node/{node}"), None, now);
            refuse_unless(store, by.require_node(&node), entry)?;
            Ok(Outcome::Assignments(store.heartbeat(&heartbeat, now)?))
        }
        Command::Place(placement) => store.place(&placement).map(|()| Outcome::Done).map_err(Into::into),
        Command::PlaceGang(placement) => {
            store.place_gang(&placement).map(|()| Outcome::Done).map_err(Into::into)
        }
        Command::Borrow(placement) => store.borrow(&placement).map(|()| Outcome::Done).map_err(Into::into),
        Command::Preempt { job, reason } => {
            store.preempt(job, &reason, now).map(|()| Outcome::Done).map_err(Into::into)
        }
        Command::Resize { job, reason } => {
            store.resize(job, &reason, now).map(|()| Outcome::Done).map_err(Into::into)
        }
        Command::StagedInputs { job, inputs } => {
            store.staged_inputs(job, &inputs).map(|()| Outcome::Done).map_err(Into::into)
        }
        Command::ReportedOutputs { job, attempt, outputs } => {
            store.reported_outputs(job, attempt, &outputs).map(|_| Outcome::Done).map_err(Into::into)
        }
        Command::SetSecret { team, name, data, by } => {
            let entry = entry(&by, "secret.set", format!("secret/{team}/{name}"), Some(&team), now);
            audited(store, by.require_member_of(&team), Change::SetSecret { team, name, data }, entry)
        }
        Command::SetPublicSource { url, public, by } => {
            let action = if public { "cache.public" } else { "cache.private" };
            let entry = entry(&by, action, format!("source/{url}"), None, now);
            audited(store, by.require_admin(), Change::SetPublicSource { url, public }, entry)
        }
        Command::DependencyFailed { job, reason } => {
            store.dependency_failed(job, &reason, now).map(|()| Outcome::Done).map_err(Into::into)
        }
        Command::SetIdlePolicy { policy, by } => {
            let target = format!("team/{}/idle/{}", policy.team, policy.kind);
            let entry = entry(&by, "team.idle", target, Some(&policy.team.clone()), now);
            audited(store, by.require_admin(), Change::SetIdlePolicy(policy), entry)
        }
        Command::Idle { job, action, evidence } => {
            let actor =
                gantry_store::Actor { name: "gantry".into(), role: "system".into(), team: None, peer: None };
            let target = truncate(format!("job/{job} ({evidence})"), MAX_TARGET);
            let entry =
                AuditEntry { actor, action: format!("job.idle-{action}"), target, at: now, credential: None };
            audited(store, Ok(()), Change::IdleAction { job, action, evidence }, entry)
        }
        Command::SetPool { pool, by } => {
            let entry = entry(&by, "pool.set", format!("pool/{}", pool.name), None, now);
            audited(store, by.require_admin(), Change::SetPool(pool), entry)
        }
        Command::SetNodeScheduling { node, scheduling, grace_ms, by } => {
            let action = match scheduling {
                gantry_store::NodeScheduling::Schedulable => "node.uncordon",
                gantry_store::NodeScheduling::Cordoned => "node.cordon",
                gantry_store::NodeScheduling::Draining => "node.drain",
            };
            let entry = entry(&by, action, format!("node/{node}"), None, now);
            let drain_at =
                (scheduling == gantry_store::NodeScheduling::Draining).then(|| now + grace_ms.max(0));
            audited(
                store,
                by.require_operator(),
                Change::SetNodeScheduling { node, scheduling, drain_at },
                entry,
            )
        }
        Command::ApplyService { team, spec, digest, by } => {
            let entry =
                entry(&by, "service.apply", format!("service/{team}/{}", spec.name), Some(&team), now);
            let view = admission.view(store)?;
            let check = by
                .require_member_of(&team)
                .and_then(|()| ceiling(&view, &team, spec.priority, &by))
                .and_then(|()| service_room(store, &view, &team, &spec.name));
            let desired = spec.replicas.min.max(1);
            audited(store, check, Change::ApplyService { team, spec, digest, desired }, entry)
        }
        Command::CreateVolume { volume, by } => {
            let target = format!("volume/{}/{}", volume.team, volume.name);
            let entry = entry(&by, "volume.create", target, Some(&volume.team.clone()), now);
            audited(store, by.require_operator(), Change::CreateVolume(volume), entry)
        }
        Command::DeleteVolume { team, name, by } => {
            let entry = entry(&by, "volume.delete", format!("volume/{team}/{name}"), Some(&team), now);
            audited(store, by.require_operator(), Change::DeleteVolume { team, name }, entry)
        }
        Command::DeleteService { team, name, by } => {
            let entry = entry(&by, "service.delete", format!("service/{team}/{name}"), Some(&team), now);
            let check = if by.sees_team(&team) {
                by.require_member_of(&team)
            } else {
                Err(CommandError::NotFound(format!("service {name} not found in team {team}")))
            };
            audited(store, check, Change::DeleteService { team, name }, entry)
        }
        Command::ExpireNodes { silent, lost } => {
            let lost = store.expire_nodes(lost, now)?;
            store.mark_not_responding(silent, now)?;
            store.drain_due(now)?;
            Ok(Outcome::Expired(lost))
        }
    }
}

/// Whether `by` may queue `job`: a member of its team, within the team's priority ceiling and
/// pending limit.
fn may_queue(
    view: &View,
    admission: &AdmissionCache,
    job: &NewJob,
    by: &Principal,
) -> Result<(), CommandError> {
    by.require_member_of(&job.team)
        .and_then(|()| ceiling(view, &job.team, job.spec.priority, by))
        .and_then(|()| pending_room(view, admission, job))
}

/// The pending jobs a submission adds: an array's members each, a gang once (as in the job
/// gauges).
fn queued(job: &NewJob) -> u64 {
    job.spec.array.as_ref().map_or(1, |a| a.indices.len() as u64)
}

/// A join token made for any node may not take over a node that is up: joining revokes the
/// node's credentials, which would cut off its running agent. A token made for that node
/// (`--node`) may (a reinstalled machine).
fn join_target_free(store: &dyn Store, by: &Principal, node: &str) -> Result<(), CommandError> {
    if by.token.node.is_some() {
        return Ok(());
    }
    let live = store.nodes()?.iter().any(|n| n.id == node && n.state.is_up());
    if live {
        return Err(CommandError::Conflict(format!(
            "node {node} is up; join it with a join token made for it (`gantry token create --role agent --node {node}`)"
        )));
    }
    Ok(())
}

/// Refuses a member's priority for `team` (a job's, or a service's replicas') above the team's
/// ceiling (admins may go above it): any member could otherwise rank first in every queue.
fn ceiling(view: &View, team: &str, priority: i32, by: &Principal) -> Result<(), CommandError> {
    if by.require_admin().is_ok() {
        return Ok(());
    }
    let ceiling = view
        .team(team)
        .map_or(gantry_store::Team::DEFAULT_MAX_PRIORITY, gantry_store::Team::priority_ceiling);
    if priority > ceiling {
        return Err(CommandError::Invalid(format!(
            "priority: {priority} is above team {team}'s ceiling of {ceiling}; an admin may raise it (gantry team set {team} --max-priority N)"
        )));
    }
    Ok(())
}

/// Jobs a team may have pending when its admin set no limit.
pub const DEFAULT_PENDING_LIMIT: u64 = 100_000;

/// Refuses a submission that would take the team past its pending limit (an array counts each
/// member; a gang counts once, as in the job gauges). Checked before the write on the cached
/// view, and again by the store in the insert's transaction ([`gantry_store::NewJob::pending_limit`]),
/// which holds against submissions racing each other.
fn pending_room(view: &View, admission: &AdmissionCache, job: &NewJob) -> Result<(), CommandError> {
    let limit = view.team(&job.team).and_then(|t| t.pending_limit).unwrap_or(DEFAULT_PENDING_LIMIT);
    let pending = admission.pending(view, &job.team);
    let adding = queued(job);
    if pending + adding > limit {
        return Err(CommandError::LimitReached(format!(
            "team {} has {pending} pending jobs and may have {limit}; this submission adds {adding}: wait for some to start or cancel some",
            job.team
        )));
    }
    Ok(())
}

/// Refuses a new service past its team's `max_services` (a service applied again is no new one).
fn service_room(store: &dyn Store, view: &View, team: &str, name: &str) -> Result<(), CommandError> {
    let cap =
        view.team(team).map_or(gantry_store::Team::DEFAULT_MAX_SERVICES, gantry_store::Team::service_cap);
    let services = store.services(Some(vec![team.to_owned()]))?;
    if services.iter().any(|s| s.name == name) || services.len() < cap as usize {
        return Ok(());
    }
    Err(CommandError::LimitReached(format!(
        "team {team} has {} services and may have {cap}: delete one first, or an admin raises the cap \
         (gantry team set {team} --max-services N)",
        services.len()
    )))
}

/// The longest target an audit row stores, in bytes; and the longest outcome.
const MAX_TARGET: usize = 128;
const MAX_OUTCOME: usize = 512;

fn entry(by: &Principal, action: &str, target: String, team: Option<&str>, at: i64) -> AuditEntry {
    let target = truncate(target, MAX_TARGET);
    // The store reads the caller's token again in the change's transaction: a token revoked
    // (or a user demoted) after the server checked it changes nothing, on any replica.
    let credential = gantry_store::Credential {
        token_id: by.token.id,
        role: by.token.role,
        teams: by.token.teams.clone(),
    };
    AuditEntry { actor: by.actor(team), action: action.to_owned(), target, at, credential: Some(credential) }
}

/// `text` cut to at most `max` bytes on a character boundary, ending in `…` when cut. Handlers
/// validate identifiers before building commands; this keeps any that slip through (and
/// refusal messages that quote them) from making a row large.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Passes `check`'s error on after recording it as a refusal.
fn refuse_unless(
    store: &dyn Store,
    check: Result<(), CommandError>,
    entry: AuditEntry,
) -> Result<(), CommandError> {
    let Err(e) = check else { return Ok(()) };
    let outcome = match &e {
        CommandError::NotFound(_) => "denied: not visible to the caller".to_owned(),
        other => truncate(format!("denied: {other}"), MAX_OUTCOME),
    };
    if let Err(audit) = store.audit_refusal(entry, outcome) {
        tracing::warn!(error = %audit, "could not record a refusal in the audit log");
    }
    Err(e)
}

fn audited(
    store: &dyn Store,
    check: Result<(), CommandError>,
    change: Change,
    entry: AuditEntry,
) -> Result<Outcome, CommandError> {
    refuse_unless(store, check, entry.clone())?;
    Ok(match store.apply(change, entry)? {
        Changed::Submitted { id, created } => Outcome::Submitted { id, created },
        Changed::Applied(applied) => Outcome::Applied(applied),
        Changed::Job(job) => Outcome::Job(job),
        Changed::Token(id) => Outcome::Token(id),
        Changed::Registered(epoch) => Outcome::Registered(epoch),
        Changed::Service(action, generation) => Outcome::Service { action, generation },
        Changed::Done => Outcome::Done,
    })
}

fn cancel(
    store: &dyn Store,
    id: JobId,
    array: bool,
    by: &Principal,
    now: i64,
) -> Result<Outcome, CommandError> {
    let job = store.job(id)?;
    let team = job.as_ref().map(|j| j.team.clone());
    let (action, change) = if array {
        ("job.cancel_array", Change::CancelArray(id))
    } else {
        ("job.cancel", Change::Cancel(id))
    };
    let entry = entry(by, action, format!("job/{id}"), team.as_deref(), now);
    let check = match &job {
        Some(job) if by.sees_team(&job.team) => by.require_member_of(&job.team),
        _ => Err(CommandError::NotFound(format!("job {id} not found"))),
    };
    audited(store, check, change, entry)
}

fn revoke(store: &dyn Store, id: i64, by: &Principal, now: i64) -> Result<Outcome, CommandError> {
    let token = store.token(id)?;
    let entry = entry(by, "token.revoke", format!("token/{id}"), None, now);
    let own = token.as_ref().is_some_and(|t| t.user.is_some() && t.user == by.token.user);
    // An invoke token is the team's: any member of its service's team may revoke it.
    let team_invoke = token.as_ref().is_some_and(|t| {
        t.kind == gantry_store::TokenKind::Invoke
            && t.service
                .as_deref()
                .and_then(|s| s.split_once('/'))
                .is_some_and(|(team, _)| by.require_member_of(team).is_ok())
    });
    let check = match token {
        None => Err(CommandError::NotFound(format!("token {id} not found"))),
        Some(_) if own && by.token.kind == gantry_store::TokenKind::Api => Ok(()),
        Some(_) if team_invoke => Ok(()),
        Some(_) => by.require_admin().map_err(|_| CommandError::NotFound(format!("token {id} not found"))),
    };
    audited(store, check, Change::RevokeToken(id), entry)
}
