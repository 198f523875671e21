//! Audited changes: what the control plane asks of the store on a caller's behalf. Each one is
//! applied and recorded in the audit log in the same transaction ([`crate::Store::apply`]).

use serde::{Deserialize, Serialize};

use super::{
    Actor, Allocation, Job, JobId, NewJob, NewToken, NodeRegistration, NodeScheduling, ServiceAction,
    ServiceSpec, Team, User,
};

/// A change made for a caller (not `Eq`: a service file holds numbers such as `cpu: 0.5`).
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Queue a job.
    Submit(Box<NewJob>),
    /// Cancel a job.
    Cancel(JobId),
    /// Cancel every unfinished member of the array a job belongs to.
    CancelArray(JobId),
    /// Create or change a team's quota.
    SetTeam(Team),
    /// Create or replace a user.
    SetUser(User),
    /// Store a token.
    CreateToken(NewToken),
    /// Revoke a token.
    RevokeToken(i64),
    /// Trade a join token for a node credential.
    Join {
        /// The join token's id.
        join_token: i64,
        /// The node credential to store.
        credential: NewToken,
    },
    /// A node registers (again).
    RegisterNode(NodeRegistration),
    /// Apply a job file: its name is its identity in the team (`crate::Store::apply`'s rules in
    /// the SQLite store's `apply` module); `replace` lets a started job be cancelled and
    /// submitted anew.
    Apply {
        /// The job, with a name and a request id (the digest of the file).
        job: Box<NewJob>,
        /// Whether a started job may be replaced.
        replace: bool,
    },
    /// Create or replace a team's idle policy for a job kind.
    SetIdlePolicy(gantry_api::idle::IdlePolicyView),
    /// A job left its GPUs idle: warn its owner (`action` `warn`, an event), or stop it and
    /// queue it again (`requeue`, its retries unspent) or for good (`cancel`); `evidence` names
    /// the samples (the event's message and the job's reason).
    IdleAction {
        /// The job.
        job: JobId,
        /// `warn`, `requeue` or `cancel`.
        action: String,
        /// The samples that justified it, in words.
        evidence: String,
    },
    /// Create or replace a node pool's settings (placement, teams).
    SetPool(gantry_api::pools::Pool),
    /// Cordon, uncordon or drain a node (`NotFound` for an unknown one); a drain stops its
    /// running jobs at `drain_at` ([`crate::Store::drain_due`]). Registering again keeps it.
    SetNodeScheduling {
        /// The node.
        node: String,
        /// Whether it takes new work.
        scheduling: NodeScheduling,
        /// When a drain stops its running jobs (ms since the epoch; none: at once).
        drain_at: Option<i64>,
    },
    /// Apply a service file: create the team's service of that name, leave it (the same
    /// digest) or make the file its next generation (a rolling update).
    ApplyService {
        /// The team.
        team: String,
        /// The file, checked (its `name` is the service's).
        spec: Box<ServiceSpec>,
        /// The digest of its meaning.
        digest: String,
        /// The count a new service starts at.
        desired: u32,
    },
    /// Create or replace a team's secret (`gantry secret set`); its values are never listed.
    SetSecret {
        /// The team.
        team: String,
        /// The secret's name.
        name: String,
        /// Its keys and values.
        data: gantry_api::inputs::SecretData,
    },
    /// Mark an input source public (its cached copies shared by every team on a node) or
    /// private again (`gantry cache public add|remove URL`; admins only).
    SetPublicSource {
        /// The source URL (it and every URL under it).
        url: String,
        /// Public, or private again.
        public: bool,
    },
    /// Delete a service: its replicas are cancelled in the same transaction (`NotFound` for an
    /// unknown one).
    DeleteService {
        /// The team.
        team: String,
        /// The service.
        name: String,
    },
    /// Create a volume (`Conflict` when its team has one of that name).
    CreateVolume(super::Volume),
    /// Delete a volume's record (`NotFound` for an unknown one, `Conflict` while a job that
    /// has not ended mounts it); its files stay.
    DeleteVolume {
        /// The team.
        team: String,
        /// The volume.
        name: String,
    },
}

/// What applying a job file did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApplyAction {
    /// A new job (none had the name, or the one that had it has ended).
    Created,
    /// The same file again: nothing to do.
    Unchanged,
    /// The job (or array) had not started: its spec was updated in place, same id.
    Configured,
    /// The job had started (or changed shape before it did): what had not ended was cancelled
    /// and the file submitted anew.
    Replaced,
}

impl ApplyAction {
    /// The word `gantry apply` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyAction::Created => "created",
            ApplyAction::Unchanged => "unchanged",
            ApplyAction::Configured => "configured",
            ApplyAction::Replaced => "replaced",
        }
    }
}

/// The job a file stands for after applying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The job (or array) id.
    pub id: JobId,
    /// What happened.
    pub action: ApplyAction,
    /// The job it replaced.
    pub replaced: Option<JobId>,
}

/// What a change produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changed {
    /// A job file was applied.
    Applied(Applied),
    /// A job id; `created` is false when the team's request id was seen before.
    Submitted {
        /// The job.
        id: JobId,
        /// Whether this call created it.
        created: bool,
    },
    /// The job after the change.
    Job(Box<Job>),
    /// A stored token's id.
    Token(i64),
    /// A node's new epoch.
    Registered(u64),
    /// A service file was applied: what it did and the generation it is now.
    Service(ServiceAction, u64),
    /// Nothing to return.
    Done,
}

/// Who made a change, what it was called and what it touched, for the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Who.
    pub actor: Actor,
    /// e.g. `job.submit`.
    pub action: String,
    /// e.g. `job/12` (a submission's target is filled in with the new id).
    pub target: String,
    /// ms since the epoch.
    pub at: i64,
    /// The caller's token as the server judged it when it checked the change (`None`: the
    /// server's own changes). The store reads the token again in the change's transaction and
    /// refuses the change when it was revoked, expired, or its user's role or teams changed
    /// since, so no cache or replica lag lets a write through on a credential that is gone.
    #[serde(skip)]
    pub credential: Option<Credential>,
}

/// A caller's token and what it held when the server authorised a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The token's id.
    pub token_id: i64,
    /// The role it acted with.
    pub role: super::Role,
    /// The teams it acted for.
    pub teams: Vec<String>,
}

/// What changed for the scheduler after a position in its change log
/// ([`crate::Store::scheduler_changes`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SchedulerChanges {
    /// The position reached: pass it as `after` next time.
    pub position: i64,
    /// Whether a node, a GPU's health or a team's quota changed (the caller reads them again).
    pub cluster: bool,
    /// Jobs that changed (their rows, or their allocations), by id.
    pub changed: Vec<JobId>,
    /// Their rows as they are now, by id (a job deleted since is missing).
    pub jobs: Vec<Job>,
    /// Their allocations held now, oldest first.
    pub held: Vec<Allocation>,
}
