//! A pass's copy of the kept ledger ([`Layout::on`] a [`Standing`]: nodes, held allocations
//! replayed, unhealthy GPUs blocked, tagged with the pass's node selectors), the request each
//! job asks of it, and the way back from ledger indices to node ids and GPU uuids.

use std::collections::HashMap;

use gantry_api::model::{Gpu, Job};

use super::decision::{Grant, Place};
use super::snapshot::Snapshot;
use super::standing::Standing;
use crate::frag::TypicalPods;
use crate::resources::WHOLE_GPU;
use crate::{Cluster, ModelSet, Request};

/// The pass's ledger, and the way back to node ids and GPU uuids.
pub(super) struct Layout<'a> {
    /// A copy of the kept ledger: the pass's tentative placements go here.
    pub(super) cluster: Cluster,
    pub(super) nodes: &'a [gantry_api::model::Node],
    pub(super) gpus: &'a [Vec<Gpu>],
    pub(super) index: &'a HashMap<String, usize>,
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

    /// The pass's ledger over `kept` (the ledger of `s`'s cluster and active jobs), tagged with
    /// the node selectors of `s`'s jobs, with the GPUs idle jobs lent (read every pass).
    pub(super) fn on(kept: &'a Standing, s: &'a Snapshot) -> Self {
        let mut cluster = kept.cluster.clone();
        let pools = super::pools::Pools::build(s, &kept.labels, &mut cluster);
        let mut layout = Layout {
            cluster,
            nodes: &kept.nodes,
            gpus: &kept.gpus,
            index: &kept.index,
            pools,
            max_gpu_memory: kept.max_gpu_memory,
            next_id: kept.next_id,
        };
        super::lend::replay(&mut layout, s);
        layout
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
        let node = &self.nodes[p.node];
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
