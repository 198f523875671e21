//! Every mutation of the control plane is a [`Command`]; [`App::dispatch`] is the one place
//! that applies them. HTTP handlers and the scheduler only build commands.

use std::sync::Arc;

use gantry_store::{Heartbeat, Job, JobId, NewJob, NodeRegistration, Placement, Role, Store, Team};

use crate::app::{self, App};
use crate::auth::Principal;
use crate::error::ApiError;

/// A mutation.
#[derive(Debug, Clone)]
pub enum Command {
    /// Queue a job.
    Submit(NewJob),
    /// Cancel a job on behalf of a caller.
    Cancel {
        /// The job.
        id: JobId,
        /// Who asks.
        by: Principal,
    },
    /// Create or change a team's quota.
    SetTeam(Team),
    /// Create an API token.
    CreateToken {
        /// Its role.
        role: Role,
        /// Its team.
        team: Option<String>,
        /// Label.
        name: String,
    },
    /// A node (re)registers.
    RegisterNode(NodeRegistration),
    /// An agent reports.
    Heartbeat(Heartbeat),
    /// Record a scheduling decision.
    Place(Placement),
    /// Mark silent nodes lost.
    ExpireNodes {
        /// Nodes silent since before this (ms) are lost.
        deadline: i64,
    },
}

/// What a command produced.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A job id; `created` is false when the request id was seen before.
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
    /// A new token's secret.
    Token(String),
    /// A node's new epoch.
    Registered(u64),
    /// Jobs a node must run.
    Assignments(Vec<Job>),
    /// Nodes just marked lost.
    Expired(Vec<String>),
}

impl App {
    /// Applies a command (store calls run on the blocking pool).
    pub async fn dispatch(self: &Arc<Self>, command: Command) -> Result<Outcome, ApiError> {
        let wakes = matches!(
            command,
            Command::Submit(_) | Command::Cancel { .. } | Command::RegisterNode(_) | Command::SetTeam(_)
        );
        let store = Arc::clone(&self.store);
        let outcome = tokio::task::spawn_blocking(move || apply(&*store, command))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??;
        if let Outcome::Submitted { created: true, .. } = outcome {
            self.metrics.submissions.inc();
        }
        if wakes || matches!(&outcome, Outcome::Expired(lost) if !lost.is_empty()) {
            self.wake.notify_one();
        }
        Ok(outcome)
    }
}

fn apply(store: &dyn Store, command: Command) -> Result<Outcome, ApiError> {
    let now = app::now_ms();
    match command {
        Command::Submit(job) => {
            store.submit(&job).map(|(id, created)| Outcome::Submitted { id, created }).map_err(Into::into)
        }
        Command::Cancel { id, by } => cancel(store, id, &by, now),
        Command::SetTeam(team) => store.set_team(&team).map(|()| Outcome::Done).map_err(Into::into),
        Command::CreateToken { role, team, name } => create_token(store, role, team.as_deref(), &name),
        Command::RegisterNode(reg) => store.register_node(&reg).map(Outcome::Registered).map_err(Into::into),
        Command::Heartbeat(hb) => {
            store.heartbeat(&Heartbeat { at: now, ..hb }).map(Outcome::Assignments).map_err(Into::into)
        }
        Command::Place(placement) => store.place(&placement).map(|()| Outcome::Done).map_err(Into::into),
        Command::ExpireNodes { deadline } => {
            store.expire_nodes(deadline, now).map(Outcome::Expired).map_err(Into::into)
        }
    }
}

fn cancel(store: &dyn Store, id: JobId, by: &Principal, now: i64) -> Result<Outcome, ApiError> {
    let job = store.job(id)?.ok_or_else(|| ApiError::NotFound(format!("job {id} not found")))?;
    by.require_team(&job.team)?;
    Ok(Outcome::Job(Box::new(store.cancel(id, now)?)))
}

fn create_token(store: &dyn Store, role: Role, team: Option<&str>, name: &str) -> Result<Outcome, ApiError> {
    app::create_token(store, role, team, name)
        .map(Outcome::Token)
        .map_err(|e| ApiError::Internal(e.to_string()))
}
