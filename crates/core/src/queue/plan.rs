//! One scheduling round: rank, admit with backfill and reservation, place gangs.

use std::cmp::Ordering;

use super::fairshare::Usage;
use super::weights::QueueWeights;

/// A team's share of the cluster.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Team {
    /// GPUs the team is guaranteed whenever it asks.
    pub guaranteed_gpus: u32,
    /// Fair-share weight (usage is divided by it).
    pub weight: f64,
}

/// A job as the queue sees it: waiting or holding GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedJob {
    /// Caller's id.
    pub id: u64,
    /// Team index into the `teams` slice.
    pub team: usize,
    /// Priority, higher first.
    pub priority: i32,
    /// Submission time, s.
    pub submitted_s: f64,
    /// GPUs, all or nothing (a gang of `gpus` one-GPU workers, or one multi-GPU worker).
    pub gpus: u32,
    /// GPUs of one worker: the job may be split between nodes only at worker boundaries
    /// (`gpus` for a job that must run on one node; 1 or 0: any split).
    pub worker_gpus: u32,
    /// GPU-seconds received so far.
    pub attained_gpu_s: f64,
    /// Seconds spent waiting since submission (not counting time holding GPUs).
    pub waited_s: f64,
    /// GPUs held now, as (node, count); empty when waiting.
    pub held: Vec<(usize, u32)>,
    /// Whether the job may be stopped and requeued (checkpointing jobs).
    pub preemptible: bool,
}

impl QueuedJob {
    fn running(&self) -> bool {
        !self.held.is_empty()
    }
}

/// Free GPUs per node available to the queue when none of its jobs holds any.
pub type NodeFree = [u32];

/// What the round decided for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Keeps running where it is.
    Keep {
        /// The job.
        job: u64,
    },
    /// Starts on these (node, GPUs) parts.
    Start {
        /// The job.
        job: u64,
        /// Where.
        nodes: Vec<(usize, u32)>,
    },
    /// Is stopped and requeued.
    Preempt {
        /// The job.
        job: u64,
        /// The highest-ranked job started this round, when one did.
        by: Option<u64>,
        /// Why it lost its place.
        reason: &'static str,
    },
    /// Keeps waiting.
    Wait {
        /// The job.
        job: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Key {
    borrower: bool,
    priority: i64,
    band: u32,
    waiting: bool,
    share: f64,
    submitted: f64,
    id: u64,
}

fn cmp_key(a: &Key, b: &Key) -> Ordering {
    a.borrower
        .cmp(&b.borrower)
        .then(b.priority.cmp(&a.priority))
        .then(a.band.cmp(&b.band))
        .then(a.waiting.cmp(&b.waiting))
        .then(a.share.total_cmp(&b.share))
        .then(a.submitted.total_cmp(&b.submitted))
        .then(a.id.cmp(&b.id))
}

/// Priority after aging: one level per `aging_s` waited.
fn effective_priority(w: &QueueWeights, job: &QueuedJob) -> i64 {
    let aged = if w.aging_s > 0.0 { (job.waited_s / w.aging_s).floor() as i64 } else { 0 };
    i64::from(job.priority) + aged
}

/// Indices of `jobs` from first to last claim on the GPUs (see the module doc).
pub fn rank(w: &QueueWeights, teams: &[Team], jobs: &[QueuedJob], usage: &Usage) -> Vec<usize> {
    let share = shares(w, teams, jobs, usage);
    let mut keys: Vec<Key> = jobs
        .iter()
        .map(|j| Key {
            borrower: false,
            priority: effective_priority(w, j),
            // With `sticky`, hysteresis: a running job keeps the band below its own, so it does
            // not lose its GPUs the moment it crosses a threshold. Off by default: it kept jobs
            // that had run for hours ahead of new ones (docs/scheduling.md, the philly set).
            band: w.band(j.attained_gpu_s).saturating_sub(u32::from(w.sticky && j.running())),
            waiting: !w.backfill_yields && !j.running(),
            share: share(j.team),
            submitted: j.submitted_s,
            id: j.id,
        })
        .collect();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|a, b| cmp_key(&keys[*a], &keys[*b]));
    let mut within = vec![0u32; teams.len()];
    for k in &order {
        let job = &jobs[*k];
        let guarantee = teams.get(job.team).map_or(0, |t| t.guaranteed_gpus);
        let used = within.get(job.team).copied().unwrap_or(0);
        if used + job.gpus <= guarantee {
            within[job.team] = used + job.gpus;
        } else {
            keys[*k].borrower = true;
        }
    }
    order.sort_by(|a, b| cmp_key(&keys[*a], &keys[*b]));
    order
}

/// The fair-share key of each team: decayed usage over weight, or with `share_step` > 1 its step
/// above the least-used team with jobs here (one GPU-hour added to each, so an idle team and one
/// that ran a few minutes tie). Returns a lookup by team index.
fn shares<'a>(
    w: &QueueWeights,
    teams: &'a [Team],
    jobs: &[QueuedJob],
    usage: &'a Usage,
) -> impl Fn(usize) -> f64 + 'a {
    const FLOOR_GPU_S: f64 = 3_600.0;
    let raw = move |team: usize| usage.of(team) / teams.get(team).map_or(1.0, |t| t.weight.max(1e-9));
    let least = jobs.iter().map(|j| raw(j.team)).fold(f64::INFINITY, f64::min);
    let (on, step) = (w.fair_share, w.share_step);
    move |team: usize| match (on, step > 1.0) {
        (false, _) => 0.0,
        (true, false) => raw(team),
        (true, true) => ((raw(team) + FLOOR_GPU_S) / (least + FLOOR_GPU_S)).log(step).floor().max(0.0),
    }
}

/// One round: decisions for every job, in the order of `jobs`.
///
/// `capacity` is the free GPUs per node when no queued job holds any. Jobs' `held` parts must
/// lie within it.
pub fn plan(
    w: &QueueWeights,
    teams: &[Team],
    jobs: &[QueuedJob],
    usage: &Usage,
    capacity: &NodeFree,
) -> Vec<Decision> {
    plan_ranked(w, teams, jobs, usage, capacity).1
}

/// [`plan`], also returning the rank order it used (indices into `jobs`, first claim first), so a
/// caller that places jobs itself (the server) does so in the same order.
pub fn plan_ranked(
    w: &QueueWeights,
    teams: &[Team],
    jobs: &[QueuedJob],
    usage: &Usage,
    capacity: &NodeFree,
) -> (Vec<usize>, Vec<Decision>) {
    let (order, admitted) = admit(w, teams, jobs, usage, capacity);
    let decisions = decide(jobs, &order, &admitted, capacity);
    (order, decisions)
}

/// Ranks and admits without placing: the rank order (indices into `jobs`) and, per job, whether
/// its `gpus` are granted this round (budget, team caps, backfill with reservation). [`plan`]
/// places what this admits.
pub fn admit(
    w: &QueueWeights,
    teams: &[Team],
    jobs: &[QueuedJob],
    usage: &Usage,
    capacity: &NodeFree,
) -> (Vec<usize>, Vec<bool>) {
    let order = rank(w, teams, jobs, usage);
    let total: u32 = capacity.iter().sum();
    let borrow = (w.borrow_limit * f64::from(total)).round() as u32;
    let cap = |team: usize| teams.get(team).map_or(total, |t| t.guaranteed_gpus.saturating_add(borrow));
    let mut admitted = vec![false; jobs.len()];
    let mut budget = total;
    let mut team_used = vec![0u32; teams.len().max(jobs.iter().map(|j| j.team + 1).max().unwrap_or(0))];
    // Jobs that cannot be preempted keep their GPUs whatever their rank.
    for (k, job) in jobs.iter().enumerate() {
        if job.running() && !job.preemptible {
            admitted[k] = true;
            budget = budget.saturating_sub(job.gpus);
            team_used[job.team] += job.gpus;
        }
    }
    let mut head_blocked = false;
    // GPUs a blocked gang keeps free for itself (`gang_reservation`).
    let mut reserved = 0u32;
    for k in &order {
        let job = &jobs[*k];
        if admitted[*k] {
            continue;
        }
        let fits = job.gpus <= budget && team_used[job.team] + job.gpus <= cap(job.team);
        // Reservation: once a job is blocked, only jobs that can be preempted when it fits
        // may start ahead of it.
        let may_backfill = !head_blocked || job.preemptible || job.running();
        let leaves_room = job.running() || job.gpus + reserved <= budget;
        if fits && may_backfill && leaves_room {
            admitted[*k] = true;
            budget -= job.gpus;
            team_used[job.team] += job.gpus;
        } else if job.gpus <= total {
            head_blocked = true;
            // A gang larger than its team may ever hold reserves nothing: it would idle GPUs.
            let gang = job.gpus > job.worker_gpus.max(1) && job.gpus <= cap(job.team);
            if w.gang_reservation && reserved == 0 && !job.running() && gang {
                reserved = job.gpus;
            }
        }
    }
    (order, admitted)
}

fn decide(jobs: &[QueuedJob], order: &[usize], admitted: &[bool], capacity: &NodeFree) -> Vec<Decision> {
    let mut free = capacity.to_vec();
    for (k, job) in jobs.iter().enumerate() {
        if admitted[k] {
            for (node, n) in &job.held {
                free[*node] = free[*node].saturating_sub(*n);
            }
        }
    }
    // Placing each started job scans no nodes: the counts are indexed (see `super::free`).
    let mut free = super::free::FreeIndex::new(free);
    let mut out: Vec<Option<Decision>> = vec![None; jobs.len()];
    let mut first_started = None;
    for k in order {
        let job = &jobs[*k];
        out[*k] = Some(match (admitted[*k], job.running()) {
            (true, true) => Decision::Keep { job: job.id },
            (true, false) => {
                // Admission counted GPUs; workers larger than one GPU may still not fit the
                // nodes' remainders. Such a job keeps its admitted GPUs (a reservation) and waits.
                let per = job.worker_gpus.max(1);
                match free.place_workers(job.gpus.div_ceil(per), per) {
                    Some(nodes) => {
                        first_started.get_or_insert(job.id);
                        Decision::Start { job: job.id, nodes }
                    }
                    None => Decision::Wait { job: job.id },
                }
            }
            (false, true) => Decision::Preempt { job: job.id, by: first_started, reason: "outranked" },
            (false, false) => Decision::Wait { job: job.id },
        });
    }
    out.into_iter().map(|d| d.expect("every job is in the order")).collect()
}

/// Places a gang of `gpus` GPUs: on one node if one has room (the fullest that fits), else on as
/// few nodes as possible (most free first, lowest index on ties). Takes the GPUs from `free`.
/// `None` (and `free` untouched) when the GPUs are not there.
pub fn place_gang(free: &mut [u32], gpus: u32) -> Option<Vec<(usize, u32)>> {
    place_workers(free, gpus, 1)
}

/// Places `workers` workers of `per_worker` GPUs each, all or nothing: on one node if one holds
/// them all (the fullest that does), else on as few nodes as possible (nodes holding the most
/// workers first, lowest index on ties). Returns (node, GPUs) parts, GPUs a multiple of
/// `per_worker`, and takes them from `free`; `None` (and `free` untouched) when they do not fit.
pub fn place_workers(free: &mut [u32], workers: u32, per_worker: u32) -> Option<Vec<(usize, u32)>> {
    let per = per_worker.max(1);
    let gpus = workers.checked_mul(per)?;
    if free.iter().map(|f| u64::from(f / per)).sum::<u64>() < u64::from(workers) {
        return None;
    }
    let single = free.iter().enumerate().filter(|(_, f)| **f >= gpus).min_by_key(|(i, f)| (**f, *i));
    if let Some((node, _)) = single {
        free[node] -= gpus;
        return Some(vec![(node, gpus)]);
    }
    let mut nodes: Vec<usize> = (0..free.len()).filter(|i| free[*i] >= per).collect();
    nodes.sort_by_key(|i| (std::cmp::Reverse(free[*i] / per), *i));
    let mut out = Vec::new();
    let mut need = workers;
    for node in nodes {
        if need == 0 {
            break;
        }
        let take = (free[node] / per).min(need);
        free[node] -= take * per;
        need -= take;
        out.push((node, take * per));
    }
    Some(out)
}

/// A running job that explicit preemption could stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Victim {
    /// The job.
    pub id: u64,
    /// Its priority.
    pub priority: i32,
    /// GPUs it would free.
    pub gpus: u32,
    /// GPU-seconds of work lost if stopped now (since its last checkpoint, plus restart).
    pub lost_gpu_s: f64,
}

/// The victims that free `need` GPUs beyond `free` for a job of priority `priority`: only jobs
/// of strictly lower priority, lowest priority first, then least GPU-time lost; then any victim
/// the others make unnecessary is spared. `None` when even all candidates do not suffice.
pub fn choose_victims(need: u32, free: u32, priority: i32, candidates: &[Victim]) -> Option<Vec<u64>> {
    if free >= need {
        return Some(Vec::new());
    }
    let mut pool: Vec<&Victim> = candidates.iter().filter(|v| v.priority < priority && v.gpus > 0).collect();
    pool.sort_by(|a, b| {
        a.priority.cmp(&b.priority).then(a.lost_gpu_s.total_cmp(&b.lost_gpu_s)).then(a.id.cmp(&b.id))
    });
    let mut chosen: Vec<&Victim> = Vec::new();
    let mut got = free;
    for v in pool {
        if got >= need {
            break;
        }
        got += v.gpus;
        chosen.push(v);
    }
    if got < need {
        return None;
    }
    // Spare the costliest victims the rest make unnecessary.
    chosen.sort_by(|a, b| b.lost_gpu_s.total_cmp(&a.lost_gpu_s));
    let mut k = 0;
    while k < chosen.len() {
        if got - chosen[k].gpus >= need {
            got -= chosen[k].gpus;
            chosen.remove(k);
        } else {
            k += 1;
        }
    }
    Some(chosen.iter().map(|v| v.id).collect())
}
