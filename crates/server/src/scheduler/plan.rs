//! Planning a scheduling pass: a pure function from a snapshot to decisions, on the core's
//! queue and ledger.
//!
//! *Who* runs is [`gantry_core::queue::plan_ranked`], the entry point the job simulator's
//! `gantry` policy calls: team guarantees (a team's `gpu_quota` is the GPUs it is guaranteed;
//! idle GPUs may be borrowed and are reclaimed when the owner returns), priority raised by aging,
//! fair share from decayed usage, FIFO, backfill that cannot delay the head, and preemption of
//! lower-ranked running jobs. The server does not demote by attained service (its jobs do not say
//! they checkpoint), so every job sits in band 0.
//!
//! *Where*: a whole-GPU job goes where the queue placed it (the fullest node that holds it, as in
//! the simulator, so the two make the same decisions); when the ledger refuses that node (CPU,
//! memory, a GPU a slice took), the placement policy looks for any node. A job of one worker is
//! never split between nodes (`worker_gpus` = its GPUs). Slices and CPU-only jobs count as zero
//! whole GPUs in the queue and are placed by the policy, in rank order.
//! A gang (`replicas` > 1) is queued as one job of `replicas` × `gpus` GPUs that may be split
//! only between workers; its workers are placed on the nodes the queue chose, all at once
//! ([`GangPlacement`]), or not at all.
//!
//! *Preemption* ([`super::victims`]): the queue names the running jobs that lost their place;
//! one is stopped only when a job the queue started cannot get its GPUs otherwise, and then
//! [`gantry_core::queue::choose_victims`] picks the fewest, cheapest among them on the nodes the
//! queue chose for it: lowest priority first, least GPU-time lost, never a job of equal or higher
//! priority (a team reclaiming its guarantee may stop another team's borrower of equal
//! priority). Preempting a gang's worker preempts the whole gang.

use std::collections::HashMap;
use std::sync::Arc;

use gantry_core::frag::TypicalPods;
use gantry_core::queue::{self, Decision, QueueWeights, QueuedJob, Usage};
use gantry_core::resources::WHOLE_GPU;
use gantry_core::{Cluster, ModelSet, NodeId, NodeSpec, PolicyKind, Request, SplitMix64};
use gantry_store::{Allocation, GangPlacement, Gpu, GpuHealth, Grant, Job, NodeState, Placement, Team};

use super::elastic::{Elastic, Resize};
use super::victims::Victims;

/// What a pass looks at.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Nodes.
    pub nodes: Vec<gantry_store::Node>,
    /// GPUs.
    pub gpus: Vec<Gpu>,
    /// Held allocations.
    pub held: Vec<Allocation>,
    /// Pending jobs.
    pub pending: Vec<Job>,
    /// Scheduled and running jobs.
    pub active: Vec<Job>,
    /// Quotas.
    pub teams: Vec<Team>,
    /// Node pools an admin set (placement, teams); see [`super::pools`].
    pub pools: Vec<gantry_store::Pool>,
    /// Now, ms.
    pub at: i64,
    /// The queue's weights and the fair-share memory the loop keeps between passes.
    pub queue: QueueInput,
}

/// The queue's state that outlives a pass.
#[derive(Debug, Clone)]
pub struct QueueInput {
    /// Tunables (defaults as in the simulator).
    pub weights: QueueWeights,
    /// Decayed GPU-seconds per team, indexed like `teams`.
    pub usage: Usage,
    /// Team names in `usage`'s index order.
    pub teams: Vec<String>,
    /// Least time between two resizes of an elastic job, ms (`--resize-interval`).
    pub resize_gap_ms: i64,
    /// The width each resized elastic job's resize named, until it is placed again: its next
    /// placement is widened to it (see `super::elastic`).
    pub widths: HashMap<i64, u32>,
    /// For each job asked to stop by a preemption, the job it was preempted for: what it frees
    /// is that job's, not anyone's (see `super::victims`).
    pub preempted_for: HashMap<i64, i64>,
}

impl Default for QueueInput {
    fn default() -> Self {
        // The server holds GPUs free for a blocked gang, so small jobs cannot starve it.
        let weights = QueueWeights { gang_reservation: true, ..QueueWeights::default() };
        Self {
            weights,
            usage: Usage::default(),
            teams: Vec::new(),
            resize_gap_ms: 300_000,
            widths: HashMap::new(),
            preempted_for: HashMap::new(),
        }
    }
}

/// The core's view of the snapshot, and the way back to node ids and GPU uuids.
pub(super) struct Layout<'a> {
    pub(super) cluster: Cluster,
    pub(super) nodes: Vec<&'a gantry_store::Node>,
    gpus: Vec<Vec<&'a Gpu>>,
    index: HashMap<&'a str, usize>,
    /// Which nodes each job's pool and node selector allow, and how its pool places.
    pub(super) pools: super::pools::Pools<'a>,
    pub(super) max_gpu_memory: u64,
    pub(super) next_id: u64,
}

/// A running job the pass asks to stop and requeue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    /// The victim.
    pub job_id: i64,
    /// The job it makes room for.
    pub by: Option<i64>,
    /// Why, in words (`gantry job` shows it).
    pub reason: String,
}

/// What a pass decided.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Placements, in queue order.
    pub placements: Vec<Placement>,
    /// Gangs placed, every worker at once.
    pub gangs: Vec<GangPlacement>,
    /// Why each pending job that was not placed waits.
    pub waiting: Vec<(i64, String)>,
    /// Running jobs to stop and requeue.
    pub preemptions: Vec<Preemption>,
    /// Running elastic jobs to restart at another width.
    pub resizes: Vec<Resize>,
}

/// The queue's input built from a snapshot: jobs (pending first, then active), teams, capacity.
pub(super) struct QueueView<'a> {
    pub(super) jobs: Vec<QueuedJob>,
    pub(super) source: Vec<&'a Job>,
    pub(super) teams: Vec<queue::Team>,
    usage: Usage,
    capacity: Vec<u32>,
    /// Team names in the index order of `teams`.
    pub(super) names: Vec<&'a str>,
    /// Whether each team (same order) may preempt other teams' jobs by priority.
    pub(super) preempts_others: Vec<bool>,
}

/// Decides placements and preemptions. Deterministic for a snapshot and seed.
pub fn plan(s: &Snapshot, kind: PolicyKind, seed: u64) -> Plan {
    let mut layout = Layout::build(s);
    let mut policy = kind.build(Arc::new(typical_pods(s, layout.max_gpu_memory)));
    let mut rng = SplitMix64::new(seed);
    let order: Vec<NodeId> = (0..layout.nodes.len()).collect();
    let mut out = Plan::default();
    let view = QueueView::build(s, &layout, &mut out);
    let (ranked, decisions) =
        queue::plan_ranked(&s.queue.weights, &view.teams, &view.jobs, &view.usage, &view.capacity);
    let mut victims = Victims::new(&view, &ranked, &decisions, &layout, s);
    let mut elastic = Elastic::new(&s.active, &layout, s.at, s.queue.resize_gap_ms);
    let mut reasons = Reasons::default();
    for k in ranked {
        let job = view.source[k];
        match &decisions[k] {
            // A running job that lost its place is only a candidate: it is stopped below when a
            // started job needs its GPUs.
            Decision::Keep { .. } | Decision::Preempt { .. } => {}
            Decision::Wait { .. } => reasons.defer(&mut out, job, layout.request(job), true),
            Decision::Start { nodes, .. } if is_gang(job) => {
                let workers = s.gang_workers(job.id);
                if workers.len() != job.gang.as_ref().map_or(0, |g| g.replicas as usize) {
                    out.waiting.push((job.id, "waiting for its workers to be requeued".into()));
                    continue;
                }
                match super::gang::place(&mut layout, job, &workers, nodes, s.at) {
                    Some(p) => out.gangs.push(p),
                    None if elastic.make_room(job, nodes, &mut layout, &mut out) => {}
                    None => {
                        let need = job.request.gpus * job.gang.as_ref().map_or(1, |g| g.replicas.max(1));
                        let why = to_request(job, layout.max_gpu_memory)
                            .map_or_else(|| "waiting for room".into(), |r| waiting_for(&layout, s, &r, need));
                        victims.make_room(k, nodes, &mut layout, &mut out, why);
                    }
                }
            }
            Decision::Start { nodes, .. } => {
                let Some(req) = layout.request(job) else { continue };
                // The queue's node is the fullest that holds the job: a packing choice.
                let packs = req.placement == gantry_core::Preference::Pack;
                let wanted = (nodes.len() == 1 && req.gpu_milli == WHOLE_GPU && packs).then(|| nodes[0].0);
                let here = wanted.and_then(|node| {
                    let n = layout.cluster.node(node)?;
                    let gpus = n.lowest_idle_gpus(req.gpus)?;
                    Some(gantry_core::Placement { node, gpus })
                });
                let placed = here
                    .filter(|p| layout.cluster.node(p.node).is_some_and(|n| n.fits(&req)))
                    .or_else(|| policy.place(&layout.cluster, &req, &order, &mut rng));
                layout.next_id += 1;
                match placed.filter(|p| layout.cluster.allocate(layout.next_id, &req, p).is_ok()) {
                    Some(p) => {
                        elastic.placed(job, out.placements.len(), layout.next_id);
                        out.placements.push(layout.placement(job, &req, &p, s.at));
                    }
                    None if req.gpu_milli == WHOLE_GPU
                        && req.gpus > 0
                        && elastic.make_room(job, nodes, &mut layout, &mut out) => {}
                    None if req.gpu_milli == WHOLE_GPU && req.gpus > 0 => {
                        let why = layout.why_not(&req);
                        victims.make_room(k, nodes, &mut layout, &mut out, why);
                    }
                    None => reasons.defer(&mut out, job, Some(req), false),
                }
            }
        }
    }
    elastic.grow(&s.pending, &s.queue.widths, &mut layout, &mut out);
    reasons.fill(&layout, s, &mut out);
    out
}

/// Whether the job is a gang (not one of its workers, not a plain job).
pub(super) fn is_gang(job: &Job) -> bool {
    job.gang.as_ref().is_some_and(|g| !g.is_worker())
}

/// Whether the job is a gang's worker.
fn is_worker(job: &Job) -> bool {
    job.gang.as_ref().is_some_and(gantry_store::Gang::is_worker)
}

impl Snapshot {
    /// A gang's workers (pending ones, by rank).
    pub(super) fn gang_workers(&self, gang: i64) -> Vec<&Job> {
        let mut workers: Vec<&Job> = self
            .pending
            .iter()
            .filter(|j| j.gang.as_ref().is_some_and(|g| g.is_worker() && g.id == gang))
            .collect();
        workers.sort_by_key(|j| j.gang.as_ref().and_then(|g| g.rank));
        workers
    }
}

/// Why jobs wait, worked out once the pass has placed what it could: against the ledger as the
/// pass leaves it (what the job waits for now), and once per distinct request, since asking
/// every node for every waiting job is the slowest part of a pass over a long queue.
#[derive(Default)]
struct Reasons {
    /// (index in `Plan::waiting`, request, whether the queue held it back, whole GPUs it needs
    /// at once: a gang's for all its workers).
    deferred: Vec<(usize, Option<Request>, bool, u32)>,
}

impl Reasons {
    fn defer(&mut self, out: &mut Plan, job: &Job, req: Option<Request>, held_back: bool) {
        let replicas = job.gang.as_ref().map_or(1, |g| g.replicas.max(1));
        self.deferred.push((out.waiting.len(), req, held_back, job.request.gpus * replicas));
        out.waiting.push((job.id, String::new()));
    }

    fn fill(self, layout: &Layout<'_>, s: &Snapshot, out: &mut Plan) {
        let room = Room::of(layout);
        // Who holds the GPUs is the same sentence for every waiting job: worked out once.
        let mut holders: Option<String> = None;
        let mut memo: HashMap<(Option<Request>, bool, u32), String> = HashMap::new();
        for (i, req, held_back, need) in self.deferred {
            let reason = memo.entry((req, held_back, need)).or_insert_with(|| match req {
                None => "the request is not valid for the scheduler".into(),
                Some(req)
                    if held_back
                        && need <= room.idle
                        && layout.cluster.nodes().iter().any(|n| n.fits(&req)) =>
                {
                    "waiting: jobs ahead in the queue hold the room (reservation)".into()
                }
                Some(req) if room.held_by_running(&req, need) => {
                    let by = holders.get_or_insert_with(|| held_by(s));
                    format!("waiting: needs {need} GPUs at once, {} idle; the rest are {by}", room.idle)
                }
                Some(req) => layout.why_not(&req),
            });
            out.waiting[i].1.clone_from(reason);
        }
    }
}

/// Whole GPUs idle in the cluster and the most any node has, as a pass leaves them.
struct Room {
    idle: u32,
    largest: u32,
}

impl Room {
    fn of(layout: &Layout<'_>) -> Self {
        let idle = layout.idle_whole_gpus().iter().sum();
        let largest = layout.cluster.nodes().iter().map(|n| n.gpu_free.len() as u32).max().unwrap_or(0);
        Self { idle, largest }
    }

    /// Whether a job asking `req` (`need` whole GPUs at once in all) waits because running jobs
    /// hold the GPUs (rather than for something no node has).
    fn held_by_running(&self, req: &Request, need: u32) -> bool {
        need > self.idle && self.largest >= req.gpus
    }
}

/// Why `job` (asking `req` per worker) could not run even on an empty cluster of these nodes,
/// counting only the nodes whose GPU model it allows; `None` when it could.
/// `usable` remembers, per (models, GPUs of a worker), how many workers the nodes of those
/// models could hold: a pass asks for few combinations, not once per pending job.
fn never_fits(
    layout: &Layout<'_>,
    job: &Job,
    usable: &mut HashMap<(ModelSet, gantry_core::NodeSet, u32), u32>,
) -> Option<String> {
    let limited = layout.pools.limits(job);
    if job.gpu_models.is_empty() && !limited {
        return None;
    }
    // The queue's request knows no models nor pools; the ledger's does.
    let req = layout.request(job)?;
    let per = whole_gpus(&req);
    if per == 0 || (matches!(req.models, ModelSet::Any) && matches!(req.nodes, gantry_core::NodeSet::Any)) {
        return None;
    }
    let workers = job.gang.as_ref().map_or(1, |g| g.replicas.max(1));
    let usable = *usable.entry((req.models, req.nodes, per)).or_insert_with(|| {
        let nodes =
            layout.cluster.nodes().iter().filter(|n| req.models.allows(n.model) && req.nodes.allows(n.tags));
        nodes.map(|n| n.gpu_free.len() as u32 / per).sum()
    });
    (usable < workers).then(|| {
        let need = per * workers;
        if limited {
            format!("waiting: the nodes of its pool (and node selector) hold fewer than the {need} GPUs it needs; it runs once such GPUs join")
        } else {
            format!("waiting: the nodes with a GPU model it allows hold fewer than the {need} GPUs it needs; it runs once such GPUs join")
        }
    })
}

/// Why a job asking `req` (`need` whole GPUs at once in all) waits, said as the pass leaves the
/// ledger: running jobs hold the GPUs (named), or what no node has (the ledger's sentence).
fn waiting_for(layout: &Layout<'_>, s: &Snapshot, req: &Request, need: u32) -> String {
    let room = Room::of(layout);
    if room.held_by_running(req, need) {
        format!("waiting: needs {need} GPUs at once, {} idle; the rest are {}", room.idle, held_by(s))
    } else {
        layout.why_not(req)
    }
}

/// Who holds the GPUs: the running jobs holding the most, named (a gang's workers as their gang),
/// an elastic one at its minimum said so (it will not shrink further).
fn held_by(s: &Snapshot) -> String {
    // (GPUs held, elastic at its minimum) per job.
    let mut held: HashMap<i64, (usize, bool)> = HashMap::new();
    for j in s.active.iter().filter(|j| !j.gpu_uuids.is_empty()) {
        let id = j.gang.as_ref().filter(|g| g.is_worker()).map_or(j.id, |g| g.id);
        let at_min = j.request.is_elastic() && j.gpu_uuids.len() as u32 <= j.request.gpus;
        let entry = held.entry(id).or_default();
        entry.0 += j.gpu_uuids.len();
        entry.1 |= at_min;
    }
    let mut holders: Vec<(i64, (usize, bool))> = held.into_iter().collect();
    holders.sort_by_key(|(id, (gpus, _))| (std::cmp::Reverse(*gpus), *id));
    let named: Vec<String> = holders
        .iter()
        .take(3)
        .map(|(id, (gpus, at_min))| {
            let how = if *at_min { ", elastic at its minimum" } else { "" };
            format!("job {id} ({gpus} GPUs{how})")
        })
        .collect();
    let more = holders.len().saturating_sub(named.len());
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    if named.is_empty() {
        "held by jobs starting or stopping".to_owned()
    } else {
        format!("held by running {}{more}", named.join(", "))
    }
}

/// The typical-pod set behind the policy's scores: the queue is a small sample of the workload,
/// so as many whole-GPU requests are mixed in, and an idle GPU keeps its value and slices pack
/// onto GPUs already in use instead of opening new ones.
pub(super) fn typical_pods(s: &Snapshot, max_gpu_memory: u64) -> TypicalPods {
    let mut requests: Vec<Request> =
        s.pending.iter().chain(&s.active).filter_map(|j| to_request(j, max_gpu_memory)).collect();
    let whole = Request::new(0, 0, 1, WHOLE_GPU, 0, ModelSet::Any).expect("one whole GPU is a valid request");
    requests.extend(std::iter::repeat_n(whole, requests.len().max(1)));
    TypicalPods::from_requests(&requests, 0.95)
}

impl<'a> QueueView<'a> {
    fn build(s: &'a Snapshot, layout: &Layout<'a>, out: &mut Plan) -> Self {
        let mut names: Vec<&str> = s.queue.teams.iter().map(String::as_str).collect();
        let mut team_index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let mut index_of = |team: &'a str| {
            *team_index.entry(team).or_insert_with(|| {
                names.push(team);
                names.len() - 1
            })
        };
        let largest = layout.cluster.nodes().iter().map(|n| n.gpu_free.len() as u32).max().unwrap_or(0);
        let mut view = QueueView {
            jobs: Vec::with_capacity(s.pending.len() + s.active.len()),
            source: Vec::with_capacity(s.pending.len() + s.active.len()),
            teams: Vec::new(),
            usage: s.queue.usage.clone(),
            capacity: layout.idle_whole_gpus(),
            names: Vec::new(),
            preempts_others: Vec::new(),
        };
        let secs = |ms: i64| ms as f64 / 1000.0;
        let mut usable = HashMap::new();
        for job in s.pending.iter().filter(|j| !is_worker(j)) {
            let Some(req) = to_request(job, layout.max_gpu_memory) else {
                out.waiting.push((job.id, "the request is not valid for the scheduler".into()));
                continue;
            };
            if whole_gpus(&req) > largest {
                out.waiting.push((job.id, layout.why_not(&req)));
                continue;
            }
            // The queue counts GPUs, not models: a job no set of nodes of its GPU models could
            // ever hold would keep a reservation on GPUs it cannot use. It waits outside the queue.
            if let Some(why) = never_fits(layout, job, &mut usable) {
                out.waiting.push((job.id, why));
                continue;
            }
            if let Some(why) = layout.pools.refuses(job) {
                out.waiting.push((job.id, why));
                continue;
            }
            view.push(job, index_of(&job.team), &req, Vec::new(), secs(s.at - job.submitted_at));
        }
        // A gang holds what its workers hold.
        let mut gang_held: HashMap<i64, Vec<(usize, u32)>> = HashMap::new();
        for w in s.active.iter().filter(|j| is_worker(j)) {
            let (Some(gang), Some(node)) = (
                w.gang.as_ref().map(|g| g.id),
                w.node_id.as_deref().and_then(|n| layout.index.get(n).copied()),
            ) else {
                continue;
            };
            view.capacity[node] += w.request.gpus;
            let parts = gang_held.entry(gang).or_default();
            match parts.iter_mut().find(|(n, _)| *n == node) {
                Some((_, held)) => *held += w.request.gpus,
                None => parts.push((node, w.request.gpus)),
            }
        }
        for job in s.active.iter().filter(|j| is_gang(j)) {
            let Some(req) = to_request(job, layout.max_gpu_memory) else { continue };
            let held = gang_held.remove(&job.id).unwrap_or_default();
            let waited = secs(job.started_at.unwrap_or(s.at) - job.submitted_at);
            view.push(job, index_of(&job.team), &req, held, waited);
        }
        for job in s.active.iter().filter(|j| j.gang.is_none()) {
            let (Some(req), Some(node)) = (
                to_request(job, layout.max_gpu_memory),
                job.node_id.as_deref().and_then(|n| layout.index.get(n).copied()),
            ) else {
                continue;
            };
            let gpus = whole_gpus(&req);
            // An elastic job is held at its minimum: what it runs on above that counts as free.
            view.capacity[node] += super::elastic::held(job, gpus);
            let waited = secs(job.started_at.unwrap_or(s.at) - job.submitted_at);
            view.push(job, index_of(&job.team), &req, vec![(node, gpus)], waited);
        }
        let quotas: HashMap<&str, u32> =
            s.teams.iter().filter_map(|t| Some((t.name.as_str(), t.gpu_quota?))).collect();
        view.teams = names
            .iter()
            .map(|n| queue::Team { guaranteed_gpus: quotas.get(n).copied().unwrap_or(0), weight: 1.0 })
            .collect();
        let preempting: std::collections::HashSet<&str> =
            s.teams.iter().filter(|t| t.preempts_other_teams()).map(|t| t.name.as_str()).collect();
        view.preempts_others = names.iter().map(|n| preempting.contains(n)).collect();
        view.names = names;
        view
    }

    fn push(&mut self, job: &'a Job, team: usize, req: &Request, held: Vec<(usize, u32)>, waited_s: f64) {
        // A plain job runs on one node; a gang splits only between its workers.
        let replicas = job.gang.as_ref().map_or(1, |g| g.replicas.max(1));
        self.jobs.push(QueuedJob {
            id: self.jobs.len() as u64,
            team,
            priority: job.priority,
            submitted_s: job.submitted_at as f64 / 1000.0,
            gpus: whole_gpus(req) * replicas,
            worker_gpus: whole_gpus(req),
            attained_gpu_s: 0.0,
            waited_s: waited_s.max(0.0),
            held,
            preemptible: true,
        });
        self.source.push(job);
    }
}

/// Whole GPUs a request takes from the queue's budget (a slice or CPU-only job: none).
fn whole_gpus(req: &Request) -> u32 {
    if req.gpu_milli == WHOLE_GPU { req.gpus } else { 0 }
}

/// The core request for a job: whole GPUs, a slice sized by memory (and compute when given), or
/// CPU only.
pub(super) fn to_request(job: &Job, max_gpu_memory: u64) -> Option<Request> {
    let r = &job.request;
    let result = if r.gpus > 0 {
        Request::new(r.cpu_milli, r.memory_mib, r.gpus, WHOLE_GPU, 0, ModelSet::Any)
    } else if r.gpu_memory_mib > 0 {
        let by_memory = (r.gpu_memory_mib * u64::from(WHOLE_GPU)).div_ceil(max_gpu_memory.max(1));
        let by_compute = u64::from(r.gpu_compute_pct) * 10;
        let share = by_memory.max(by_compute).clamp(1, u64::from(WHOLE_GPU)) as u32;
        Request::new(r.cpu_milli, r.memory_mib, 1, share, r.gpu_memory_mib, ModelSet::Any)
    } else {
        Ok(Request::cpu_only(r.cpu_milli, r.memory_mib))
    };
    result.ok()
}

impl<'a> Layout<'a> {
    /// The index of the node an active job is placed on.
    pub(super) fn node_of(&self, job: &Job) -> Option<usize> {
        job.node_id.as_deref().and_then(|n| self.index.get(n).copied())
    }

    /// The core request for a job, limited to the GPU models it accepts.
    pub(super) fn request(&self, job: &Job) -> Option<Request> {
        let mut req = to_request(job, self.max_gpu_memory)?;
        if req.gpus > 0 {
            req.models = self.cluster.matching_models(&job.gpu_models);
        }
        (req.nodes, req.placement) = self.pools.of(job);
        Some(req)
    }

    pub(super) fn build(s: &'a Snapshot) -> Self {
        let mut layout = Layout {
            cluster: Cluster::default(),
            nodes: Vec::new(),
            gpus: Vec::new(),
            index: HashMap::new(),
            pools: Default::default(),
            max_gpu_memory: s.gpus.iter().map(|g| g.info.memory_mib).max().unwrap_or(0),
            next_id: 0,
        };
        let mut by_node: HashMap<&str, Vec<&Gpu>> = HashMap::new();
        for g in &s.gpus {
            by_node.entry(g.node_id.as_str()).or_default().push(g);
        }
        for node in &s.nodes {
            let mut gpus: Vec<&Gpu> = by_node.remove(node.id.as_str()).unwrap_or_default();
            gpus.sort_by_key(|g| g.info.index);
            let spec = NodeSpec {
                name: node.id.clone(),
                cpu_milli: node.cpu_milli,
                memory_mib: node.memory_mib,
                gpus: gpus.len() as u32,
                gpu_model: gpus.first().map(|g| g.info.model.clone()),
                gpu_memory_mib: gpus.iter().map(|g| g.info.memory_mib).min().unwrap_or(0),
            };
            let Ok(id) = layout.cluster.add_node(spec) else {
                continue;
            };
            // Cordoned and draining nodes keep what they hold and take nothing new.
            if node.state != NodeState::Ready || node.scheduling != gantry_store::NodeScheduling::Schedulable
            {
                let _ = layout.cluster.set_schedulable(id, false);
            }
            layout.index.insert(node.id.as_str(), layout.nodes.len());
            layout.nodes.push(node);
            layout.gpus.push(gpus);
        }
        layout.pools = super::pools::Pools::build(s, &layout.nodes, &layout.gpus, &mut layout.cluster);
        layout.replay(s);
        layout.block_unhealthy();
        layout
    }

    /// Puts held allocations back on the ledger, one per job.
    fn replay(&mut self, s: &Snapshot) {
        let mut by_job: HashMap<i64, Vec<&Allocation>> = HashMap::new();
        for a in &s.held {
            by_job.entry(a.job_id).or_default().push(a);
        }
        for job in &s.active {
            let Some(allocs) = by_job.get(&job.id) else {
                continue;
            };
            let Some(node) = job.node_id.as_deref().and_then(|n| self.index.get(n).copied()) else {
                continue;
            };
            let indices: Vec<u32> = allocs
                .iter()
                .filter_map(|a| self.gpus[node].iter().position(|g| g.info.uuid == a.gpu_uuid))
                .map(|i| i as u32)
                .collect();
            let share = allocs.iter().map(|a| a.share_milli).max().unwrap_or(WHOLE_GPU).clamp(1, WHOLE_GPU);
            let memory =
                if share < WHOLE_GPU { allocs.iter().map(|a| a.memory_mib).max().unwrap_or(0) } else { 0 };
            let r = &job.request;
            let Ok(req) =
                Request::new(r.cpu_milli, r.memory_mib, indices.len() as u32, share, memory, ModelSet::Any)
            else {
                continue;
            };
            self.next_id += 1;
            let placement = gantry_core::Placement { node, gpus: indices };
            if let Err(e) = self.cluster.allocate(self.next_id, &req, &placement) {
                tracing::warn!(job = job.id, error = %e, "held allocation does not fit the ledger");
            }
        }
    }

    /// Fills whatever is free on a GPU that is not healthy, so nothing new lands there.
    fn block_unhealthy(&mut self) {
        for node in 0..self.nodes.len() {
            for (i, gpu) in self.gpus[node].iter().enumerate() {
                if gpu.health == GpuHealth::Healthy {
                    continue;
                }
                let Some(n) = self.cluster.node(node) else {
                    continue;
                };
                let (free, memory) = (n.gpu_free[i], n.gpu_memory_free[i]);
                let Ok(req) = Request::new(0, 0, 1, free, memory, ModelSet::Any) else {
                    continue;
                };
                self.next_id += 1;
                let _ = self.cluster.allocate(
                    self.next_id,
                    &req,
                    &gantry_core::Placement { node, gpus: vec![i as u32] },
                );
            }
        }
    }

    /// Per node, GPUs wholly idle on a schedulable node (what the queue may hand out).
    fn idle_whole_gpus(&self) -> Vec<u32> {
        self.cluster
            .nodes()
            .iter()
            .map(|n| {
                if n.schedulable { n.gpu_free.iter().filter(|f| **f == WHOLE_GPU).count() as u32 } else { 0 }
            })
            .collect()
    }

    /// Why no node takes the request right now.
    pub(super) fn why_not(&self, req: &Request) -> String {
        let nodes = self.cluster.nodes();
        if nodes.is_empty() {
            return "waiting for a node to join".into();
        }
        let (most_gpus, most_cpu) =
            nodes.iter().fold((0, 0), |(g, c), n| (g.max(n.gpu_free.len() as u32), c.max(n.spec.cpu_milli)));
        if req.gpus > most_gpus {
            return format!("waiting: no node has {} free GPUs (the most any has is {most_gpus})", req.gpus);
        }
        if req.cpu_milli > most_cpu {
            let (asked, most) = (cores(req.cpu_milli), cores(most_cpu));
            return format!("waiting: no node has {asked} CPU cores (the largest has {most})");
        }
        // A node outside the job's pool says nothing about what the job waits for.
        let mine: Vec<&gantry_core::Node> = nodes.iter().filter(|n| req.nodes.allows(n.tags)).collect();
        if mine.is_empty() {
            return "waiting: no node is in its pool and matches its node selector".into();
        }
        match mine.iter().find_map(|n| n.why_not(req)) {
            Some(why) if mine.len() == 1 => format!("waiting: {why}"),
            Some(why) => format!("waiting: no node fits (e.g. {why})"),
            None => "waiting for room".into(),
        }
    }

    pub(super) fn placement(
        &self,
        job: &Job,
        req: &Request,
        p: &gantry_core::Placement,
        at: i64,
    ) -> Placement {
        let node = self.nodes[p.node];
        let grants = p
            .gpus
            .iter()
            .filter_map(|i| self.gpus[p.node].get(*i as usize))
            .map(|g| Grant {
                uuid: g.info.uuid.clone(),
                share_milli: req.gpu_milli,
                memory_mib: if req.gpu_milli < WHOLE_GPU { req.gpu_memory_mib } else { g.info.memory_mib },
            })
            .collect();
        Placement { job_id: job.id, node_id: node.id.clone(), epoch: node.epoch, grants, at }
    }
}

/// Milli-cores as cores, the unit users type (`--cpu 1.5`).
fn cores(milli: u64) -> String {
    let text = format!("{:.3}", milli as f64 / 1000.0);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}
