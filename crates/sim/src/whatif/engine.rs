//! The replay: recorded jobs through the core's queue and placement on a virtual clock.
//!
//! Event-driven, like the server since its scheduler wakes on every change: a pass runs after
//! each arrival and each job end, delayed by the cluster's own reaction time (`pass_delay_s`,
//! measured from its history), and does what the server's pass does for these jobs:
//! [`gantry_core::queue::plan_ranked`] ranks and admits the queue (guarantees, fair share,
//! aging, backfill with reservation), and each admitted job is placed where the queue put it or
//! else by the placement policy (the server's `--policy`, Gantry's by default) through the same ledger.
//! A job holds its GPUs from its placement for its recorded run time (its start delay
//! included), converted to the GPU model it lands on ([`super::speed`]).
//!
//! Not replayed: preemption and elastic resizing (a job runs its recorded length once), GPU
//! slices (a slice is replayed as one GPU), node failures. The report counts what was skipped.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use gantry_core::frag::TypicalPods;
use gantry_core::queue::{self, Decision, QueueWeights, QueuedJob, Usage};
use gantry_core::{Cluster, NodeId, NodeSpec, Placement, Policy, PolicyKind, Request, SplitMix64};

use super::fleet::Fleet;
use super::speed::{SpeedModel, SpeedSource};
use super::{ReplayJob, TeamShare};

/// How the replay schedules.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Teams with their guarantees; a job's team not listed here gets no guarantee.
    pub teams: Vec<TeamShare>,
    /// The queue's weights (the server's defaults unless the cluster changed them).
    pub weights: QueueWeights,
    /// Seconds from an arrival or a job end to the pass that reacts to it.
    pub pass_delay_s: f64,
    /// The placement policy (the server's `--policy`; Gantry's by default).
    pub policy: PolicyKind,
}

/// What happened to one job in a replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Index into the replayed jobs.
    pub job: usize,
    /// When it started running (placement plus its start delay), s.
    pub start_s: f64,
    /// When it ended, s.
    pub end_s: f64,
    /// The GPU model it ran on.
    pub model: String,
    /// Where its run time on that model came from.
    pub speed: SpeedSource,
}

/// A whole replay.
#[derive(Debug, Clone, Default)]
pub struct Replayed {
    /// One per job that ran, in the order they started.
    pub outcomes: Vec<Outcome>,
    /// Jobs that could never be placed on this fleet (too large, or a model it lacks).
    pub unplaceable: Vec<usize>,
    /// GPU-seconds held by jobs.
    pub held_gpu_s: f64,
    /// Idle GPU-seconds accumulated while some job waited.
    pub idle_while_waiting_gpu_s: f64,
    /// First submission to last end, s.
    pub span_s: (f64, f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    End(usize),
    Arrive(usize),
    Pass,
}

/// Time as an orderable key (non-negative finite seconds).
fn key(t: f64) -> u64 {
    (t.max(0.0) * 1e6) as u64
}

struct Running {
    allocs: Vec<u64>,
    parts: Vec<(usize, u32)>,
    end_s: f64,
}

/// Replays `jobs` on `fleet`; `seed` drives the placement policy's tie-breaks.
pub fn replay(
    jobs: &[ReplayJob],
    fleet: &Fleet,
    settings: &Settings,
    speeds: &SpeedModel,
    seed: u64,
) -> Replayed {
    let specs: Vec<NodeSpec> = fleet
        .nodes
        .iter()
        .map(|n| NodeSpec {
            name: n.name.clone(),
            cpu_milli: 1 << 40,
            memory_mib: 1 << 40,
            gpus: n.gpus,
            gpu_model: Some(n.model.clone()),
            gpu_memory_mib: 0,
        })
        .collect();
    let mut out = Replayed::default();
    let Ok(mut ledger) = Cluster::new(specs) else {
        out.unplaceable = (0..jobs.len()).collect();
        return out;
    };
    let requests: Vec<Request> = jobs.iter().map(|j| request(&ledger, j, j.worker_gpus())).collect();
    let mut policy = settings.policy.build(Arc::new(TypicalPods::from_requests(&requests, 0.95)));
    let mut rng = SplitMix64::new(seed);
    let order: Vec<NodeId> = (0..ledger.nodes().len()).collect();
    let capacity: Vec<u32> = fleet.nodes.iter().map(|n| n.gpus).collect();
    let team_index: HashMap<&str, usize> =
        settings.teams.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
    let mut teams: Vec<queue::Team> = settings
        .teams
        .iter()
        .map(|t| queue::Team { guaranteed_gpus: t.guaranteed_gpus, weight: t.weight })
        .collect();
    let mut team_of = Vec::with_capacity(jobs.len());
    for j in jobs {
        team_of.push(team_index.get(j.team.as_str()).copied().unwrap_or_else(|| {
            teams.push(queue::Team { guaranteed_gpus: 0, weight: 1.0 });
            teams.len() - 1
        }));
    }
    let mut usage = Usage::new(teams.len(), 0.0);

    let mut heap: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    for (i, j) in jobs.iter().enumerate() {
        if !fits_ever(&ledger, &requests[i], j) {
            out.unplaceable.push(i);
            continue;
        }
        heap.push(Reverse((key(j.submit_s), Event::Arrive(i))));
    }
    out.span_s.0 = jobs.iter().map(|j| j.submit_s).fold(f64::INFINITY, f64::min).min(f64::MAX);
    let mut pending: Vec<usize> = Vec::new();
    let mut running: HashMap<usize, Running> = HashMap::new();
    let mut attained = vec![0.0f64; jobs.len()];
    let mut pass_at: Option<u64> = None;
    let mut last_t = 0.0f64;
    let mut next_alloc = 0u64;
    while let Some(Reverse((t_key, event))) = heap.pop() {
        let t = t_key as f64 / 1e6;
        let dt = (t - last_t).max(0.0);
        if dt > 0.0 {
            let idle = ledger.nodes().iter().map(|n| n.idle_gpus()).sum::<usize>() as f64;
            if !pending.is_empty() {
                out.idle_while_waiting_gpu_s += idle * dt;
            }
            usage.decay_to(t, settings.weights.half_life_s);
            for (job, r) in &running {
                let gpus: u32 = r.parts.iter().map(|p| p.1).sum();
                usage.charge(team_of[*job], dt * f64::from(gpus));
                attained[*job] += dt * f64::from(gpus);
            }
            last_t = t;
        }
        match event {
            Event::Arrive(i) => pending.push(i),
            Event::End(i) => {
                if let Some(r) = running.remove(&i) {
                    for id in r.allocs {
                        let _ = ledger.release(id);
                    }
                    out.span_s.1 = out.span_s.1.max(r.end_s);
                }
            }
            Event::Pass => {
                pass_at = None;
                let idle: usize = ledger.nodes().iter().map(|n| n.idle_gpus()).sum();
                if pending.is_empty() || idle == 0 {
                    continue;
                }
                let ctx = PassCtx { jobs, team_of: &team_of, attained: &attained, capacity: &capacity, t };
                let started = pass(&ctx, settings, &teams, &usage, &pending, &running);
                for (i, parts) in started {
                    let Some((allocs, model)) = hold(
                        &mut ledger,
                        &mut *policy,
                        &requests[i],
                        &jobs[i],
                        &parts,
                        &order,
                        &mut rng,
                        &mut next_alloc,
                    ) else {
                        continue;
                    };
                    let job = &jobs[i];
                    let from = job.ran_on.as_deref().unwrap_or(&model);
                    let (run_s, speed) = speeds.run_s(&job.key, job.run_s, from, &model);
                    let end_s = t + run_s.max(job.start_delay_s);
                    let held: Vec<(usize, u32)> =
                        allocs.iter().map(|(_, p)| (p.node, p.gpus.len() as u32)).collect();
                    out.held_gpu_s += f64::from(job.gpus) * (end_s - t);
                    out.outcomes.push(Outcome {
                        job: i,
                        start_s: t + job.start_delay_s,
                        end_s,
                        model,
                        speed,
                    });
                    running.insert(
                        i,
                        Running { allocs: allocs.iter().map(|(id, _)| *id).collect(), parts: held, end_s },
                    );
                    heap.push(Reverse((key(end_s), Event::End(i))));
                }
                pending.retain(|p| !running.contains_key(p));
                continue;
            }
        }
        let at = key(t + settings.pass_delay_s);
        if pass_at.is_none_or(|p| p > at) {
            pass_at = Some(at);
            heap.push(Reverse((at, Event::Pass)));
        }
    }
    out.unplaceable.extend(pending);
    out.unplaceable.sort_unstable();
    if out.span_s.1 < out.span_s.0 {
        out.span_s.1 = out.span_s.0;
    }
    out
}

struct PassCtx<'a> {
    jobs: &'a [ReplayJob],
    team_of: &'a [usize],
    attained: &'a [f64],
    capacity: &'a [u32],
    t: f64,
}

/// One pass of the queue: the jobs to start, each with where the queue put it.
fn pass(
    ctx: &PassCtx<'_>,
    settings: &Settings,
    teams: &[queue::Team],
    usage: &Usage,
    pending: &[usize],
    running: &HashMap<usize, Running>,
) -> Vec<(usize, Vec<(usize, u32)>)> {
    let mut ids: Vec<usize> = pending.to_vec();
    let mut run_ids: Vec<usize> = running.keys().copied().collect();
    run_ids.sort_unstable();
    ids.extend(run_ids);
    let queued: Vec<QueuedJob> = ids
        .iter()
        .map(|i| {
            let j = &ctx.jobs[*i];
            QueuedJob {
                id: *i as u64,
                team: ctx.team_of[*i],
                priority: j.priority,
                submitted_s: j.submit_s,
                gpus: j.gpus,
                worker_gpus: j.worker_gpus(),
                attained_gpu_s: ctx.attained[*i],
                waited_s: if running.contains_key(i) { 0.0 } else { (ctx.t - j.submit_s).max(0.0) },
                held: running.get(i).map(|r| r.parts.clone()).unwrap_or_default(),
                preemptible: false,
            }
        })
        .collect();
    let (ranked, decisions) = queue::plan_ranked(&settings.weights, teams, &queued, usage, ctx.capacity);
    ranked
        .into_iter()
        .filter_map(|k| match &decisions[k] {
            Decision::Start { nodes, .. } => Some((ids[k], nodes.clone())),
            _ => None,
        })
        .collect()
}

fn request(ledger: &Cluster, job: &ReplayJob, gpus: u32) -> Request {
    Request { gpus, gpu_milli: 1000, models: ledger.matching_models(&job.models), ..Request::cpu_only(0, 0) }
}

fn fits_ever(ledger: &Cluster, req: &Request, job: &ReplayJob) -> bool {
    let workers = job.gpus / job.worker_gpus().max(1);
    let hosts: u32 = ledger
        .nodes()
        .iter()
        .filter(|n| req.models.allows(n.model))
        .map(|n| n.spec.gpus / job.worker_gpus().max(1))
        .sum();
    hosts >= workers.max(1)
}

/// Allocates the job's workers: on the nodes the queue chose when they take them, else where
/// the policy puts each worker. All or nothing.
#[allow(clippy::too_many_arguments)]
fn hold(
    ledger: &mut Cluster,
    policy: &mut dyn Policy,
    req: &Request,
    job: &ReplayJob,
    parts: &[(usize, u32)],
    order: &[NodeId],
    rng: &mut SplitMix64,
    next_alloc: &mut u64,
) -> Option<(Vec<(u64, Placement)>, String)> {
    let per = job.worker_gpus().max(1);
    let mut wanted: Vec<usize> =
        parts.iter().flat_map(|(node, n)| std::iter::repeat_n(*node, (*n / per) as usize)).collect();
    let workers = (job.gpus / per).max(1) as usize;
    wanted.resize(workers, usize::MAX);
    let mut done: Vec<(u64, Placement)> = Vec::new();
    for node in wanted {
        let here = ledger
            .node(node)
            .filter(|n| n.fits(req))
            .and_then(|n| Some(Placement { node, gpus: n.lowest_idle_gpus(per)? }));
        let placed = here.or_else(|| policy.place(ledger, req, order, rng));
        *next_alloc += 1;
        match placed.filter(|p| ledger.allocate(*next_alloc, req, p).is_ok()) {
            Some(p) => done.push((*next_alloc, p)),
            None => {
                for (id, _) in done {
                    let _ = ledger.release(id);
                }
                return None;
            }
        }
    }
    let model = done
        .first()
        .and_then(|(_, p)| ledger.node(p.node))
        .and_then(|n| n.spec.gpu_model.clone())
        .unwrap_or_default();
    Some((done, model))
}
