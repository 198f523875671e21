//! The core's ledger built from a snapshot ([`Layout::build`]: nodes, held allocations replayed,
//! unhealthy GPUs blocked), the request each job asks of it, and the way back from ledger
//! indices to node ids and GPU uuids.

use std::collections::HashMap;

use gantry_api::model::{Gpu, GpuHealth, Job, NodeState};

use super::decision::{Grant, Place};
use super::snapshot::Snapshot;
use crate::frag::TypicalPods;
use crate::resources::WHOLE_GPU;
use crate::{Cluster, ModelSet, NodeSpec, Request};

/// The core's view of the snapshot, and the way back to node ids and GPU uuids.
pub(super) struct Layout<'a> {
    pub(super) cluster: Cluster,
    pub(super) nodes: Vec<&'a gantry_api::model::Node>,
    pub(super) gpus: Vec<Vec<&'a Gpu>>,
    pub(super) index: HashMap<&'a str, usize>,
    /// Which nodes each job's pool and node selector allow, and how its pool places.
    pub(super) pools: super::pools::Pools<'a>,
    pub(super) max_gpu_memory: u64,
    pub(super) next_id: u64,
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

/// Whole GPUs a request takes from the queue's budget (a slice or CPU-only job: none).
pub(super) fn whole_gpus(req: &Request) -> u32 {
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
            if node.state != NodeState::Ready
                || node.scheduling != gantry_api::model::NodeScheduling::Schedulable
            {
                let _ = layout.cluster.set_schedulable(id, false);
            }
            layout.index.insert(node.id.as_str(), layout.nodes.len());
            layout.nodes.push(node);
            layout.gpus.push(gpus);
        }
        layout.pools = super::pools::Pools::build(s, &layout.nodes, &layout.gpus, &mut layout.cluster);
        layout.replay(s);
        super::lend::replay(&mut layout, s);
        layout.block_unhealthy();
        layout
    }

    /// Puts held allocations back on the ledger, one per job.
    fn replay(&mut self, s: &Snapshot) {
        let mut by_job: HashMap<i64, Vec<&super::snapshot::Held>> = HashMap::new();
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
            let placement = crate::Placement { node, gpus: indices };
            // An allocation the ledger refuses (it names a GPU the node no longer reports) is not
            // replayed: nothing else can be placed on a GPU that is not there.
            let _ = self.cluster.allocate(self.next_id, &req, &placement);
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
                    &crate::Placement { node, gpus: vec![i as u32] },
                );
            }
        }
    }

    /// Per node, GPUs wholly idle on a schedulable node (what the queue may hand out).
    pub(super) fn idle_whole_gpus(&self) -> Vec<u32> {
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
        let mine: Vec<&crate::Node> = nodes.iter().filter(|n| req.nodes.allows(n.tags)).collect();
        if mine.is_empty() {
            return "waiting: no node is in its pool and matches its node selector".into();
        }
        match mine.iter().find_map(|n| n.why_not(req)) {
            Some(why) if mine.len() == 1 => format!("waiting: {why}"),
            Some(why) => format!("waiting: no node fits (e.g. {why})"),
            None => "waiting for room".into(),
        }
    }

    pub(super) fn placement(&self, job: &Job, req: &Request, p: &crate::Placement, at: i64) -> Place {
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
        Place { job_id: job.id, node_id: node.id.clone(), epoch: node.epoch, grants, at }
    }
}

/// Milli-cores as cores, the unit users type (`--cpu 1.5`).
fn cores(milli: u64) -> String {
    let text = format!("{:.3}", milli as f64 / 1000.0);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}
