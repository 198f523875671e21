//! A virtual cluster of server-shaped jobs driven by the scheduling core's pass.
//!
//! [`gantry_core::sched::plan`] is the pass the server runs; this engine runs the same pass on
//! a cluster held in memory and carries out its decisions the way the control plane and its
//! agents do: a placement makes a job `scheduled` on its GPUs, an agent starting it makes it
//! `running`, a preemption or a resize asks it to stop and, once it has, puts it back in the
//! queue (retry budget untouched), an exit ends it, a dependency that can never be met fails
//! the job. Nodes join, GPUs fault and recover, teams change guarantees as events of the log.
//! The server's replay test (`crates/server/tests/it/replay.rs`) drives one event log through
//! the server's scheduler (its store, its incremental copy, its dispatch) and through this
//! engine, and requires the same decisions, resizes and victims included.
//!
//! The job simulator's `gantry` policy (`crate::jobs::gantry`) keeps one of these for a whole
//! run and drives it through [`Event`]s, which it can record: the server's replay test replays
//! such a recording and requires the decisions the simulator got.

use std::collections::HashMap;

use gantry_api::model::{Gpu, GpuHealth, Job, JobId, JobState, Node, Team};
use gantry_core::queue::QueueWeights;
use gantry_core::sched::{self, Decision, Held, Memory, Place, QueueInput, Snapshot};
use gantry_core::{PolicyKind, SplitMix64};

/// The seed of every pass's random stream, as the server's.
pub const SEED: u64 = 0x9a17;

/// The virtual cluster (see the module doc).
#[derive(Debug, Default)]
pub struct VirtualCluster {
    snap: Snapshot,
    memory: Memory,
    /// Every job ever submitted, by id, as it stands now (dependencies read ended ones).
    states: HashMap<JobId, JobState>,
    /// Array members by array id (a dependency on an array waits for every member).
    arrays: HashMap<JobId, Vec<JobId>>,
    next_allocation: i64,
    /// Jobs that checkpoint, with the service they received (`QueueInput::checkpointing`).
    checkpointing: HashMap<JobId, f64>,
}

/// One event of a log the virtual cluster replays (and the server's replay test too).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A node joins with its GPUs.
    Node(Node, Vec<Gpu>),
    /// A team's guarantee changes.
    Team(Team),
    /// A job (pending, with its gang's workers after it) is submitted.
    Submit(Box<Job>),
    /// Jobs that checkpoint now, with the service each received (replaces the last).
    Checkpointing(HashMap<JobId, f64>),
    /// One pass at `at` ms, with what it decided.
    Pass {
        /// ms.
        at: i64,
        /// Least time between two resizes of a job, ms.
        resize_gap_ms: i64,
        /// The decisions the pass returned.
        decided: Vec<Decision>,
    },
    /// Agents start every scheduled job at `at` ms.
    StartAll(i64),
    /// Agents stop every job asked to stop; each goes back to the queue.
    StopAll,
    /// A job (or a gang) ends.
    End(JobId, JobState),
}

impl VirtualCluster {
    /// A cluster whose queue runs with `weights` (the default: the server's).
    pub fn with_weights(weights: QueueWeights) -> Self {
        Self { memory: Memory::with_weights(weights), ..Self::default() }
    }

    /// Replays one event (a `Pass` plans anew: its `decided` is not read) and returns what a
    /// pass decided (nothing for other events).
    pub fn apply(&mut self, event: &Event, policy: PolicyKind) -> Vec<Decision> {
        match event {
            Event::Node(node, gpus) => self.add_node(node.clone(), gpus.clone()),
            Event::Team(team) => self.set_team(team.clone()),
            Event::Submit(job) => self.submit((**job).clone()),
            Event::Checkpointing(jobs) => self.checkpointing.clone_from(jobs),
            Event::Pass { at, resize_gap_ms, .. } => return self.pass(*at, policy, *resize_gap_ms),
            Event::StartAll(at) => self.start_all(*at),
            Event::StopAll => self.stop_all(),
            Event::End(id, state) => self.end(*id, *state),
        }
        Vec::new()
    }

    /// The cluster as the next pass will see it (its time and queue memory are the last pass's).
    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// How a pending job's staging stands now (the job simulator's virtual caches take longer
    /// than the replay's instant copies).
    pub fn set_staging(&mut self, id: JobId, staging: sched::Staging) {
        self.snap.staging.insert(id, staging);
    }

    /// What the next passes know of the nodes' caches.
    pub fn set_locality(&mut self, locality: sched::Locality) {
        self.snap.locality = locality;
    }

    /// A node joins (or comes back) with its GPUs.
    pub fn add_node(&mut self, node: Node, gpus: Vec<Gpu>) {
        self.snap.nodes.retain(|n| n.id != node.id);
        self.snap.gpus.retain(|g| g.node_id != node.id);
        self.snap.nodes.push(node);
        self.snap.gpus.extend(gpus);
    }

    /// A GPU's health changes.
    pub fn set_health(&mut self, uuid: &str, health: GpuHealth) {
        for g in self.snap.gpus.iter_mut().filter(|g| g.info.uuid == uuid) {
            g.health = health;
        }
    }

    /// A team's guarantee and rules change.
    pub fn set_team(&mut self, team: Team) {
        self.snap.teams.retain(|t| t.name != team.name);
        self.snap.teams.push(team);
        self.snap.teams.sort_by(|a, b| a.name.cmp(&b.name));
    }

    /// A job (pending) joins the queue.
    pub fn submit(&mut self, job: Job) {
        self.states.insert(job.id, job.state);
        if let Some(a) = job.array {
            self.arrays.entry(a.id).or_default().push(job.id);
        }
        self.snap.pending.push(job);
        self.snap.pending.sort_by_key(|j| j.id);
    }

    /// Agents start every scheduled job (a gang when its first worker starts).
    pub fn start_all(&mut self, at: i64) {
        for j in self.snap.active.iter_mut().filter(|j| j.state == JobState::Scheduled) {
            j.state = JobState::Running;
            j.started_at = Some(at);
            self.states.insert(j.id, JobState::Running);
        }
        self.sort_active();
    }

    /// Agents stop every job asked to stop: each goes back to the queue.
    pub fn stop_all(&mut self) {
        let stopping: Vec<JobId> =
            self.snap.active.iter().filter(|j| j.stop.is_some()).map(|j| j.id).collect();
        for id in stopping {
            self.requeue(id);
        }
    }

    /// Job `id` (a plain job or a whole gang) ends in `state`.
    pub fn end(&mut self, id: JobId, state: JobState) {
        let members = self.members(id);
        self.snap.active.retain(|j| !members.contains(&j.id));
        self.snap.pending.retain(|j| !members.contains(&j.id));
        self.snap.held.retain(|a| !members.contains(&a.job_id));
        for m in members {
            self.states.insert(m, state);
        }
    }

    /// One pass at `at` (ms): plans and carries out what it decided, which it returns.
    pub fn pass(&mut self, at: i64, policy: PolicyKind, resize_gap_ms: i64) -> Vec<Decision> {
        self.memory.retain(|id| self.states.get(&id).is_some_and(|s| !s.is_terminal()));
        self.memory.charge(&self.snap.active, at);
        self.snap.deps = self.dependencies();
        self.snap.at = at;
        // As the server's staging table: only pending jobs' stagings are remembered (one that
        // started, ended or went back to the queue is staged anew).
        let pending: std::collections::HashSet<JobId> = self.snap.pending.iter().map(|j| j.id).collect();
        self.snap.staging.retain(|id, _| pending.contains(id));
        self.snap.queue = self.memory.queue_input(resize_gap_ms);
        self.snap.queue.checkpointing.clone_from(&self.checkpointing);
        let decisions = if self.snap.nodes.iter().any(|n| n.state == gantry_api::model::NodeState::Ready) {
            sched::plan(&self.snap, policy, &mut SplitMix64::new(SEED))
        } else {
            Vec::new()
        };
        for d in &decisions {
            if self.carry_out(d) {
                self.memory.carried_out(d);
            }
        }
        self.snap.queue = QueueInput::default();
        decisions
    }

    /// Whether the decision could be carried out (the store refuses what no longer applies).
    fn carry_out(&mut self, d: &Decision) -> bool {
        match d {
            Decision::Place(p) => self.place(p, None),
            Decision::PlaceGang(g) => {
                let ok = g.workers.iter().all(|w| self.place(w, Some(g.gang_id)));
                self.set_state(g.gang_id, JobState::Scheduled);
                ok
            }
            // The replay's snapshot lends no GPUs (no idle reconciler runs here).
            Decision::Borrow(_) => false,
            Decision::Preempt(p) => self.ask_to_stop(p.job_id, &p.reason),
            Decision::Resize(r) => self.ask_to_stop(r.job_id, &r.reason),
            Decision::FailDependency { job, .. } => {
                self.end(*job, JobState::Failed);
                true
            }
            Decision::Wait { .. } => true,
            // The replay's nodes hold every input already: the staging is done at once, and the
            // next pass places the job on that node.
            Decision::Stage(st) => {
                let done = gantry_core::sched::Staging {
                    node: st.node_id.clone(),
                    done: true,
                    reason: String::new(),
                };
                self.snap.staging.insert(st.job_id, done);
                true
            }
        }
    }

    fn place(&mut self, p: &Place, gang: Option<JobId>) -> bool {
        let Some(k) = self.snap.pending.iter().position(|j| j.id == p.job_id) else { return false };
        let mut job = self.snap.pending.remove(k);
        let epoch = self.snap.nodes.iter().find(|n| n.id == p.node_id).map(|n| n.epoch);
        job.state = JobState::Scheduled;
        job.attempt += 1;
        job.node_id = Some(p.node_id.clone());
        job.epoch = epoch;
        job.gpu_uuids = p.grants.iter().map(|g| g.uuid.clone()).collect();
        job.started_at = None;
        job.reason = None;
        for g in &p.grants {
            self.next_allocation += 1;
            let (id, job_id, gpu_uuid) = (self.next_allocation, job.id, g.uuid.clone());
            self.snap.held.push(Held {
                id,
                job_id,
                gpu_uuid,
                share_milli: g.share_milli,
                memory_mib: g.memory_mib,
            });
        }
        self.states.insert(job.id, JobState::Scheduled);
        self.snap.active.push(job);
        let _ = gang;
        self.sort_active();
        true
    }

    fn ask_to_stop(&mut self, id: JobId, reason: &str) -> bool {
        let members = self.members(id);
        let Some(job) = self.snap.active.iter().find(|j| j.id == id) else { return false };
        if job.state != JobState::Running || job.stop.is_some() {
            return false;
        }
        for j in self.snap.active.iter_mut().filter(|j| members.contains(&j.id)) {
            j.stop = Some("preempt".into());
            j.reason = Some(reason.to_owned());
        }
        true
    }

    /// Back to the queue: a job, or a gang with every worker.
    fn requeue(&mut self, id: JobId) {
        let members = self.members(id);
        let (back, stay): (Vec<Job>, Vec<Job>) =
            std::mem::take(&mut self.snap.active).into_iter().partition(|j| members.contains(&j.id));
        self.snap.active = stay;
        self.snap.held.retain(|a| !members.contains(&a.job_id));
        for mut j in back {
            j.state = JobState::Pending;
            j.stop = None;
            j.started_at = None;
            self.states.insert(j.id, JobState::Pending);
            self.snap.pending.push(j);
        }
        self.snap.pending.sort_by_key(|j| j.id);
    }

    fn set_state(&mut self, id: JobId, state: JobState) {
        if let Some(k) = self.snap.pending.iter().position(|j| j.id == id) {
            let mut job = self.snap.pending.remove(k);
            job.state = state;
            job.attempt += 1;
            self.snap.active.push(job);
            self.sort_active();
        }
        self.states.insert(id, state);
    }

    /// The job and, for a gang, its workers.
    fn members(&self, id: JobId) -> Vec<JobId> {
        let all = self.snap.pending.iter().chain(&self.snap.active);
        let mut out: Vec<JobId> = all
            .filter(|j| j.gang.as_ref().is_some_and(|g| g.id == id && g.is_worker()))
            .map(|j| j.id)
            .collect();
        out.push(id);
        out
    }

    /// Scheduled jobs by id, then running ones by id: the order the server's copy keeps.
    fn sort_active(&mut self) {
        self.snap.active.sort_by_key(|j| (j.state == JobState::Running, j.id));
    }

    fn dependencies(&self) -> HashMap<JobId, Vec<JobState>> {
        let mut out = HashMap::new();
        for d in self.snap.pending.iter().flat_map(|j| &j.after) {
            let states = match self.arrays.get(&d.job) {
                Some(members) => members.iter().filter_map(|m| self.states.get(m).copied()).collect(),
                None => self.states.get(&d.job).map(|s| vec![*s]).unwrap_or_default(),
            };
            if !states.is_empty() {
                out.insert(d.job, states);
            }
        }
        out
    }
}
