//! A gang's workers on the ledger: every worker on the nodes the queue chose, or none.

use gantry_api::model::Job;

use super::decision::GangPlace;
use super::layout::Layout;

/// Places `workers` (by rank) on `parts` ((node, GPUs) as the queue split the gang), rank 0 on
/// the first part. `None`, with the ledger untouched, when a worker does not fit (CPU, memory,
/// a GPU a slice took) or the workers do not match the gang.
pub(super) fn place(
    layout: &mut Layout<'_>,
    gang: &Job,
    workers: &[&Job],
    parts: &[(usize, u32)],
    at: i64,
) -> Option<GangPlace> {
    let req = layout.request(gang)?;
    let per = req.gpus.max(1);
    let replicas = gang.gang.as_ref()?.replicas as usize;
    if workers.len() != replicas || parts.iter().map(|(_, g)| (g / per) as usize).sum::<usize>() != replicas {
        return None;
    }
    let mut taken = Vec::with_capacity(replicas);
    let mut placements = Vec::with_capacity(replicas);
    let mut next = workers.iter();
    for (node, gpus) in parts {
        for _ in 0..gpus / per {
            let worker = next.next()?;
            let spot = layout
                .cluster
                .node(*node)
                .filter(|n| n.fits(&req))
                .and_then(|n| n.lowest_idle_gpus(per))
                .map(|gpus| crate::Placement { node: *node, gpus });
            layout.next_id += 1;
            match spot.filter(|p| layout.cluster.allocate(layout.next_id, &req, p).is_ok()) {
                Some(p) => {
                    taken.push(layout.next_id);
                    placements.push(layout.placement(worker, &req, &p, at));
                }
                None => {
                    for id in taken {
                        let _ = layout.cluster.release(id);
                    }
                    return None;
                }
            }
        }
    }
    Some(GangPlace { gang_id: gang.id, workers: placements, at })
}
