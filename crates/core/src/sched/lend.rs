//! Lent GPUs in a pass: the loans put on the ledger, and preemptible jobs placed on them.
//!
//! A job idle past its team's `lend` limit keeps its allocation; the idle reconciler records a
//! loan on each of its GPUs (`crate::idle`). [`replay`] marks each GPU of a loan whose owner
//! still holds it lent (`Cluster::lend`), and puts each running borrower back on its lent GPUs
//! (`Cluster::borrow`); a borrower whose owner let go of a GPU meanwhile holds that GPU
//! outright, so nothing else is placed there before the reconciler stops it.
//!
//! [`place`] runs after the queue's pass, on what the queue could not start: a preemptible job
//! (priority below 0) that waits may borrow whole lent GPUs on one node of its pool, nobody
//! else may. Borrowers are outside the queue (the view leaves them out): their GPUs are their
//! owners', so they neither count as capacity nor are chosen as victims, and they leave only by
//! the give-back decision ([`crate::idle::give_back`]) or by ending. Candidates go by priority,
//! then submission; each takes the node with the fewest lent GPUs that hold it (the rest stay
//! whole for wider borrowers), lowest GPU indices first.

use std::collections::{HashMap, HashSet};

use gantry_api::model::{GpuHealth, Job, JobId};

use super::decision::{Grant, Place, Plan};
use super::layout::Layout;
use super::plan::{is_gang, is_worker};
use super::snapshot::Snapshot;
use crate::resources::WHOLE_GPU;
use crate::{ModelSet, Placement, Request};

/// Whether a job may borrow lent GPUs: it says it may be preempted (priority below 0).
pub fn preemptible(job: &Job) -> bool {
    job.priority < 0
}

/// The borrowers of the snapshot's loans.
pub(super) fn borrowers(s: &Snapshot) -> HashSet<JobId> {
    s.loans.iter().filter_map(|l| l.borrower).collect()
}

/// Puts the loans and their borrowers on the layout's ledger (see the module doc).
pub(super) fn replay(layout: &mut Layout<'_>, s: &Snapshot) {
    if s.loans.is_empty() {
        return;
    }
    let mut at: HashMap<&str, (usize, u32)> = HashMap::new();
    for (node, gpus) in layout.gpus.iter().enumerate() {
        for (i, g) in gpus.iter().enumerate() {
            at.insert(g.info.uuid.as_str(), (node, i as u32));
        }
    }
    let active: HashMap<JobId, &Job> = s.active.iter().map(|j| (j.id, j)).collect();
    let healthy = |layout: &Layout<'_>, node: usize, i: u32| {
        layout.gpus[node].get(i as usize).is_some_and(|g| g.health == GpuHealth::Healthy)
    };
    let mut lent = HashSet::new();
    for loan in &s.loans {
        let Some(&(node, i)) = at.get(loan.gpu_uuid.as_str()) else { continue };
        let owner = active.get(&loan.owner).filter(|o| {
            o.attempt == loan.owner_attempt
                && o.gpu_uuids.contains(&loan.gpu_uuid)
                && layout.node_of(o) == Some(node)
        });
        if owner.is_some() && healthy(layout, node, i) && layout.cluster.lend(node, i).is_ok() {
            lent.insert((node, i));
        }
    }
    // Each running borrower, on the GPUs still lent to it; those its owner let go are its own.
    let mut by_borrower: HashMap<JobId, Vec<(usize, u32)>> = HashMap::new();
    for loan in &s.loans {
        let (Some(b), Some(&gpu)) = (loan.borrower, at.get(loan.gpu_uuid.as_str())) else { continue };
        if active.get(&b).is_some_and(|j| Some(j.attempt) == loan.borrower_attempt) {
            by_borrower.entry(b).or_default().push(gpu);
        }
    }
    let mut ids: Vec<JobId> = by_borrower.keys().copied().collect();
    ids.sort_unstable();
    for b in ids {
        let (job, gpus) = (active[&b], &by_borrower[&b]);
        let Some(node) = layout.node_of(job).filter(|n| gpus.iter().all(|(g, _)| g == n)) else { continue };
        let (on_loan, kept): (Vec<u32>, Vec<u32>) =
            gpus.iter().map(|(_, i)| *i).partition(|i| lent.contains(&(node, *i)));
        for i in kept {
            block(layout, node, i);
        }
        let r = &job.request;
        let Ok(req) =
            Request::new(r.cpu_milli, r.memory_mib, on_loan.len() as u32, WHOLE_GPU, 0, ModelSet::Any)
        else {
            continue;
        };
        layout.next_id += 1;
        let _ = layout.cluster.borrow(layout.next_id, &req, &Placement { node, gpus: on_loan });
    }
}

/// Takes a GPU whose owner let go while a borrower still runs on it.
fn block(layout: &mut Layout<'_>, node: usize, i: u32) {
    let Ok(req) = Request::new(0, 0, 1, WHOLE_GPU, 0, ModelSet::Any) else { return };
    layout.next_id += 1;
    let _ = layout.cluster.allocate(layout.next_id, &req, &Placement { node, gpus: vec![i] });
}

/// Places waiting preemptible jobs on lent GPUs (see the module doc).
pub(super) fn place(layout: &mut Layout<'_>, s: &Snapshot, out: &mut Plan) {
    if s.loans.is_empty() {
        return;
    }
    let started: HashSet<JobId> = out.placements.iter().map(|p| p.job_id).collect();
    let mut candidates: Vec<&Job> = s
        .pending
        .iter()
        .filter(|j| preemptible(j) && !is_gang(j) && !is_worker(j) && j.request.gpus > 0)
        .filter(|j| !started.contains(&j.id) && layout.pools.refuses(j).is_none())
        .collect();
    candidates.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.submitted_at, j.id));
    let memory: HashMap<&str, u64> = s.loans.iter().map(|l| (l.gpu_uuid.as_str(), l.memory_mib)).collect();
    let mut borrowed = HashSet::new();
    for job in candidates {
        let Some(req) = layout.request(job).filter(|r| r.gpu_milli == WHOLE_GPU) else { continue };
        let fits = (0..layout.nodes.len())
            .map(|n| (n, layout.cluster.lendable(n)))
            .filter(|(_, free)| free.len() >= req.gpus as usize)
            .min_by_key(|(n, free)| (free.len(), *n));
        let Some((node, free)) = fits else { continue };
        let placement = Placement { node, gpus: free[..req.gpus as usize].to_vec() };
        layout.next_id += 1;
        if layout.cluster.borrow(layout.next_id, &req, &placement).is_err() {
            continue;
        }
        let grants = placement
            .gpus
            .iter()
            .filter_map(|i| layout.gpus[node].get(*i as usize))
            .map(|g| Grant {
                uuid: g.info.uuid.clone(),
                share_milli: WHOLE_GPU,
                memory_mib: memory.get(g.info.uuid.as_str()).copied().unwrap_or(0),
            })
            .collect();
        let n = &layout.nodes[node];
        out.borrows.push(Place { job_id: job.id, node_id: n.id.clone(), epoch: n.epoch, grants, at: s.at });
        borrowed.insert(job.id);
    }
    out.waiting.retain(|(id, _)| !borrowed.contains(id));
}
