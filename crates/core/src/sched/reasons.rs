//! Why each waiting job waits, in the words `gantry jobs` shows.

use std::collections::HashMap;

use gantry_api::model::Job;

use super::decision::Plan;
use super::layout::{Layout, whole_gpus};
use super::snapshot::Snapshot;
use crate::{ModelSet, Request};

/// Why jobs wait, worked out once the pass has placed what it could: against the ledger as the
/// pass leaves it (what the job waits for now), and once per distinct request, since asking
/// every node for every waiting job is the slowest part of a pass over a long queue.
#[derive(Default)]
pub(super) struct Reasons {
    /// (index in `Plan::waiting`, request, whether the queue held it back, whole GPUs it needs
    /// at once: a gang's for all its workers).
    deferred: Vec<(usize, Option<Request>, bool, u32)>,
}

impl Reasons {
    pub(super) fn defer(&mut self, out: &mut Plan, job: &Job, req: Option<Request>, held_back: bool) {
        let replicas = job.gang.as_ref().map_or(1, |g| g.replicas.max(1));
        self.deferred.push((out.waiting.len(), req, held_back, job.request.gpus * replicas));
        out.waiting.push((job.id, String::new()));
    }

    pub(super) fn fill(self, layout: &Layout<'_>, s: &Snapshot, out: &mut Plan) {
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
pub(super) fn never_fits(
    layout: &Layout<'_>,
    job: &Job,
    usable: &mut HashMap<(ModelSet, crate::NodeSet, u32), u32>,
) -> Option<String> {
    let limited = layout.pools.limits(job);
    if job.gpu_models.is_empty() && !limited {
        return None;
    }
    // The queue's request knows no models nor pools; the ledger's does.
    let req = layout.request(job)?;
    let per = whole_gpus(&req);
    if per == 0 || (matches!(req.models, ModelSet::Any) && matches!(req.nodes, crate::NodeSet::Any)) {
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
pub(super) fn waiting_for(layout: &Layout<'_>, s: &Snapshot, req: &Request, need: u32) -> String {
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
