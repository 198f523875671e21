//! What the scheduler keeps of the store between passes: the queue (pending jobs), the jobs
//! holding GPUs and their allocations, nodes, GPUs and teams — the input of a [`Snapshot`].
//!
//! A pass no longer reads every pending job. [`State::load`] reads everything once (at start,
//! when the store's change log cannot say what changed, and as a periodic safety net); after
//! that [`State::sync`] reads the store's scheduler change log (`scheduler_changes`, written by
//! triggers in the same transaction as every write) after the position it reached, re-reads
//! only the jobs named there, and the nodes, GPUs and teams only when one of them changed.
//! Applying a change is replacing rows by their current version, so applying one twice is
//! harmless: the position is read before the rows, and anything newer is read again next time.
//! [`State::plan_input`] is exactly the snapshot a full reload gives (property test
//! `an_incremental_state_equals_a_full_reload_and_plans_the_same` in
//! `crates/server/tests/it/incremental.rs`).
//!
//! Beside the rows it keeps the core's ledger of them ([`Standing`]: nodes, held allocations,
//! blocked GPUs), fed the same changes ([`Standing::apply`]), so a pass does not rebuild the
//! cluster from rows either. Only a change of the nodes or GPUs themselves (a join, a cordon, a
//! GPU fault) and a full reload build it again ([`State::ledger_builds`] counts them); the same
//! property test holds the kept ledger equal to one built from the reloaded snapshot.

use std::collections::{HashMap, HashSet};

use gantry_store::{
    Gpu, Job, JobFilter, JobId, JobState, Node, NodeState, SchedulerChanges, Store, StoreError,
};

use gantry_core::sched::{Held, QueueInput, Snapshot, Standing};

/// Most changes read in one sync; beyond that a full reload is as cheap.
const MOST_CHANGES: u32 = 20_000;

/// The scheduler's copy of the store (see the module documentation), kept in the order a full
/// reload reads it, so that a pass plans on it without copying 34,000 jobs.
#[derive(Debug, Clone)]
pub struct State {
    /// Position in the store's change log this state reflects.
    position: Option<i64>,
    /// Pending jobs by id; scheduled jobs by id, then running ones by id; held allocations by
    /// id; nodes, GPUs and teams as the store lists them. `at` and `queue` are the pass's.
    snap: Snapshot,
    /// What a pass sees while no node is ready: the nodes, no jobs (nothing can be placed).
    idle: Snapshot,
    /// The core's ledger of `snap`, kept in step with it.
    kept: Standing,
    /// How many times `kept` was built from the rows (a load, a change of nodes or GPUs).
    builds: u64,
}

impl PartialEq for State {
    /// Same position and same content (not the pass's `at` and `queue`), the kept ledgers
    /// included.
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&self.snap, &other.snap);
        self.position == other.position
            && self.kept == other.kept
            && (&a.nodes, &a.gpus, &a.held, &a.pending, &a.active, &a.teams, &a.pools)
                == (&b.nodes, &b.gpus, &b.held, &b.pending, &b.active, &b.teams, &b.pools)
    }
}

/// What a [`State::sync`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    /// Nothing changed since the last sync.
    Unchanged,
    /// Changes were applied.
    Applied,
    /// The change log could not say what changed: everything was read again.
    Reloaded,
}

impl State {
    /// Reads everything the scheduler looks at.
    pub fn load(store: &dyn Store) -> Result<Self, StoreError> {
        // The position first: whatever changes while the rest is read is read again next sync.
        let position = store.scheduler_position()?;
        let by_state = |state| store.jobs(&JobFilter { state: Some(state), ..JobFilter::default() });
        let mut active = by_state(JobState::Scheduled)?;
        active.extend(by_state(JobState::Running)?);
        let (nodes, gpus) = cluster(store)?;
        let snap = Snapshot {
            nodes,
            gpus,
            held: store.allocations(true)?.iter().map(held).collect(),
            pending: by_state(JobState::Pending)?,
            active,
            teams: store.teams()?,
            pools: store.pools()?,
            at: 0,
            queue: QueueInput::default(),
            ..Snapshot::default()
        };
        let kept = Standing::build(&snap);
        let mut state = Self { position: Some(position), snap, idle: Snapshot::default(), kept, builds: 1 };
        let jobs = state.snap.pending.iter().chain(&state.snap.active);
        state.snap.services = jobs.filter_map(|j| Some((j.id, replica_service(j)?))).collect();
        Ok(state)
    }

    /// Applies what changed in the store since the last sync (or reads everything again when
    /// the change log cannot say).
    pub fn sync(&mut self, store: &dyn Store) -> Result<Synced, StoreError> {
        // A failed sync leaves no position behind: the next one reloads.
        let Some(position) = self.position.take() else {
            *self = Self::load(store)?;
            return Ok(Synced::Reloaded);
        };
        let Some(changes) = store.scheduler_changes(position, MOST_CHANGES)? else {
            *self = Self::load(store)?;
            return Ok(Synced::Reloaded);
        };
        if changes.position == position {
            self.position = Some(position);
            return Ok(Synced::Unchanged);
        }
        let mut rebuild = false;
        if changes.cluster {
            let (nodes, gpus) = cluster(store)?;
            // The ledger follows jobs; new nodes or GPUs (a join, a cordon, a fault) build it again.
            rebuild = (&nodes, &gpus) != (&self.snap.nodes, &self.snap.gpus);
            (self.snap.nodes, self.snap.gpus) = (nodes, gpus);
            self.snap.teams = store.teams()?;
            self.snap.pools = store.pools()?;
        }
        self.apply(changes, rebuild);
        Ok(Synced::Applied)
    }

    fn apply(&mut self, changes: SchedulerChanges, rebuild: bool) {
        if !rebuild {
            let now: Vec<Held> = changes.held.iter().map(held).collect();
            self.kept.apply(&changes.changed, &changes.jobs, &now);
        }
        let changed: HashSet<JobId> = changes.changed.iter().copied().collect();
        let s = &mut self.snap;
        s.pending.retain(|j| !changed.contains(&j.id));
        s.active.retain(|j| !changed.contains(&j.id));
        s.held.retain(|a| !changed.contains(&a.job_id));
        s.services.retain(|id, _| !changed.contains(id));
        s.services.extend(changes.jobs.iter().filter_map(|j| Some((j.id, replica_service(j)?))));
        let (mut pending, mut scheduled, mut running) = (Vec::new(), Vec::new(), Vec::new());
        for job in changes.jobs {
            match job.state {
                JobState::Pending => pending.push(job),
                JobState::Scheduled => scheduled.push(job),
                JobState::Running => running.push(job),
                _ => {}
            }
        }
        merge_by_id(&mut s.pending, pending);
        let split = s.active.iter().position(|j| j.state == JobState::Running).unwrap_or(s.active.len());
        let mut running_now = s.active.split_off(split);
        merge_by_id(&mut s.active, scheduled);
        merge_by_id(&mut running_now, running);
        s.active.append(&mut running_now);
        if !changes.held.is_empty() {
            s.held.extend(changes.held.iter().map(held));
            s.held.sort_by_key(|a| a.id);
        }
        self.position = Some(changes.position);
        if rebuild {
            self.kept = Standing::build(&self.snap);
            self.builds += 1;
        }
    }

    /// The core's ledger of the rows, kept in step with them.
    pub fn ledger(&self) -> &Standing {
        &self.kept
    }

    /// How many times the ledger was built from the rows since this state was loaded (1 for the
    /// load itself): changes of jobs alone never build it again.
    pub fn ledger_builds(&self) -> u64 {
        self.builds
    }

    /// Position in the store's change log (`None` after a failed sync: the next one reloads).
    pub fn position(&self) -> Option<i64> {
        self.position
    }

    /// Whether job `id` is pending, scheduled or running.
    pub fn knows(&self, id: JobId) -> bool {
        let s = &self.snap;
        s.pending.binary_search_by_key(&id, |j| j.id).is_ok() || s.active.iter().any(|j| j.id == id)
    }

    /// When pending job `id` was submitted.
    pub fn submitted_at(&self, id: JobId) -> Option<i64> {
        let k = self.snap.pending.binary_search_by_key(&id, |j| j.id).ok()?;
        Some(self.snap.pending[k].submitted_at)
    }

    /// Pending jobs.
    pub fn pending(&self) -> usize {
        self.snap.pending.len()
    }

    /// The snapshot a pass plans on at `at` (ms) with the queue's memory `queue`, without
    /// copying it: what a full reload gives, or only the nodes when none is ready (nothing can
    /// be placed).
    pub fn plan_input(&mut self, at: i64, queue: QueueInput) -> &Snapshot {
        if !self.snap.nodes.iter().any(|n| n.state == NodeState::Ready) {
            self.idle = Snapshot { nodes: self.snap.nodes.clone(), at, queue, ..Snapshot::default() };
            return &self.idle;
        }
        (self.snap.at, self.snap.queue) = (at, queue);
        &self.snap
    }

    /// [`State::plan_input`] with the kept ledger it equals, or none while no node is ready.
    pub fn plan_on(&mut self, at: i64, queue: QueueInput) -> (&Snapshot, Option<&Standing>) {
        if !self.snap.nodes.iter().any(|n| n.state == NodeState::Ready) {
            return (self.plan_input(at, queue), None);
        }
        (self.snap.at, self.snap.queue) = (at, queue);
        (&self.snap, Some(&self.kept))
    }

    /// Sets the states of the jobs pending jobs depend on, for the next passes.
    pub fn set_dependencies(&mut self, deps: HashMap<JobId, Vec<JobState>>) {
        self.snap.deps = deps;
    }

    /// Where pending jobs' inputs are being staged (`crate::staging`).
    pub fn set_staging(&mut self, staging: HashMap<JobId, gantry_core::sched::Staging>) {
        self.snap.staging = staging;
    }

    /// What the nodes' caches hold and how fast they fill (`crate::staging`), for placement
    /// that prefers the data.
    pub fn set_locality(&mut self, locality: gantry_core::sched::Locality) {
        self.snap.locality = locality;
    }

    /// Whether job `id` is pending.
    pub fn is_pending(&self, id: JobId) -> bool {
        self.snap.pending.binary_search_by_key(&id, |j| j.id).is_ok()
    }

    /// Sets the GPUs idle jobs lent (read every pass: the change log does not carry them).
    pub fn set_loans(&mut self, loans: Vec<gantry_api::idle::Loan>) {
        self.snap.loans = loans;
    }

    /// A copy of [`State::plan_input`] with the default queue memory.
    pub fn snapshot(&self, at: i64) -> Snapshot {
        let mut copy = self.clone();
        copy.plan_input(at, QueueInput::default()).clone()
    }
}

/// Adds `new` (jobs whose ids are not in `into`) to `into`, keeping it sorted by id; new
/// submissions come last, so most merges are an append.
fn merge_by_id(into: &mut Vec<Job>, mut new: Vec<Job>) {
    if new.is_empty() {
        return;
    }
    new.sort_by_key(|j| j.id);
    if into.last().is_none_or(|l| l.id < new[0].id) {
        into.append(&mut new);
        return;
    }
    let old = std::mem::take(into);
    into.reserve(old.len() + new.len());
    let (mut a, mut b) = (old.into_iter().peekable(), new.into_iter().peekable());
    while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
        let next = if x.id < y.id { a.next() } else { b.next() };
        into.extend(next);
    }
    into.extend(a);
    into.extend(b);
}

/// The service (`team/name`) a job is a replica of, for the core's spreading and victim rules
/// (`gantry_core::sched::Snapshot::services`); batch jobs have none.
fn replica_service(job: &Job) -> Option<String> {
    job.service.as_ref().map(|name| format!("{}/{name}", job.team))
}

/// A held allocation as the core sees it.
pub fn held(a: &gantry_store::Allocation) -> Held {
    Held {
        id: a.id,
        job_id: a.job_id,
        gpu_uuid: a.gpu_uuid.clone(),
        share_milli: a.share_milli,
        memory_mib: a.memory_mib,
    }
}

/// Nodes and GPUs without the readings a heartbeat rewrites (last heartbeat, samples): the
/// scheduler does not look at them, and a heartbeat is not a change for it.
fn cluster(store: &dyn Store) -> Result<(Vec<Node>, Vec<Gpu>), StoreError> {
    let mut nodes = store.nodes()?;
    for n in &mut nodes {
        n.last_heartbeat = 0;
    }
    let mut gpus = store.gpus()?;
    for g in &mut gpus {
        g.sample = None;
    }
    Ok((nodes, gpus))
}
