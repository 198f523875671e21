//! The `gantry` policy: the server's scheduling pass, [`gantry_core::sched::plan`], on a
//! virtual cluster that lives for the whole run ([`crate::replay::VirtualCluster`], the engine
//! the server's replay test holds to the server's decisions).
//!
//! Every round the policy tells the cluster what happened since the last one (arrivals as
//! pending jobs, completions as ends, the service each job received), runs the pass, and carries
//! out its decisions as the control plane and its agents do: placements start, preempted and
//! resized jobs stop and go back to the queue. A Pollux job checkpoints and stops at once, so a
//! pass that stopped jobs is followed, in the same round, by another that places what waited
//! for their GPUs (at most [`PASSES`] a round); so is a pass after which a staging finished
//! within the round (the server passes as soon as the agent reports it). It reads nothing the server could not know:
//! arrival, GPUs asked, service received and time waited; never the remaining duration.
//!
//! How a workload row becomes a server job: a job of one GPU is a plain job; a job of `n` > 1
//! GPUs is a gang of `n` one-GPU workers (the simulator's jobs split between nodes at any GPU,
//! as Pollux's do), placed all at once or not at all; under `--elastic` every job is a plain
//! elastic job of its range (`--gpus 1..max`), which the server's rule runs on one node. Every
//! job checkpoints (`QueueInput::checkpointing`): it is ranked by the service it received, as
//! the queue's attained-service bands rank it, and yields its GPUs to any job the queue ranks
//! above it. Teams come from the workload (or round-robin); each is guaranteed an even split of
//! `team_guarantee` × the cluster.

use std::collections::HashMap;

use gantry_api::model::{
    Gang, Gpu, GpuHealth, GpuInfo, Job, JobId, JobRequest, JobState, Node, NodeState, Team,
};
use gantry_core::PolicyKind;
use gantry_core::queue::QueueWeights;
use gantry_core::sched::Decision;

use super::engine::{ClusterShape, JobPolicy, JobView};
use crate::replay::{Event, VirtualCluster};

/// Most passes in one round: a pass that stops jobs is followed by one that uses their GPUs.
pub const PASSES: usize = 4;

/// Least time between two growths of an elastic job, ms: the server's `--resize-interval`
/// default.
pub const RESIZE_GAP_MS: i64 = 300_000;

/// Gantry's scheduling pass as a job-simulator policy.
#[derive(Debug)]
pub struct GantryPolicy {
    weights: QueueWeights,
    /// Run jobs as elastic jobs of their range.
    elastic: bool,
    cluster: VirtualCluster,
    /// Workload index → job id.
    ids: HashMap<usize, JobId>,
    /// Node id → node index.
    nodes: HashMap<String, usize>,
    next_id: JobId,
    /// Guarantee of each team, as last told to the cluster.
    teams: Vec<u32>,
    /// Every event given to the cluster, when recording.
    log: Option<Vec<Event>>,
    /// Datasets (`--datasets`), when the run has them.
    data: Option<super::datarun::DataRun>,
}

impl GantryPolicy {
    /// A policy with these weights.
    pub fn new(weights: QueueWeights) -> Self {
        Self {
            cluster: VirtualCluster::with_weights(weights.clone()),
            weights,
            elastic: false,
            ids: HashMap::new(),
            nodes: HashMap::new(),
            next_id: 1,
            teams: Vec::new(),
            log: None,
            data: None,
        }
    }

    /// A policy whose jobs read the datasets of `setup`, brought to the GPUs as `mode` says.
    pub fn with_data(
        mut self,
        setup: super::data::DataSetup,
        mode: super::data::DataMode,
        tick_s: u64,
    ) -> Self {
        self.data = Some(super::datarun::DataRun::new(setup, mode, tick_s));
        self
    }

    /// A policy that runs every job as an elastic job of its range, resized by the server's
    /// elastic rule.
    pub fn elastic(weights: QueueWeights) -> Self {
        Self { elastic: true, ..Self::new(weights) }
    }

    /// Records every event it gives the virtual cluster (see [`GantryPolicy::log`]).
    pub fn recording(mut self) -> Self {
        self.log = Some(Vec::new());
        self
    }

    /// The events given to the virtual cluster so far, passes with their decisions, when
    /// recording: replaying them through the server must give the same decisions.
    pub fn log(&self) -> &[Event] {
        self.log.as_deref().unwrap_or(&[])
    }

    fn apply(&mut self, event: Event) -> Vec<Decision> {
        let decided = self.cluster.apply(&event, PolicyKind::Gantry);
        if let (Some(data), Event::Pass { at, .. }) = (&mut self.data, &event) {
            data.decided(&decided, *at, &mut self.cluster, &self.nodes);
        }
        if let Some(log) = &mut self.log {
            log.push(match event {
                Event::Pass { at, resize_gap_ms, .. } => {
                    Event::Pass { at, resize_gap_ms, decided: decided.clone() }
                }
                other => other,
            });
        }
        decided
    }

    /// Nodes `node-0`… with GPUs `node-0-0`…, all healthy, on the first round.
    fn add_nodes(&mut self, shape: &ClusterShape) {
        for i in 0..shape.nodes as usize {
            let id = format!("node-{i}");
            let node = Node {
                id: id.clone(),
                hostname: id.clone(),
                advertise_addr: None,
                network: Default::default(),
                state: NodeState::Ready,
                scheduling: Default::default(),
                drain_at: None,
                epoch: 1,
                cpu_milli: 1_000_000,
                memory_mib: 1 << 30,
                last_heartbeat: 0,
                job_defaults: None,
                labels: Default::default(),
            };
            let gpus = (0..shape.gpus_per_node)
                .map(|g| Gpu {
                    info: GpuInfo {
                        uuid: format!("{id}-{g}"),
                        index: g,
                        model: shape.model.clone(),
                        memory_mib: 16_384,
                    },
                    node_id: id.clone(),
                    health: GpuHealth::Healthy,
                    sample: None,
                })
                .collect();
            self.nodes.insert(id, i);
            self.apply(Event::Node(node, gpus));
        }
    }

    /// Each team guaranteed an even split of `team_guarantee` × the cluster.
    fn set_teams(&mut self, jobs: &[JobView<'_>], shape: &ClusterShape) {
        let count = jobs.iter().map(|j| j.team + 1).max().unwrap_or(1);
        let each =
            (f64::from(shape.total_gpus()) * self.weights.team_guarantee / count as f64).floor() as u32;
        for t in 0..count {
            if self.teams.get(t) != Some(&each) {
                let team = Team { name: team_name(t), gpu_quota: Some(each), ..Team::default() };
                self.apply(Event::Team(team));
                if self.teams.len() <= t {
                    self.teams.resize(t + 1, u32::MAX);
                }
                self.teams[t] = each;
            }
        }
    }

    /// Submits a job that arrived: a plain job, an elastic one, or a gang and its workers.
    fn submit(&mut self, view: &JobView<'_>, now_ms: i64) {
        let id = self.next_id;
        let inputs = self.data.as_mut().map(|d| d.submitted(view, id)).unwrap_or_default();
        let job = Job {
            id,
            inputs,
            team: team_name(view.team),
            name: view.row.name.clone(),
            priority: view.row.priority,
            submitted_at: ((view.row.submit * 1000.0).round() as i64).min(now_ms),
            request: JobRequest { gpus: view.min_gpus, ..JobRequest::default() },
            ..Job::default()
        };
        self.ids.insert(view.id, id);
        if self.elastic {
            let gpus_max = Some(view.max_gpus.max(view.min_gpus));
            self.next_id += 1;
            self.apply(Event::Submit(Box::new(Job {
                request: JobRequest { gpus_max, ..job.request },
                ..job
            })));
            return;
        }
        let replicas = view.min_gpus;
        if replicas <= 1 {
            self.next_id += 1;
            self.apply(Event::Submit(Box::new(job)));
            return;
        }
        let gang = |rank: Option<u32>| Gang {
            id,
            replicas,
            rank,
            local_rank: None,
            master_addr: None,
            master_port: None,
        };
        let one = JobRequest { gpus: 1, ..JobRequest::default() };
        let workers: Vec<Job> = (0..replicas)
            .map(|r| Job {
                id: id + 1 + i64::from(r),
                request: one,
                gang: Some(gang(Some(r))),
                ..job.clone()
            })
            .collect();
        self.next_id += 1 + i64::from(replicas);
        if let Some(data) = &mut self.data {
            for w in &workers {
                data.worker(w.id, id);
            }
        }
        self.apply(Event::Submit(Box::new(Job { request: one, gang: Some(gang(None)), ..job })));
        for w in workers {
            self.apply(Event::Submit(Box::new(w)));
        }
    }

    /// Node index per GPU each job holds, by job id (a gang's workers count for the gang).
    fn allocations(&self) -> HashMap<JobId, Vec<usize>> {
        let mut out: HashMap<JobId, Vec<usize>> = HashMap::new();
        for j in &self.cluster.snapshot().active {
            let owner = match &j.gang {
                Some(g) if g.is_worker() => g.id,
                Some(_) => continue,
                None => j.id,
            };
            let Some(node) = j.node_id.as_deref().and_then(|n| self.nodes.get(n)) else { continue };
            out.entry(owner).or_default().extend(std::iter::repeat_n(*node, j.gpu_uuids.len()));
        }
        for alloc in out.values_mut() {
            alloc.sort_unstable();
        }
        out
    }
}

pub(super) fn team_name(t: usize) -> String {
    format!("team-{t}")
}

impl JobPolicy for GantryPolicy {
    fn elastic(&self) -> bool {
        self.elastic
    }

    fn copy_on_start(&mut self, now: u64, job: usize, alloc: &[usize]) -> u64 {
        self.data.as_mut().map_or(0, |d| d.copy_on_start(now, job, alloc))
    }

    fn data_stats(&self) -> Option<super::data::DataStats> {
        self.data.as_ref().map(|d| d.stats)
    }

    fn schedule(&mut self, now: u64, jobs: &[JobView<'_>], shape: &ClusterShape) -> Vec<Vec<usize>> {
        let at = now as i64 * 1000;
        if self.nodes.is_empty() {
            self.add_nodes(shape);
        }
        // Jobs known and no longer active have finished.
        let active: std::collections::HashSet<usize> = jobs.iter().map(|j| j.id).collect();
        let mut ended: Vec<(usize, JobId)> =
            self.ids.iter().filter(|(k, _)| !active.contains(k)).map(|(k, id)| (*k, *id)).collect();
        ended.sort_unstable();
        for (k, id) in ended {
            self.ids.remove(&k);
            self.apply(Event::End(id, JobState::Succeeded));
        }
        self.set_teams(jobs, shape);
        if let Some(data) = &mut self.data {
            data.round(now, &mut self.cluster, shape.nodes as usize);
        }
        for view in jobs {
            if !self.ids.contains_key(&view.id) {
                self.submit(view, at);
            }
        }
        let served = jobs.iter().filter_map(|j| Some((*self.ids.get(&j.id)?, j.attained_gpu_s))).collect();
        self.apply(Event::Checkpointing(served));
        for _ in 0..PASSES {
            let decided = self.apply(Event::Pass { at, resize_gap_ms: RESIZE_GAP_MS, decided: Vec::new() });
            let stopped = decided.iter().any(|d| matches!(d, Decision::Preempt(_) | Decision::Resize(_)));
            // A staging that ends within the round is reported by its agent, and the server
            // passes again (see `super::datarun`).
            let staged = self.data.as_mut().is_some_and(super::datarun::DataRun::take_wake);
            // A Pollux job checkpoints and stops at once.
            self.apply(Event::StopAll);
            if !stopped && !staged {
                break;
            }
        }
        if let Some(data) = &mut self.data {
            data.end_round(now);
        }
        self.apply(Event::StartAll(at));
        let mut held = self.allocations();
        jobs.iter().map(|j| self.ids.get(&j.id).and_then(|id| held.remove(id)).unwrap_or_default()).collect()
    }
}
