//! Room for a job by preemption: on which nodes, at the cost of which running jobs.
//!
//! The queue admits from GPU counts; a job it started may still find its GPUs held. Stopping
//! running jobs for it is worth their lost work only if, once they end, the job can be placed
//! on what they free: on nodes it may use (schedulable, of a GPU model it accepts, with enough
//! GPUs for one worker), with the CPU and memory its workers ask for, every worker of a gang
//! whole. [`find_room`] answers with the parts (node, GPUs) and the victims, or `None`, and then
//! nobody is stopped: a job preemption cannot help preempts nobody.
//!
//! Per node, the room is its idle GPUs, the GPUs jobs already stopping will free and no other
//! job claimed (so a job waiting for its victims to stop asks for no more), and the GPUs of the
//! jobs the preemptor may stop there (strictly lower priority, as [`choose_victims`] judges; the
//! caller lowers a victim's priority when a team reclaims its guarantee from it). The queue's own
//! split is kept when the room holds it; otherwise the workers go where [`place_workers`] puts
//! them over the room (one node if one holds them all, the fullest such). On each part the
//! victims are the cheapest set [`choose_victims`] picks for the GPUs, then more in the same
//! order while the node lacks CPU or memory. A victim holding GPUs on several nodes (a gang)
//! frees them all, and is counted once. Room that needs no victim (idle, or being freed) is
//! taken first, so a job waiting for its victims to stop stops nobody more.

use crate::queue::{Victim, choose_victims, place_workers};

/// The job that needs room: `workers` workers of `per_worker` GPUs, each asking for
/// `cpu_milli` and `memory_mib` on its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Workers (1 for a job that runs on one node).
    pub workers: u32,
    /// Whole GPUs of one worker (at least 1).
    pub per_worker: u32,
    /// CPU of one worker, milli-cores.
    pub cpu_milli: u64,
    /// Memory of one worker, MiB.
    pub memory_mib: u64,
    /// The job's priority: only holders of lower (judged) priority are victims.
    pub priority: i32,
}

/// What one node offers the job now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeRoom {
    /// Whether the job may run here at all (schedulable, GPU model, GPU count).
    pub eligible: bool,
    /// Wholly idle GPUs.
    pub idle: u32,
    /// GPUs jobs already stopping will free that no other job claimed.
    pub freeing: u32,
    /// Free CPU, milli-cores, counting what stopping jobs will free.
    pub cpu_free: u64,
    /// Free memory, MiB, counting what stopping jobs will free.
    pub memory_free: u64,
}

/// A running job the preemptor may stop, as it sits on one node (a gang has one per node).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Holder {
    /// The node.
    pub node: usize,
    /// The job as a victim: its GPUs *on this node*, its judged priority, its lost work.
    pub victim: Victim,
    /// CPU it holds on this node, milli-cores.
    pub cpu_milli: u64,
    /// Memory it holds on this node, MiB.
    pub memory_mib: u64,
    /// The service the job is a replica of (an index the caller assigns), if it is one.
    pub service: Option<u32>,
}

/// Where the job goes once its victims end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    /// (node, GPUs), GPUs a multiple of the worker's.
    pub parts: Vec<(usize, u32)>,
    /// The victims (ids of [`Holder::victim`]), each once.
    pub victims: Vec<u64>,
}

/// The parts and victims that make `shape` placeable (see the module doc), preferring the
/// queue's split `preferred`. `None` when no set of allowed victims suffices.
///
/// Replicas of a service are victims last (`super::service`): room is first looked for among
/// the holders that are no replica; only when that fails are replicas added, at most one of
/// each service (its cheapest on a node the job may use: lowest priority, least work lost).
pub fn find_room(
    shape: &Shape,
    nodes: &[NodeRoom],
    holders: &[Holder],
    preferred: &[(usize, u32)],
) -> Option<Room> {
    let plain: Vec<Holder> = holders.iter().filter(|h| h.service.is_none()).copied().collect();
    if plain.len() == holders.len() {
        return find_room_among(shape, nodes, holders, preferred);
    }
    if let Some(room) = find_room_among(shape, nodes, &plain, preferred) {
        return Some(room);
    }
    find_room_among(shape, nodes, &one_replica_each(nodes, holders), preferred)
}

/// `holders` with, of each service, only the holders of its cheapest replica on an eligible
/// node (a replica that is a gang keeps all its holders).
fn one_replica_each(nodes: &[NodeRoom], holders: &[Holder]) -> Vec<Holder> {
    let mut cheapest: Vec<(u32, &Victim)> = Vec::new();
    for h in holders.iter().filter(|h| nodes.get(h.node).is_some_and(|n| n.eligible)) {
        let Some(service) = h.service else { continue };
        let cost = |v: &Victim| (v.priority, v.lost_gpu_s, v.id);
        match cheapest.iter_mut().find(|(s, _)| *s == service) {
            Some((_, best)) if cost(&h.victim).partial_cmp(&cost(best)) == Some(std::cmp::Ordering::Less) => {
                *best = &h.victim;
            }
            Some(_) => {}
            None => cheapest.push((service, &h.victim)),
        }
    }
    holders
        .iter()
        .filter(|h| h.service.is_none_or(|s| cheapest.iter().any(|(c, v)| *c == s && v.id == h.victim.id)))
        .copied()
        .collect()
}

fn find_room_among(
    shape: &Shape,
    nodes: &[NodeRoom],
    holders: &[Holder],
    preferred: &[(usize, u32)],
) -> Option<Room> {
    let per = shape.per_worker.max(1);
    let allowed: Vec<&Holder> =
        holders.iter().filter(|h| h.victim.priority < shape.priority && h.victim.gpus > 0).collect();
    // Room that is free or being freed already (for this job, or for anyone) needs no victim.
    let mut coming: Vec<u32> =
        (0..nodes.len()).map(|n| workers_fit(shape, per, &nodes[n], &[], n) * per).collect();
    if let Some(parts) = place_workers(&mut coming, shape.workers, per) {
        return Some(Room { parts, victims: Vec::new() });
    }
    let fit: Vec<u32> = (0..nodes.len()).map(|n| workers_fit(shape, per, &nodes[n], &allowed, n)).collect();
    let holds = |parts: &[(usize, u32)]| {
        parts.iter().map(|(_, g)| g / per).sum::<u32>() == shape.workers
            && parts.iter().all(|(n, g)| g % per == 0 && fit.get(*n).is_some_and(|f| g / per <= *f))
    };
    let parts = if !preferred.is_empty() && holds(preferred) {
        preferred.to_vec()
    } else {
        let mut room: Vec<u32> = fit.iter().map(|f| f * per).collect();
        place_workers(&mut room, shape.workers, per)?
    };
    let mut picked: Vec<u64> = Vec::new();
    for (node, gpus) in &parts {
        pick_on(shape, per, &nodes[*node], &allowed, *node, *gpus, &mut picked)?;
    }
    Some(Room { parts, victims: picked })
}

/// Workers of `shape` node `n` could hold once every allowed holder there is stopped.
fn workers_fit(shape: &Shape, per: u32, room: &NodeRoom, allowed: &[&Holder], n: usize) -> u32 {
    if !room.eligible {
        return 0;
    }
    let here = allowed.iter().filter(|h| h.node == n);
    let (gpus, cpu, memory) = here
        .fold((room.idle + room.freeing, room.cpu_free, room.memory_free), |acc, h| {
            (acc.0 + h.victim.gpus, acc.1 + h.cpu_milli, acc.2 + h.memory_mib)
        });
    let by = |have: u64, each: u64| {
        have.checked_div(each).map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    (gpus / per).min(by(cpu, shape.cpu_milli)).min(by(memory, shape.memory_mib))
}

/// Adds to `picked` the victims that free `gpus` GPUs and the CPU and memory of their workers
/// on `node`; `None` when the allowed holders there do not suffice.
fn pick_on(
    shape: &Shape,
    per: u32,
    room: &NodeRoom,
    allowed: &[&Holder],
    node: usize,
    gpus: u32,
    picked: &mut Vec<u64>,
) -> Option<()> {
    let here: Vec<&Holder> = allowed.iter().copied().filter(|h| h.node == node).collect();
    let freed = |picked: &[u64]| {
        here.iter().filter(|h| picked.contains(&h.victim.id)).fold((0u32, 0u64, 0u64), |acc, h| {
            (acc.0 + h.victim.gpus, acc.1 + h.cpu_milli, acc.2 + h.memory_mib)
        })
    };
    let candidates: Vec<Victim> =
        here.iter().filter(|h| !picked.contains(&h.victim.id)).map(|h| h.victim).collect();
    let base = room.idle + room.freeing + freed(picked).0;
    picked.extend(choose_victims(gpus, base, shape.priority, &candidates)?);
    let workers = u64::from(gpus / per);
    let (cpu, memory) = (shape.cpu_milli * workers, shape.memory_mib * workers);
    let mut rest: Vec<&Victim> = candidates.iter().filter(|v| !picked.contains(&v.id)).collect();
    rest.sort_by(|a, b| {
        a.priority.cmp(&b.priority).then(a.lost_gpu_s.total_cmp(&b.lost_gpu_s)).then(a.id.cmp(&b.id))
    });
    loop {
        let (_, c, m) = freed(picked);
        let (cpu_short, memory_short) = (room.cpu_free + c < cpu, room.memory_free + m < memory);
        if !cpu_short && !memory_short {
            return Some(());
        }
        // The next victim that frees some of what is short.
        let k = rest.iter().position(|v| {
            here.iter().any(|h| {
                h.victim.id == v.id && (cpu_short && h.cpu_milli > 0 || memory_short && h.memory_mib > 0)
            })
        })?;
        picked.push(rest.remove(k).id);
    }
}
