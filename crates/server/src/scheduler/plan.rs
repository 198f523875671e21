//! Planning a scheduling pass: a pure function from a snapshot to placements, on the core's
//! ledger and policies. Pending jobs go in priority order, then submission order; a team over
//! its quota is skipped while other teams wait; smaller jobs may fill gaps a blocked job leaves.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use gantry_core::frag::TypicalPods;
use gantry_core::resources::WHOLE_GPU;
use gantry_core::{Cluster, ModelSet, NodeId, NodeSpec, PolicyKind, Request, SplitMix64};
use gantry_store::{Allocation, Gpu, GpuHealth, Grant, Job, NodeState, Placement, Team};

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
    /// Now, ms.
    pub at: i64,
}

/// The core's view of the snapshot, and the way back to node ids and GPU uuids.
struct Layout<'a> {
    cluster: Cluster,
    nodes: Vec<&'a gantry_store::Node>,
    gpus: Vec<Vec<&'a Gpu>>,
    max_gpu_memory: u64,
    next_id: u64,
}

/// What a pass decided.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Placements, in queue order.
    pub placements: Vec<Placement>,
    /// Why each pending job that was not placed waits.
    pub waiting: Vec<(i64, String)>,
}

/// Decides placements for pending jobs. Deterministic for a snapshot and seed.
pub fn plan(s: &Snapshot, kind: PolicyKind, seed: u64) -> Plan {
    let mut layout = Layout::build(s);
    let mut requests: Vec<Request> =
        s.pending.iter().chain(&s.active).filter_map(|j| to_request(j, layout.max_gpu_memory)).collect();
    // The queue is a small sample of the workload: mix in as many whole-GPU requests, so an idle
    // GPU keeps its value and slices pack onto GPUs already in use instead of opening new ones.
    let whole = Request::new(0, 0, 1, WHOLE_GPU, 0, ModelSet::Any).expect("one whole GPU is a valid request");
    requests.extend(std::iter::repeat_n(whole, requests.len().max(1)));
    let mut policy = kind.build(Arc::new(TypicalPods::from_requests(&requests, 0.95)));
    let mut rng = SplitMix64::new(seed);
    let order: Vec<NodeId> = (0..layout.nodes.len()).collect();
    let quotas: HashMap<&str, u64> = s
        .teams
        .iter()
        .filter_map(|t| Some((t.name.as_str(), u64::from(t.gpu_quota?) * u64::from(WHOLE_GPU))))
        .collect();
    let mut usage: HashMap<&str, u64> = HashMap::new();
    for job in &s.active {
        let milli = to_request(job, layout.max_gpu_memory).map_or(0, |r| r.gpu_milli_total());
        *usage.entry(job.team.as_str()).or_default() += milli;
    }
    let waiting: HashSet<&str> = s.pending.iter().map(|j| j.team.as_str()).collect();
    let mut queue: Vec<&Job> = s.pending.iter().collect();
    queue.sort_by_key(|j| (-i64::from(j.priority), j.id));
    let mut out = Plan::default();
    for job in queue {
        let Some(req) = to_request(job, layout.max_gpu_memory) else {
            out.waiting.push((job.id, "the request is not valid for the scheduler".into()));
            continue;
        };
        let used = usage.get(job.team.as_str()).copied().unwrap_or(0);
        let over = quotas.get(job.team.as_str()).is_some_and(|q| used + req.gpu_milli_total() > *q);
        if over && waiting.iter().any(|t| *t != job.team) {
            out.waiting.push((job.id, format!("team {} is at its GPU quota while others wait", job.team)));
            continue;
        }
        let placed = policy.place(&layout.cluster, &req, &order, &mut rng);
        layout.next_id += 1;
        let Some(p) = placed.filter(|p| layout.cluster.allocate(layout.next_id, &req, p).is_ok()) else {
            out.waiting.push((job.id, layout.why_not(&req)));
            continue;
        };
        *usage.entry(job.team.as_str()).or_default() += req.gpu_milli_total();
        out.placements.push(layout.placement(job, &req, &p, s.at));
    }
    out
}

/// The core request for a job: whole GPUs, a slice sized by memory (and compute when given), or
/// CPU only.
fn to_request(job: &Job, max_gpu_memory: u64) -> Option<Request> {
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
    fn build(s: &'a Snapshot) -> Self {
        let mut layout = Layout {
            cluster: Cluster::default(),
            nodes: Vec::new(),
            gpus: Vec::new(),
            max_gpu_memory: s.gpus.iter().map(|g| g.info.memory_mib).max().unwrap_or(0),
            next_id: 0,
        };
        for node in &s.nodes {
            let mut gpus: Vec<&Gpu> = s.gpus.iter().filter(|g| g.node_id == node.id).collect();
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
            if node.state != NodeState::Ready {
                let _ = layout.cluster.set_schedulable(id, false);
            }
            layout.nodes.push(node);
            layout.gpus.push(gpus);
        }
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
            let Some(node) = self.nodes.iter().position(|n| Some(&n.id) == job.node_id.as_ref()) else {
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

    /// Why no node takes the request right now.
    fn why_not(&self, req: &Request) -> String {
        let nodes = self.cluster.nodes();
        if nodes.is_empty() {
            return "waiting for a node to join".into();
        }
        let (most_gpus, most_cpu) =
            nodes.iter().fold((0, 0), |(g, c), n| (g.max(n.gpu_free.len() as u32), c.max(n.spec.cpu_milli)));
        if req.gpus > most_gpus {
            return format!("waiting: no node has {} GPUs (the largest has {most_gpus})", req.gpus);
        }
        if req.cpu_milli > most_cpu {
            return format!("waiting: no node has {} milli-CPU (the largest has {most_cpu})", req.cpu_milli);
        }
        match nodes.iter().find_map(|n| n.why_not(req)) {
            Some(why) if nodes.len() == 1 => format!("waiting: {why}"),
            Some(why) => format!("waiting: no node fits (e.g. {why})"),
            None => "waiting for room".into(),
        }
    }

    fn placement(&self, job: &Job, req: &Request, p: &gantry_core::Placement, at: i64) -> Placement {
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
