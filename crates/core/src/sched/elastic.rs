//! Elastic jobs (`--gpus 2..8`) in the pass: when to grow them, when to shrink them. The server
//! and the job simulator (`gantry sim jobs --elastic`) run this one rule; no job reports a
//! goodput curve, so widths follow from the queue and idle GPUs alone (admit at the minimum,
//! then resize between rounds, never outside the range):
//!
//! 1. **Admission at the minimum.** The queue ranks and admits an elastic job as a job of its
//!    minimum, so elasticity never keeps out a job the queue would start. A running elastic
//!    job holds its minimum in the queue's eyes; the GPUs it runs on above that count as free,
//!    so a waiting job may be admitted onto them.
//! 2. **Shrink for a waiting job** ([`Elastic::make_room`]). When a job the queue started does
//!    not fit because an elastic job holds GPUs above its minimum on the node the queue chose,
//!    the elastic job shrinks (never below its minimum; lowest priority, then most GPUs above
//!    the minimum, first) in this pass, however recently it started: a team under its
//!    guarantee gets borrowed GPUs back at once. That costs a restart, not the job: preferred to
//!    preempting anyone.
//! 3. **Grow onto idle GPUs** ([`Elastic::grow`]) only when no job waits for GPUs (a job no
//!    node could ever hold does not count). An elastic job placed in this pass is widened
//!    before it starts (no restart), moving to the node where it gets the most GPUs; a running
//!    one is resized to what the best node would give it, up to its maximum.
//! 4. **Hysteresis on growth.** A running elastic job grows only once it has run
//!    `resize_gap_ms` since it (re)started (`gantry server --resize-interval`, default 300 s).
//!    Shrinking for a waiting job is not damped: the job that waits cannot be told to wait for
//!    an interval meant to limit restarts of the elastic job's own choosing.
//! 5. **The width a resize names is the width it gets.** The loop remembers each resize's
//!    target (`QueueInput::widths`) until the job is placed again; that placement is widened to
//!    the target whether jobs wait or not (the GPUs were the job's own, or held for it), so
//!    `shrunk 4 → 3` restarts at `WORLD_SIZE=3`. Only a job ranked above it that takes those
//!    GPUs in between (or a restart of the control plane, which forgets the targets) gives it
//!    fewer.
//!
//! A resize stops the job as a preemption does (SIGTERM, the grace period to checkpoint, back
//! to `pending` without spending a retry) with the reason `gantry job` shows ("resized 2 → 4
//! GPUs: idle GPUs", "shrunk 4 → 2 GPUs: job 17 needed them"); the next pass places it again
//! and its new attempt gets `WORLD_SIZE` and `CUDA_VISIBLE_DEVICES` for its new width. Elastic
//! jobs run on one node (their GPUs within a node); elastic gangs are refused at submission.

use std::collections::HashMap;

use crate::resources::WHOLE_GPU;
use crate::{ModelSet, Request};
use gantry_api::model::{Job, JobState};

use super::decision::Plan;
use super::layout::Layout;

/// A running elastic job the pass asks to stop and restart at another width.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resize {
    /// The job.
    pub job_id: i64,
    /// GPUs it runs on now.
    pub from: u32,
    /// GPUs it is meant to restart on.
    pub to: u32,
    /// Why, in words (`gantry job` shows it).
    pub reason: String,
}

/// Whether a job is elastic (a GPU range; never a gang).
pub(super) fn is_elastic(job: &Job) -> bool {
    job.request.is_elastic() && job.gang.is_none()
}

/// Whole GPUs an active job holds on its node: an elastic job's width, else `gpus`.
pub(super) fn held(job: &Job, gpus: u32) -> u32 {
    if is_elastic(job) { (job.gpu_uuids.len() as u32).max(gpus) } else { gpus }
}

/// A running (or scheduled, or stopping) elastic job.
struct Running<'s> {
    job: &'s Job,
    node: usize,
    width: u32,
    /// Asked to stop already (a resize or a preemption in flight), or resized in this pass.
    stopping: bool,
}

/// The elastic jobs of one pass and what their resizes free.
pub(super) struct Elastic<'s> {
    gap_ms: i64,
    at: i64,
    running: Vec<Running<'s>>,
    /// Per node, GPUs that stopping elastic jobs will free and no waiting job claimed yet.
    freeing: Vec<u32>,
    /// Elastic jobs placed in this pass: (index in `Plan::placements`, the job, ledger id).
    fresh: Vec<(usize, &'s Job, u64)>,
}

impl<'s> Elastic<'s> {
    pub(super) fn new(active: &'s [Job], layout: &Layout<'_>, at: i64, gap_ms: i64) -> Self {
        let mut freeing = vec![0u32; layout.nodes.len()];
        let mut running = Vec::new();
        for job in active.iter().filter(|j| is_elastic(j)) {
            let Some(node) = layout.node_of(job) else { continue };
            let width = job.gpu_uuids.len() as u32;
            let stopping = job.stop.is_some();
            if stopping {
                freeing[node] += width;
            }
            running.push(Running { job, node, width, stopping });
        }
        Self { gap_ms, at, running, freeing, fresh: Vec::new() }
    }

    /// Notes an elastic job placed in this pass (`index` in `Plan::placements`, `ledger` its
    /// allocation id), which [`Elastic::grow`] may widen before it starts.
    pub(super) fn placed(&mut self, job: &'s Job, index: usize, ledger: u64) {
        if is_elastic(job) {
            self.fresh.push((index, job, ledger));
        }
    }

    /// Whether a running job may be resized now: it has run a whole gap since it started.
    fn settled(&self, job: &Job) -> bool {
        settled(job, self.at, self.gap_ms)
    }

    /// Makes room for `job`, which needs `parts` ((node, GPUs)) and did not fit, by shrinking
    /// elastic jobs on those nodes. `false` (nothing done) when shrinking cannot free enough on
    /// every node, or when elastic jobs are not what keeps it out; the caller then preempts.
    pub(super) fn make_room(
        &mut self,
        job: &Job,
        parts: &[(usize, u32)],
        layout: &mut Layout<'_>,
        out: &mut Plan,
    ) -> bool {
        let mut picked: Vec<(usize, u32)> = Vec::new();
        let mut helped = false;
        for (node, need) in parts {
            let (idle, freeing) = (idle_gpus(layout, *node), self.freeing[*node]);
            helped |= freeing > 0 && idle < *need;
            let mut short = need.saturating_sub(idle + freeing);
            let mut candidates: Vec<usize> = (0..self.running.len())
                .filter(|c| {
                    let r = &self.running[*c];
                    r.node == *node && !r.stopping && r.width > r.job.request.gpus && !preempted(out, r.job)
                })
                .collect();
            candidates.sort_by_key(|c| {
                let r = &self.running[*c];
                (r.job.priority, std::cmp::Reverse(r.width - r.job.request.gpus), std::cmp::Reverse(r.job.id))
            });
            for c in candidates {
                if short == 0 {
                    break;
                }
                let r = &self.running[c];
                let take = (r.width - r.job.request.gpus).min(short);
                picked.push((c, take));
                short -= take;
            }
            if short > 0 {
                return false;
            }
        }
        if picked.is_empty() && !helped {
            return false;
        }
        let mut now = Vec::new();
        for (c, take) in picked {
            // No hysteresis here: the interval damps growth only, so a waiting job (a team
            // reclaiming its guarantee) gets the GPUs back in this pass.
            let r = &mut self.running[c];
            r.stopping = true;
            self.freeing[r.node] += r.width;
            now.push(r.job.id.to_string());
            let to = r.width - take;
            out.resizes.push(Resize {
                job_id: r.job.id,
                from: r.width,
                to,
                reason: format!("shrunk {} → {to} GPUs: job {} needed them", r.width, job.id),
            });
        }
        // Claim the room: idle GPUs are held on the ledger for the rest of the pass, the rest
        // comes from what the shrinking jobs free.
        for (node, need) in parts {
            let take = idle_gpus(layout, *node).min(*need);
            reserve(layout, *node, take);
            self.freeing[*node] = self.freeing[*node].saturating_sub(need - take);
        }
        let why = if now.is_empty() {
            "waiting for elastic jobs to shrink".to_owned()
        } else {
            format!("waiting: elastic job {} shrinks to make room", now.join(", "))
        };
        out.waiting.push((job.id, why));
        true
    }

    /// Gives idle GPUs to elastic jobs when no job waits for GPUs: jobs placed in this pass are
    /// widened before they start, running ones are resized (once settled).
    pub(super) fn grow(
        mut self,
        pending: &[Job],
        widths: &HashMap<i64, u32>,
        layout: &mut Layout<'_>,
        out: &mut Plan,
    ) {
        // A job restarting after a resize gets the width its resize event named, waiting jobs
        // or not: those GPUs were its own (a shrink) or were held for it (a growth).
        let (promised, fresh): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.fresh).into_iter().partition(|(_, job, _)| widths.contains_key(&job.id));
        for (index, job, ledger) in promised {
            widen(job, index, ledger, widths[&job.id], layout, out);
        }
        let settled_any = self.running.iter().any(|r| !r.stopping && self.settled(r.job));
        if fresh.is_empty() && !settled_any || someone_waits(pending, layout, out) {
            return;
        }
        for (index, job, ledger) in fresh {
            widen(job, index, ledger, u32::MAX, layout, out);
        }
        let mut order: Vec<usize> = (0..self.running.len()).collect();
        order.sort_by_key(|c| (std::cmp::Reverse(self.running[*c].job.priority), self.running[*c].job.id));
        for c in order {
            let r = &self.running[c];
            let Some(max) = r.job.request.gpus_max else { continue };
            if r.stopping || !self.settled(r.job) || r.width >= max || preempted(out, r.job) {
                continue;
            }
            let Some((node, room)) = best_node(layout, r.job, r.node, r.width) else { continue };
            let to = room.min(max);
            if to <= r.width {
                continue;
            }
            // The GPUs it will restart on are held for it for the rest of the pass.
            reserve(layout, node, if node == r.node { to - r.width } else { to });
            out.resizes.push(Resize {
                job_id: r.job.id,
                from: r.width,
                to,
                reason: format!("resized {} → {to} GPUs: idle GPUs", r.width),
            });
            self.running[c].stopping = true;
        }
    }
}

/// Whether the pass preempts the job (it stops whole: nothing to resize).
fn preempted(out: &Plan, job: &Job) -> bool {
    out.preemptions.iter().any(|p| p.job_id == job.id)
}

/// Whether a running job has run `gap_ms` since it (re)started at `at`: the hysteresis.
fn settled(job: &Job, at: i64, gap_ms: i64) -> bool {
    job.state == JobState::Running && job.started_at.is_some_and(|t| at - t >= gap_ms)
}

/// Whether a pending job that asks for GPUs, and that some node could hold, is left waiting.
fn someone_waits(pending: &[Job], layout: &Layout<'_>, out: &Plan) -> bool {
    if out.waiting.is_empty() {
        return false;
    }
    let largest = layout.cluster.nodes().iter().map(|n| n.gpu_free.len() as u32).max().unwrap_or(0);
    let by_id: HashMap<i64, &Job> = pending.iter().map(|j| (j.id, j)).collect();
    out.waiting.iter().filter_map(|(id, _)| by_id.get(id)).any(|j| {
        let r = &j.request;
        (r.gpus > 0 && r.gpus <= largest) || (r.gpus == 0 && r.gpu_memory_mib > 0)
    })
}

/// The node where `job`, on `width` GPUs of `home`, would have the most whole GPUs: its own
/// plus the idle ones at home, the idle ones of another node that takes its request at its
/// minimum (CPU, memory, GPU models). Ties stay home, then go to the first node.
fn best_node(layout: &Layout<'_>, job: &Job, home: usize, width: u32) -> Option<(usize, u32)> {
    let req = layout.request(job)?;
    let mut best: Option<(usize, u32)> = None;
    for node in 0..layout.nodes.len() {
        if node != home && !layout.cluster.node(node).is_some_and(|n| n.fits(&req)) {
            continue;
        }
        let room = idle_gpus(layout, node) + if node == home { width } else { 0 };
        let better = match best {
            None => true,
            Some((b, r)) => room > r || (room == r && node == home && b != home),
        };
        if better {
            best = Some((node, room));
        }
    }
    best
}

/// Widens an elastic job placed in this pass onto the node where it gets the most GPUs, up to
/// its maximum and `cap`, before anything starts it.
fn widen(job: &Job, index: usize, ledger: u64, cap: u32, layout: &mut Layout<'_>, out: &mut Plan) {
    let (Some(max), Some(mut req)) = (job.request.gpus_max, layout.request(job)) else { return };
    let max = max.min(cap);
    let Some(placed) = out.placements.get(index) else { return };
    let width = placed.grants.len() as u32;
    let Some(home) = layout.nodes.iter().position(|n| n.id == placed.node_id) else { return };
    let Some((node, room)) = best_node(layout, job, home, width) else { return };
    if room.min(max) <= width {
        return;
    }
    let Ok((old_req, old)) = layout.cluster.release(ledger) else { return };
    // The widest that fits (CPU, memory and models are the job's, whatever its width).
    for to in (width + 1..=room.min(max)).rev() {
        req.gpus = to;
        let Some(gpus) = layout.cluster.node(node).and_then(|n| n.lowest_idle_gpus(to)) else { continue };
        let p = crate::Placement { node, gpus };
        layout.next_id += 1;
        if layout.cluster.allocate(layout.next_id, &req, &p).is_ok() {
            out.placements[index] = layout.placement(job, &req, &p, out.placements[index].at);
            return;
        }
    }
    // Put back what was released: it fitted a moment ago, on the same ledger.
    layout.next_id += 1;
    let _ = layout.cluster.allocate(layout.next_id, &old_req, &old);
}

/// Wholly idle GPUs of a schedulable node.
fn idle_gpus(layout: &Layout<'_>, node: usize) -> u32 {
    layout
        .cluster
        .node(node)
        .filter(|n| n.schedulable)
        .map_or(0, |n| n.gpu_free.iter().filter(|f| **f == WHOLE_GPU).count() as u32)
}

/// Holds `gpus` idle GPUs of `node` on the ledger for the rest of the pass.
fn reserve(layout: &mut Layout<'_>, node: usize, gpus: u32) {
    if gpus == 0 {
        return;
    }
    let Some(idle) = layout.cluster.node(node).and_then(|n| n.lowest_idle_gpus(gpus)) else { return };
    let Ok(req) = Request::new(0, 0, gpus, WHOLE_GPU, 0, ModelSet::Any) else { return };
    layout.next_id += 1;
    let _ = layout.cluster.allocate(layout.next_id, &req, &crate::Placement { node, gpus: idle });
}
