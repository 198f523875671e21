//! Gantry's durable state.
//!
//! [`Store`] is the seam: every read and write the control plane makes goes through it, and each
//! method is one transaction. Two backends implement it with the same SQL: [`SqliteStore`]
//! (embedded, the default) and [`PgStore`] (PostgreSQL, `--db postgres://…`). The store decides
//! nothing about scheduling; it only refuses writes that would break an invariant (a GPU
//! over-allocated, a stale agent epoch, a job in the wrong state), and the database refuses them
//! too (migration 17), whoever writes.
//!
//! Start reading at [`Store`], then [`db`] (the SQL seam both backends run), [`sqlite`] (the
//! SQL itself, one module per concern, and the embedded store: WAL, migrations under
//! `migrations/`) and [`postgres`] (the same on PostgreSQL, `migrations/postgres/`).

pub mod audit;
pub mod db;
pub mod error;
pub mod history;
pub mod model;
pub mod postgres;
pub mod sqlite;
mod writer;

pub use error::StoreError;
pub use model::*;
pub use postgres::PgStore;
pub use sqlite::SqliteStore;

/// Result of a store call.
pub type Result<T> = std::result::Result<T, StoreError>;

/// A team secret as listed, without its values: team, name, keys, when it was set (ms).
pub type SecretListing = (String, String, Vec<String>, i64);

/// Durable control-plane state. Every method is atomic; writes are durable when they return.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Applies a change made for a caller and appends it to the audit log, in one transaction.
    /// A change that fails is still recorded, with `error: …` as its outcome (the same caller's
    /// identical failures within a minute share one row, counted, as refusals do).
    fn apply(&self, change: Change, audit: AuditEntry) -> Result<Changed>;
    /// Records a refused request (`denied: …`) in the audit log; the same caller's refusals for
    /// the same action and reason within a minute share one row, counted.
    fn audit_refusal(&self, audit: AuditEntry, outcome: String) -> Result<()>;
    /// Audit rows after id `after`, oldest first, at most `limit`, none before `since` (ms).
    fn audit_rows(&self, after: i64, since: Option<i64>, limit: u32) -> Result<Vec<AuditRecord>>;
    /// The audit log's head: the last row's id and hash.
    fn audit_head(&self) -> Result<Option<(i64, String)>>;

    /// Finds a token by the hex SHA-256 of its secret.
    fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>>;
    /// One token.
    fn token(&self, id: i64) -> Result<Option<TokenRecord>>;
    /// Tokens, newest first (only one user's when given).
    fn tokens(&self, user: Option<&str>) -> Result<Vec<TokenRecord>>;
    /// The invoke tokens of the services of `teams`, newest first (what their members list and
    /// may revoke).
    fn invoke_tokens(&self, teams: Vec<String>) -> Result<Vec<TokenRecord>>;
    /// Usable admin tokens at `now`.
    fn admin_token_count(&self, now: i64) -> Result<u64>;
    /// One user.
    fn user(&self, name: &str) -> Result<Option<User>>;
    /// All users.
    fn users(&self) -> Result<Vec<User>>;
    /// Creates or updates a team.
    fn set_team(&self, team: &Team) -> Result<()>;
    /// All teams.
    fn teams(&self) -> Result<Vec<Team>>;
    /// The node pools an admin set (`Change::SetPool`), by name; others pack and admit every
    /// team.
    fn pools(&self) -> Result<Vec<Pool>>;
    /// Every team's idle policy an admin set, by team and kind.
    fn idle_policies(&self) -> Result<Vec<gantry_api::idle::IdlePolicyView>>;
    /// GPUs idle jobs lent and not yet given back, with their borrowers.
    fn loans(&self) -> Result<Vec<gantry_api::idle::Loan>>;
    /// Records a preemptible job the scheduling pass placed on lent GPUs (a scheduling
    /// decision, like [`Store::place`]): the job moves to `scheduled` on its owner's GPUs.
    /// `Conflict` when a GPU is not lent by a running owner or is borrowed already.
    fn borrow(&self, placement: &Placement) -> Result<()>;

    /// Records a submission; returns the id and whether it is new (false: same `request_id`
    /// seen before in the same team).
    fn submit(&self, job: &NewJob) -> Result<(JobId, bool)>;
    /// One job.
    fn job(&self, id: JobId) -> Result<Option<Job>>;
    /// Jobs matching the filter, by id.
    fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>>;
    /// Number of jobs per (team, state).
    fn job_counts(&self) -> Result<Vec<(String, JobState, u64)>>;
    /// A gang's workers, by rank (none for a job that is not a gang).
    fn workers(&self, gang: JobId) -> Result<Vec<Job>>;
    /// A job's state changes, oldest first.
    fn transitions(&self, id: JobId) -> Result<Vec<Transition>>;
    /// Jobs whose state changed after state change number `after` (a position in the log of
    /// every job's transitions), reading at most `limit` changes, and the position reached.
    /// With `after` `None`, no jobs and the current position (where a watcher starts). Only
    /// `teams`' jobs when set: the caller's visibility, applied in the query.
    fn changed_jobs(
        &self,
        after: Option<i64>,
        limit: u32,
        teams: Option<Vec<String>>,
    ) -> Result<(i64, Vec<Job>)>;
    /// A job's attempts, oldest first.
    fn attempts(&self, id: JobId) -> Result<Vec<Attempt>>;
    /// Cancels a pending job now, or asks the agent to stop an active one.
    fn cancel(&self, id: JobId, at: i64) -> Result<Job>;
    /// Ends a pending job whose dependency can no longer be met (`cancelled` with `reason`, and
    /// an event). `Conflict` when the job is not pending.
    fn dependency_failed(&self, id: JobId, reason: &str, at: i64) -> Result<()>;
    /// Records what staging found of a job's declared inputs (bytes, cache hit, time), matched
    /// by name and URL.
    fn staged_inputs(&self, id: JobId, found: &[gantry_api::inputs::Input]) -> Result<()>;
    /// Records the manifest digest a node resolved a job's image to; the first one stays
    /// (every later attempt runs it). `NotFound` for a job without an image.
    fn resolved_image(&self, id: JobId, digest: &str) -> Result<()>;
    /// Gives service replica `id` the port `port` (its `$PORT`), chosen on the node it was
    /// placed on. `NotFound` for a job that is not a replica.
    fn set_replica_port(&self, id: JobId, port: u16) -> Result<()>;
    /// Records where the upload of an ended attempt's declared outputs stands (matched by name
    /// and URL; an output that heard of a later attempt keeps that); returns the job's outputs.
    fn reported_outputs(
        &self,
        id: JobId,
        attempt: u32,
        found: &[gantry_api::outputs::Output],
    ) -> Result<Vec<gantry_api::outputs::Output>>;
    /// A team's secret with its values (`Change::SetSecret`), for the agent that stages a job
    /// of that team.
    fn secret(&self, team: &str, name: &str) -> Result<Option<std::collections::BTreeMap<String, String>>>;
    /// The secrets of one team (none: every team) without their values: team, name, keys and
    /// when it was set.
    fn secrets(&self, team: Option<&str>) -> Result<Vec<SecretListing>>;
    /// The input sources an admin marked public (`Change::SetPublicSource`): URL and when, by
    /// URL.
    fn public_sources(&self) -> Result<Vec<(String, i64)>>;
    /// Records a scheduling decision: allocations and the job's move to `scheduled`.
    fn place(&self, placement: &Placement) -> Result<()>;
    /// Records a gang's placement: every worker in one transaction, with the rendezvous (rank 0's
    /// node as master address, a port no other running gang uses there), or nothing.
    fn place_gang(&self, placement: &GangPlacement) -> Result<()>;
    /// Asks a running job to stop for another (the agent sends SIGTERM, then SIGKILL after the
    /// grace period) and requeues it when it ends, without spending its retry budget.
    /// `Conflict` when the job is not running or already stopping.
    fn preempt(&self, id: JobId, reason: &str, at: i64) -> Result<()>;
    /// Asks a running elastic job to stop so that it restarts at another width: as
    /// [`Store::preempt`], with a `job.resized` event. `Conflict` when the job is not elastic,
    /// not running or already stopping.
    fn resize(&self, id: JobId, reason: &str, at: i64) -> Result<()>;

    /// Registers a node (again); returns its new epoch. Jobs of older epochs are requeued. A GPU
    /// that a ready node holds cannot be claimed by another.
    fn register_node(&self, registration: &NodeRegistration) -> Result<u64>;
    /// Applies a heartbeat received at `at` (ms since the epoch: the server's clock, never the
    /// agent's); returns the jobs the node must run now. Reports of jobs not placed on this node
    /// under this epoch change nothing.
    fn heartbeat(&self, heartbeat: &Heartbeat, at: i64) -> Result<Vec<Job>>;
    /// The jobs the node must run now, as [`Store::heartbeat`] answers them, without a report:
    /// what a held heartbeat answers once the node's work changed. `StaleEpoch` (or `NotFound`)
    /// as there when the node is no longer up under `epoch`.
    fn assignments(&self, node_id: &str, epoch: u64) -> Result<Vec<Job>>;
    /// Marks up nodes (ready or not responding) silent since before `deadline` as lost and
    /// requeues their jobs.
    fn expire_nodes(&self, deadline: i64, at: i64) -> Result<Vec<String>>;
    /// Marks ready nodes silent since before `deadline` as not responding: they get no new work
    /// and keep their jobs; their next heartbeat makes them ready again.
    fn mark_not_responding(&self, deadline: i64, at: i64) -> Result<Vec<String>>;
    /// Requeues (as preemptions) the running jobs of draining nodes whose grace ended by `at`.
    fn drain_due(&self, at: i64) -> Result<Vec<JobId>>;
    /// All nodes.
    fn nodes(&self) -> Result<Vec<Node>>;
    /// All GPUs.
    fn gpus(&self) -> Result<Vec<Gpu>>;

    /// Allocation history (or only what is held now).
    fn allocations(&self, held_only: bool) -> Result<Vec<Allocation>>;
    /// GPU time allocated between `since` and `until` (ms), per team (and per user when
    /// `by_user`), from the allocation history, and used (from utilisation samples, by the
    /// hour, see `sqlite::workflow`); only `teams` when given.
    fn usage(&self, since: i64, until: i64, by_user: bool, teams: Option<Vec<String>>) -> Result<Vec<Usage>>;
    /// GPU time used (utilisation × share × time, milli-GPU-ms) per job submitted at or after
    /// `since`, from the same samples as [`Store::usage`]; jobs without samples are absent.
    fn gpu_use_by_job(&self, since: i64) -> Result<Vec<(JobId, i64)>>;
    /// A job's GPU time judged for data stalls and the part of it lost waiting for input, both
    /// milli-GPU-ms (every attempt, and a gang's workers): `(0, 0)` when never judged.
    fn gpu_stall_of_job(&self, id: JobId) -> Result<(i64, i64)>;
    /// [`Store::gpu_stall_of_job`] for every job holding GPUs now, over its held allocations
    /// only (the running attempt): `(job, measured, stalled)`; jobs never judged are absent.
    fn gpu_stalls_held(&self) -> Result<Vec<(JobId, i64, i64)>>;
    /// Events, newest first.
    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>>;
    /// Records an event (`kind` such as `service.rollout_stuck`, about `subject`, seen by
    /// `team`'s users and admins).
    fn record_event(
        &self,
        at: i64,
        kind: &str,
        subject: &str,
        message: &str,
        team: Option<&str>,
    ) -> Result<()>;

    /// Volumes of `teams` (all when `None`), by team and name.
    fn volumes(&self, teams: Option<Vec<String>>) -> Result<Vec<Volume>>;
    /// Services of `teams` (all when `None`), by team and name.
    fn services(&self, teams: Option<Vec<String>>) -> Result<Vec<Service>>;
    /// One service.
    fn service(&self, team: &str, name: &str) -> Result<Option<Service>>;
    /// A service's replicas that have not ended and the `ended` latest that have, by id.
    fn service_replicas(&self, team: &str, name: &str, ended: u32) -> Result<Vec<Replica>>;
    /// A service's last `limit` decisions, newest first.
    fn service_decisions(&self, id: i64, limit: u32) -> Result<Vec<ServiceDecision>>;
    /// Sets the count the controller keeps, recording the decision that set it (the service
    /// controller's write; not audited, as placements are not).
    fn scale_service(&self, id: i64, desired: u32, decision: Option<ServiceDecision>) -> Result<()>;
    /// Records what a server replica's gateway saw of services (one row per service and replica,
    /// replaced; a `last_request_at` never moves back). Unfenced: every replica writes its own.
    fn note_service_activity(&self, seen: &[ServiceActivity]) -> Result<()>;
    /// Every replica's rows of [`Store::note_service_activity`].
    fn service_activity(&self) -> Result<Vec<ServiceActivity>>;
    /// Stops a service replica (the controller: scaled down, replaced, failing its probe), with
    /// the reason on the job and in an event.
    fn stop_replica(&self, id: JobId, reason: &str, at: i64) -> Result<()>;

    /// The scheduler's change log position now: read it before a full reload, then ask for
    /// [`Store::scheduler_changes`] after it.
    fn scheduler_position(&self) -> Result<i64>;
    /// What changed for the scheduler after `after` (jobs, their held allocations, whether the
    /// cluster changed). `None` when the log cannot say (pruned past `after`, or more than
    /// `limit` changes): the caller reloads everything.
    fn scheduler_changes(&self, after: i64, limit: u32) -> Result<Option<SchedulerChanges>>;

    /// Campaigns for leadership as `holder` at `at` (ms): renews its living lease for `ttl_ms`,
    /// takes over a lapsed one (a new election: the epoch grows), or names the living leader.
    fn campaign(&self, holder: &str, ttl_ms: i64, at: i64) -> Result<Lease>;
    /// The lease as it is (`None` before the first campaign).
    fn lease(&self) -> Result<Option<Lease>>;
    /// Every election and the leader epoch each attempt was placed under, for the failover
    /// checker (`gantry bench failover`).
    fn leadership_history(&self) -> Result<LeadershipHistory>;
    /// What the leader's writes through this store must prove from now on: [`Store::place`],
    /// [`Store::place_gang`], [`Store::preempt`], [`Store::resize`], [`Store::expire_nodes`],
    /// [`Store::mark_not_responding`], [`Store::drain_due`] and [`Store::dependency_failed`]
    /// check it in their own transaction and fail with `Fenced` when the lease no longer names
    /// this replica under its epoch. Unfenced (the default) checks nothing.
    fn set_fence(&self, fence: Fence);
}
