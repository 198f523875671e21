//! The pass the queue replaced, kept as the benchmark's baseline: pending jobs in priority order,
//! then submission order, each placed where the policy says; a team over its quota is skipped
//! while other teams wait; smaller jobs fill gaps a blocked job leaves (no reservation).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::resources::WHOLE_GPU;
use crate::{NodeId, PolicyKind, RandomSource};
use gantry_api::model::Job;

use super::decision::Plan;
use super::layout::{Layout, to_request, typical_pods};
use super::snapshot::Snapshot;

/// Priority-then-FIFO placement with `kind` (the benchmark runs it with `bestfit`).
pub fn plan_priority_fifo(s: &Snapshot, kind: PolicyKind, rng: &mut dyn RandomSource) -> Plan {
    let kept = super::standing::Standing::build(s);
    let mut layout = Layout::on(&kept, s);
    let mut policy = kind.build(Arc::new(typical_pods(s, layout.max_gpu_memory)));
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
        let placed = policy.place(&layout.cluster, &req, &order, rng);
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
