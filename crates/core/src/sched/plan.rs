//! Planning a scheduling pass: a pure function from a snapshot to decisions, on the core's
//! queue and ledger.
//!
//! *Who* runs is [`crate::queue::plan_ranked`]: team guarantees (a team's `gpu_quota` is the
//! GPUs it is guaranteed; idle GPUs may be borrowed and are reclaimed when the owner returns),
//! priority raised by aging, attained-service bands, fair share from decayed usage, FIFO,
//! backfill that cannot delay the head, and preemption of lower-ranked running jobs. Only jobs
//! that checkpoint (`QueueInput::checkpointing`: the job simulator's) are demoted by attained
//! service; the server's jobs do not say they checkpoint, so they sit in band 0.
//!
//! *Where*: a whole-GPU job goes where the queue placed it (the fullest node that holds it, as in
//! the simulator, so the two make the same decisions); when the ledger refuses that node (CPU,
//! memory, a GPU a slice took), the placement policy looks for any node. A job of one worker is
//! never split between nodes (`worker_gpus` = its GPUs). Slices and CPU-only jobs count as zero
//! whole GPUs in the queue and are placed by the policy, in rank order.
//! A gang (`replicas` > 1) is queued as one job of `replicas` × `gpus` GPUs that may be split
//! only between workers; its workers are placed on the nodes the queue chose, all at once
//! ([`super::GangPlace`]), or not at all.
//!
//! *Preemption* ([`super::victims`]): the queue names the running jobs that lost their place;
//! one is stopped only when a job the queue started cannot get its GPUs otherwise, and then
//! [`crate::queue::choose_victims`] picks the fewest, cheapest among them on the nodes the
//! queue chose for it: lowest priority first, least GPU-time lost, never a job of equal or higher
//! priority (a team reclaiming its guarantee may stop another team's borrower of equal
//! priority). Preempting a gang's worker preempts the whole gang.

use std::borrow::Cow;
use std::sync::Arc;

use gantry_api::model::Job;

use super::decision::Plan;
use super::elastic::Elastic;
use super::gates::gate;
use super::layout::{Layout, to_request, typical_pods};
use super::locality::Prefer;
use super::reasons::{Reasons, waiting_for};
use super::service::Spread;
use super::snapshot::Snapshot;
use super::stage::{GangStep, Step};
use super::standing::Standing;
use super::victims::Victims;
use super::view::QueueView;
use crate::queue::{self, Decision};
use crate::resources::WHOLE_GPU;
use crate::{NodeId, PolicyKind, RandomSource};

/// Every decision of one pass over `s` with placement policy `kind`: dependencies failed,
/// placements, gangs, preemptions (with their victims), resizes, and why each other pending
/// job waits, in the order they are carried out. Deterministic for a snapshot and random
/// stream.
pub fn plan(s: &Snapshot, kind: PolicyKind, rng: &mut dyn RandomSource) -> Vec<super::Decision> {
    plan_grouped(s, kind, rng).into_decisions()
}

/// [`plan`]'s decisions grouped by kind.
pub fn plan_grouped(s: &Snapshot, kind: PolicyKind, rng: &mut dyn RandomSource) -> Plan {
    plan_grouped_on(s, &Standing::build(s), kind, rng)
}

/// [`plan`] on a ledger the caller keeps between passes: `kept` must equal
/// [`Standing::build`]`(s)` (the caller follows the change log, see [`Standing::apply`]); the
/// decisions are then [`plan`]'s, without rebuilding the ledger from `s`'s rows.
pub fn plan_on(
    s: &Snapshot,
    kept: &Standing,
    kind: PolicyKind,
    rng: &mut dyn RandomSource,
) -> Vec<super::Decision> {
    plan_grouped_on(s, kept, kind, rng).into_decisions()
}

/// [`plan_on`]'s decisions grouped by kind.
pub fn plan_grouped_on(s: &Snapshot, kept: &Standing, kind: PolicyKind, rng: &mut dyn RandomSource) -> Plan {
    // Dependencies and array limits keep jobs out before the queue ranks them.
    let gated = gate(&s.pending, &s.active, &s.deps);
    let input = if s.pending.iter().any(|j| gated.stops(j.id)) {
        let mut copy = s.clone();
        copy.pending.retain(|j| !gated.stops(j.id));
        Cow::Owned(copy)
    } else {
        Cow::Borrowed(s)
    };
    let mut out = pass(&input, kept, kind, rng);
    out.failed = gated.failed;
    out.waiting.extend(gated.held);
    out
}

/// One pass over the jobs the gate let through.
fn pass(s: &Snapshot, kept: &Standing, kind: PolicyKind, rng: &mut dyn RandomSource) -> Plan {
    let mut layout = Layout::on(kept, s);
    let mut policy = kind.build(Arc::new(typical_pods(s, layout.max_gpu_memory)));
    let order: Vec<NodeId> = (0..layout.nodes.len()).collect();
    let mut out = Plan::default();
    let view = QueueView::build(s, &layout, &mut out);
    let (ranked, decisions) =
        queue::plan_ranked(&s.queue.weights, &view.teams, &view.jobs, &view.usage, &view.capacity);
    let mut victims = Victims::new(&view, &ranked, &decisions, &layout, s);
    let mut elastic = Elastic::new(&s.active, &layout, s.at, s.queue.resize_gap_ms);
    let mut reasons = Reasons::default();
    let mut spread = Spread::new(s, &layout);
    let data = super::locality::Data::new(s, &layout);
    for k in ranked {
        let job = view.source[k];
        match &decisions[k] {
            // A running job that lost its place is only a candidate: it is stopped below when a
            // started job needs its GPUs.
            Decision::Keep { .. } | Decision::Preempt { .. } => {}
            Decision::Wait { .. } => {
                reasons.defer(&mut out, job, layout.request(job), true);
                if super::stage::step(job, s, &layout) == Step::Stage {
                    stage_ahead(&data, &layout, job, &mut out);
                }
            }
            Decision::Start { nodes, .. } if is_gang(job) => {
                let workers = s.gang_workers(job.id);
                if workers.len() != job.gang.as_ref().map_or(0, |g| g.replicas as usize) {
                    out.waiting.push((job.id, "waiting for its workers to be requeued".into()));
                    continue;
                }
                let per = layout.request(job).map_or(1, |r| r.gpus.max(1));
                let replicas = job.gang.as_ref().map_or(1, |g| g.replicas);
                let step = super::stage::gang_step(job, &workers, per, s, &layout);
                let parts = match &step {
                    GangStep::Wait(reason) => {
                        out.waiting.push((job.id, reason.clone()));
                        continue;
                    }
                    GangStep::Only(only) => super::stage::parts_on(only, replicas, per, &layout),
                    GangStep::Place | GangStep::Stage => Some(nodes.clone()),
                };
                let placed =
                    parts.and_then(|parts| super::gang::place(&mut layout, job, &workers, &parts, s.at));
                match placed {
                    Some(p) if step == GangStep::Stage => {
                        let stages = super::stage::gang_stages(&p);
                        let on: Vec<&str> = stages.iter().map(|st| st.node_id.as_str()).collect();
                        out.waiting.push((job.id, super::stage::staging_on(job, &on.join(", "))));
                        out.stages.extend(stages);
                    }
                    Some(p) => out.gangs.push(p),
                    None if let GangStep::Only(only) = &step => {
                        let on: Vec<&str> = only.iter().map(|&n| layout.nodes[n].id.as_str()).collect();
                        out.waiting.push((job.id, super::stage::no_room(&on.join(", "))));
                    }
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
                let mut step = super::stage::step(job, s, &layout);
                if let Step::Wait(reason) = step {
                    out.waiting.push((job.id, reason));
                    continue;
                }
                // The data's preference (`super::locality`): among the nodes that save the most
                // copying, or waiting for one whose saving is worth the wait.
                let mut only = None;
                if let Step::Only(node) = step
                    && !layout.cluster.node(node).is_some_and(|n| n.fits(&req))
                {
                    let instead = data.instead_of(&layout, job, &req, node);
                    if !instead.is_empty() {
                        (step, only) = (Step::Stage, Some(instead));
                    }
                }
                match step {
                    Step::Only(node) => only = Some(vec![node]),
                    Step::Stage if only.is_none() => match data.prefer(&layout, job, &req) {
                        Some(Prefer::Among(nodes)) => only = Some(nodes),
                        Some(Prefer::WaitFor(node)) => {
                            let node_id = layout.nodes[node].id.clone();
                            out.waiting.push((job.id, super::stage::waits_for(&node_id)));
                            out.stages.push(super::Stage { job_id: job.id, node_id, at: s.at, ahead: false });
                            continue;
                        }
                        None => {}
                    },
                    _ => {}
                }
                // A service's replica is scored only on the nodes holding the fewest of its
                // siblings (`super::service`); the queue's node is kept when it is one of them.
                let service = s.service(job.id);
                let siblings = service.and_then(|svc| spread.nodes_for(svc, &layout.cluster, &req));
                let few = match (only, siblings) {
                    (Some(only), Some(siblings)) if only.iter().any(|n| siblings.contains(n)) => {
                        Some(only.into_iter().filter(|n| siblings.contains(n)).collect())
                    }
                    (only, siblings) => only.or(siblings),
                };
                // The queue's node is the fullest that holds the job: a packing choice.
                let packs = req.placement == crate::Preference::Pack;
                let wanted = (nodes.len() == 1 && req.gpu_milli == WHOLE_GPU && packs)
                    .then(|| nodes[0].0)
                    .filter(|n| few.as_ref().is_none_or(|few| few.contains(n)));
                let here = wanted.and_then(|node| {
                    let n = layout.cluster.node(node)?;
                    let gpus = n.lowest_idle_gpus(req.gpus)?;
                    Some(crate::Placement { node, gpus })
                });
                let placed = here
                    .filter(|p| layout.cluster.node(p.node).is_some_and(|n| n.fits(&req)))
                    .or_else(|| policy.place(&layout.cluster, &req, few.as_deref().unwrap_or(&order), rng));
                layout.next_id += 1;
                match placed.filter(|p| layout.cluster.allocate(layout.next_id, &req, p).is_ok()) {
                    Some(p) if step == Step::Stage => {
                        let place = layout.placement(job, &req, &p, s.at);
                        let why = super::stage::staging_on(job, &place.node_id);
                        out.stages.push(super::Stage {
                            job_id: job.id,
                            node_id: place.node_id,
                            at: s.at,
                            ahead: false,
                        });
                        out.waiting.push((job.id, why));
                    }
                    Some(p) => {
                        if let Some(svc) = service {
                            spread.placed(svc, p.node, layout.nodes.len());
                        }
                        elastic.placed(job, out.placements.len(), layout.next_id);
                        out.placements.push(layout.placement(job, &req, &p, s.at));
                    }
                    None if let Step::Only(node) = step => {
                        out.waiting.push((job.id, super::stage::no_room(&layout.nodes[node].id)));
                    }
                    None if req.gpu_milli == WHOLE_GPU
                        && req.gpus > 0
                        && elastic.make_room(job, nodes, &mut layout, &mut out) => {}
                    None if req.gpu_milli == WHOLE_GPU && req.gpus > 0 => {
                        let why = layout.why_not(&req);
                        victims.make_room(k, nodes, &mut layout, &mut out, why);
                        if step == Step::Stage {
                            stage_ahead(&data, &layout, job, &mut out);
                        }
                    }
                    None => {
                        reasons.defer(&mut out, job, Some(req), false);
                        if step == Step::Stage {
                            stage_ahead(&data, &layout, job, &mut out);
                        }
                    }
                }
            }
        }
    }
    elastic.grow(&s.pending, &s.queue.widths, &mut layout, &mut out);
    reasons.fill(&layout, s, &mut out);
    super::lend::place(&mut layout, s, &mut out);
    out
}

/// A job with inputs that waits is staged ahead: its copy runs behind its wait
/// (`super::locality`).
fn stage_ahead(data: &super::locality::Data<'_>, layout: &Layout<'_>, job: &Job, out: &mut Plan) {
    if let Some(req) = layout.request(job)
        && let Some(node) = data.ahead(layout, job, &req)
    {
        let node_id = layout.nodes[node].id.clone();
        out.stages.push(super::Stage { job_id: job.id, node_id, at: data.at(), ahead: true });
    }
}

/// Whether the job is a gang (not one of its workers, not a plain job).
pub(super) fn is_gang(job: &Job) -> bool {
    job.gang.as_ref().is_some_and(|g| !g.is_worker())
}

/// Whether the job is a gang's worker.
pub(super) fn is_worker(job: &Job) -> bool {
    job.gang.as_ref().is_some_and(gantry_api::model::Gang::is_worker)
}
