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
//! [`State::snapshot`] builds exactly the snapshot a full reload gives (property test
//! `an_incremental_state_equals_a_full_reload_and_plans_the_same` in
//! `crates/server/tests/it/incremental.rs`).

use std::collections::BTreeMap;

use gantry_store::{
    Allocation, Gpu, Job, JobFilter, JobId, JobState, Node, NodeState, SchedulerChanges, Store, StoreError,
    Team,
};

use super::plan::{QueueInput, Snapshot};

/// Most changes read in one sync; beyond that a full reload is as cheap.
const MOST_CHANGES: u32 = 20_000;

/// The scheduler's copy of the store (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    /// Position in the store's change log this state reflects.
    position: i64,
    nodes: Vec<Node>,
    gpus: Vec<Gpu>,
    teams: Vec<Team>,
    /// Pending, scheduled and running jobs.
    jobs: BTreeMap<JobId, Job>,
    /// Held allocations per job, oldest first.
    held: BTreeMap<JobId, Vec<Allocation>>,
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
        let mut jobs = BTreeMap::new();
        for state in [JobState::Pending, JobState::Scheduled, JobState::Running] {
            let filter = JobFilter { state: Some(state), ..JobFilter::default() };
            jobs.extend(store.jobs(&filter)?.into_iter().map(|j| (j.id, j)));
        }
        let mut held: BTreeMap<JobId, Vec<Allocation>> = BTreeMap::new();
        for a in store.allocations(true)? {
            held.entry(a.job_id).or_default().push(a);
        }
        let (nodes, gpus) = cluster(store)?;
        Ok(Self { position, nodes, gpus, teams: store.teams()?, jobs, held })
    }

    /// Applies what changed in the store since the last sync (or reads everything again when
    /// the change log cannot say).
    pub fn sync(&mut self, store: &dyn Store) -> Result<Synced, StoreError> {
        let Some(changes) = store.scheduler_changes(self.position, MOST_CHANGES)? else {
            *self = Self::load(store)?;
            return Ok(Synced::Reloaded);
        };
        if changes.position == self.position {
            return Ok(Synced::Unchanged);
        }
        if changes.cluster {
            (self.nodes, self.gpus) = cluster(store)?;
            self.teams = store.teams()?;
        }
        self.apply(changes);
        Ok(Synced::Applied)
    }

    fn apply(&mut self, changes: SchedulerChanges) {
        for id in &changes.changed {
            self.jobs.remove(id);
            self.held.remove(id);
        }
        for job in changes.jobs {
            if matches!(job.state, JobState::Pending | JobState::Scheduled | JobState::Running) {
                self.jobs.insert(job.id, job);
            }
        }
        for a in changes.held {
            self.held.entry(a.job_id).or_default().push(a);
        }
        self.position = changes.position;
    }

    /// Position in the store's change log.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// Pending jobs.
    pub fn pending(&self) -> usize {
        self.jobs.values().filter(|j| j.state == JobState::Pending).count()
    }

    /// The snapshot a full reload gives at `at` (ms): no jobs when no node is ready (nothing
    /// can be placed), pending jobs by id, then the scheduled and the running ones.
    pub fn snapshot(&self, at: i64) -> Snapshot {
        let nodes = self.nodes.clone();
        if !nodes.iter().any(|n| n.state == NodeState::Ready) {
            return Snapshot { nodes, at, ..Snapshot::default() };
        }
        let in_state = |state| self.jobs.values().filter(move |j| j.state == state).cloned();
        let mut held: Vec<Allocation> = self.held.values().flatten().cloned().collect();
        held.sort_by_key(|a| a.id);
        Snapshot {
            nodes,
            gpus: self.gpus.clone(),
            held,
            pending: in_state(JobState::Pending).collect(),
            active: in_state(JobState::Scheduled).chain(in_state(JobState::Running)).collect(),
            teams: self.teams.clone(),
            at,
            queue: QueueInput::default(),
        }
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
