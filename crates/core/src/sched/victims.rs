//! Which running jobs to stop for a job the queue started but that cannot get its GPUs yet.
//!
//! The queue says which running jobs lost their place; stopping all of them would lose work
//! nobody needs, and the queue counts GPUs without knowing their model or the nodes' CPU and
//! memory. For each started job that finds no room, [`crate::sched::find_room`] picks the
//! nodes and the smallest set of victims that make it placeable once they end: nodes it may use
//! (GPU model, schedulable, GPU count), the CPU and memory of its workers, a gang's workers
//! whole; lowest priority first, then least GPU-time lost, never a job of equal or higher
//! priority. When no such set exists nobody is stopped. The candidates are the jobs that lost
//! their place; for a job limited to some GPU models, whose place the queue chose blind to
//! models, every running job ranked below it (the A100 job on a cluster of A100 and H100 nodes
//! stops an A100 job, never an H100 one). Priority preempts only within a team (Slurm's QOS
//! `Preempt` list, KAI's in-quota vs over-quota): another team's job is a victim only when the
//! preemptor's team reclaims its guarantee from a team that borrows beyond its own (then at equal
//! priority too), or when an admin let the preemptor's team preempt other teams
//! (`preempt_other_teams`). GPUs, CPU and memory that jobs already stopping will free count as
//! free, so a job waiting for its victims to stop asks for no more. A gang is a victim as a whole
//! (its GPUs on a node are what it frees there). A service's replicas are stopped last and at most
//! one of each service per pass (`super::service`); when the jobs that lost their place are
//! replicas of one service and so cannot all go, the room is looked for again among every
//! running job ranked below the preemptor (the queue demotes the cheapest jobs, blind to
//! services: two young replicas before an older batch job).
//!
//! A job that checkpoints (`QueueInput::checkpointing`, the job simulator's jobs) has said it
//! may be stopped and resumed at any time: it yields to any job the queue ranks above it, of
//! any priority and team, as least-attained-service schedulers (Tiresias) preempt. It is judged
//! one level below its preemptor, so it goes after the jobs of lower priority, and the fewest,
//! cheapest such victims are still chosen by [`find_room`].

use std::collections::{HashMap, HashSet};

use crate::queue::{Decision, Victim};
use crate::resources::WHOLE_GPU;
use crate::sched::{Contender, Holder, NodeRoom, Shape, TeamsNow, find_room};
use crate::{ModelSet, Request};
use gantry_api::model::JobState;

use super::decision::{Plan, Preemption};
use super::layout::Layout;
use super::snapshot::Snapshot;
use super::view::QueueView;

/// Candidates and what is already being freed, across one pass.
pub(super) struct Victims<'v, 'a> {
    view: &'v QueueView<'a>,
    /// Running jobs (indices into the view) the queue says lost their place.
    candidates: Vec<usize>,
    /// Every running job not stopping, with its place in the queue's order: the candidates of
    /// a job the queue placed without knowing its GPU models.
    running: Vec<(usize, usize)>,
    /// Place of each job (index into the view) in the queue's order.
    rank: Vec<usize>,
    /// Already picked this pass.
    chosen: HashSet<usize>,
    /// Per node, GPUs that jobs stopping will free and no started job has claimed yet.
    freeing: Vec<u32>,
    /// Per node, CPU and memory that jobs stopping will free.
    freeing_host: Vec<(u64, u64)>,
    /// What jobs stopping for a preemptor still pending will free, by preemptor id: (node,
    /// GPUs, CPU, memory). Only that job may claim it.
    earmarked: HashMap<i64, Vec<(usize, u32, u64, u64)>>,
    /// Whole GPUs each team holds now.
    team_held: Vec<u32>,
    /// Per job (index into the view), the service it is a replica of (an index).
    services: Vec<Option<u32>>,
    /// Services a replica of which this pass already stops: no second one is stopped.
    stopped_services: HashSet<u32>,
    /// Jobs (indices into the view) that checkpoint: they yield to any job ranked above them.
    yielding: HashSet<usize>,
    at: i64,
}

impl<'v, 'a> Victims<'v, 'a> {
    pub(super) fn new(
        view: &'v QueueView<'a>,
        ranked: &[usize],
        decisions: &[Decision],
        layout: &Layout<'_>,
        s: &Snapshot,
    ) -> Self {
        let waiting: HashSet<i64> = s.pending.iter().map(|j| j.id).collect();
        let mut earmarked: HashMap<i64, Vec<(usize, u32, u64, u64)>> = HashMap::new();
        let mut freeing = vec![0u32; layout.cluster.nodes().len()];
        let mut freeing_host = vec![(0u64, 0u64); freeing.len()];
        let mut team_held = vec![0u32; view.teams.len()];
        let (mut candidates, mut running) = (Vec::new(), Vec::new());
        let mut rank = vec![usize::MAX; view.jobs.len()];
        for (place, k) in ranked.iter().enumerate() {
            rank[*k] = place;
        }
        for (k, job) in view.jobs.iter().enumerate() {
            let source = view.source[k];
            for (node, gpus) in &job.held {
                team_held[job.team] += gpus;
                if source.stop.is_some() {
                    let (cpu, memory) = host_on(view, k, *node);
                    match s.queue.preempted_for.get(&source.id).filter(|by| waiting.contains(by)) {
                        Some(by) => earmarked.entry(*by).or_default().push((*node, *gpus, cpu, memory)),
                        None => {
                            freeing[*node] += gpus;
                            freeing_host[*node].0 += cpu;
                            freeing_host[*node].1 += memory;
                        }
                    }
                }
            }
            let live = source.stop.is_none() && source.state == JobState::Running;
            if live && matches!(decisions[k], Decision::Preempt { .. }) {
                candidates.push(k);
            }
            if live && !job.held.is_empty() {
                running.push((k, rank[k]));
            }
        }
        let at = s.at;
        let yielding = (0..view.jobs.len())
            .filter(|k| s.queue.checkpointing.contains_key(&view.source[*k].id))
            .collect();
        let mut names: HashMap<&str, u32> = HashMap::new();
        let services = view
            .source
            .iter()
            .map(|j| {
                let next = names.len() as u32;
                s.service(j.id).map(|svc| *names.entry(svc).or_insert(next))
            })
            .collect();
        Self {
            services,
            stopped_services: HashSet::new(),
            yielding,
            view,
            candidates,
            running,
            rank,
            chosen: HashSet::new(),
            freeing,
            freeing_host,
            earmarked,
            team_held,
            at,
        }
    }

    /// Frees `parts` ((node, GPUs), the queue's split) for job `k`, which waits: finds the
    /// nodes and victims that make it placeable ([`find_room`]), or preempts nobody. Records the
    /// preemptions and why `k` waits (`otherwise` when its GPUs are idle already on nodes it may
    /// use and something else keeps it out).
    pub(super) fn make_room(
        &mut self,
        k: usize,
        parts: &[(usize, u32)],
        layout: &mut Layout<'_>,
        out: &mut Plan,
        otherwise: String,
    ) {
        let job = self.view.source[k];
        // An elastic job resized in this pass is stopping already (`super::elastic`).
        if !out.resizes.is_empty() {
            let view = self.view;
            let resized = |c: &usize| out.resizes.iter().any(|r| r.job_id == view.source[*c].id);
            self.candidates.retain(|c| !resized(c));
            self.running.retain(|(c, _)| !resized(c));
        }
        let Some(req) = layout.request(job) else {
            out.waiting.push((job.id, otherwise));
            return;
        };
        // What jobs stopping for this one free is its own from now on.
        for (node, gpus, cpu, memory) in self.earmarked.remove(&job.id).unwrap_or_default() {
            self.freeing[node] += gpus;
            self.freeing_host[node].0 += cpu;
            self.freeing_host[node].1 += memory;
        }
        let rooms = self.rooms(layout, &req);
        let usable = |node: &usize| rooms.get(*node).is_some_and(|r| r.eligible);
        if parts.iter().all(|(node, need)| usable(node) && idle_gpus(layout, *node) >= *need) {
            out.waiting.push((job.id, otherwise));
            return;
        }
        let replicas = job.gang.as_ref().map_or(1, |g| g.replicas.max(1));
        let shape = Shape {
            workers: replicas,
            per_worker: req.gpus.max(1),
            cpu_milli: req.cpu_milli,
            memory_mib: req.memory_mib,
            priority: job.priority,
        };
        let holders = self.holders(k, &req, layout, false);
        // The queue demotes the jobs cheapest to stop, blind to services: when those are
        // replicas of one service, which a pass stops one at a time, the room is looked for
        // again among every running job ranked below this one (a batch job goes before the
        // second replica).
        let replicas_in_the_way = || self.candidates.iter().any(|c| self.services[*c].is_some());
        let room = find_room(&shape, &rooms, &holders, parts).or_else(|| {
            replicas_in_the_way()
                .then(|| find_room(&shape, &rooms, &self.holders(k, &req, layout, true), parts))
                .flatten()
        });
        let Some(room) = room else {
            let why = "waiting: the GPUs it needs are held by jobs it may not preempt \
                       (of equal or higher priority, or of teams within their guarantee)";
            out.waiting.push((job.id, why.into()));
            return;
        };
        let picked: Vec<usize> = room.victims.iter().map(|c| *c as usize).collect();
        for c in &picked {
            self.chosen.insert(*c);
            self.stopped_services.extend(self.services[*c]);
            let nodes: Vec<usize> = self.view.jobs[*c].held.iter().map(|(n, _)| *n).collect();
            for node in &nodes {
                self.freeing[*node] += self.held_on(*c, *node);
                let (cpu, memory) = host_on(self.view, *c, *node);
                self.freeing_host[*node].0 += cpu;
                self.freeing_host[*node].1 += memory;
            }
            let victim = self.view.source[*c];
            out.preemptions.push(Preemption {
                job_id: victim.id,
                by: Some(job.id),
                reason: self.reason(k, *c),
            });
        }
        // Claim the room: idle GPUs, free CPU and memory are held for the job on the ledger
        // (nothing later in the pass takes them), the rest comes from what is being freed.
        for (node, need) in &room.parts {
            let workers = u64::from(need / shape.per_worker);
            let (cpu, memory) = (shape.cpu_milli * workers, shape.memory_mib * workers);
            let Some(n) = layout.cluster.node(*node) else { continue };
            let (take, take_cpu, take_memory) =
                (idle_gpus(layout, *node).min(*need), n.cpu_free.min(cpu), n.memory_free.min(memory));
            reserve(layout, *node, take, take_cpu, take_memory);
            self.freeing[*node] = self.freeing[*node].saturating_sub(need - take);
            let host = &mut self.freeing_host[*node];
            *host = (host.0.saturating_sub(cpu - take_cpu), host.1.saturating_sub(memory - take_memory));
        }
        let why = if picked.is_empty() {
            "waiting for preempted jobs to stop".to_owned()
        } else {
            let ids: Vec<String> = picked.iter().map(|c| self.view.source[*c].id.to_string()).collect();
            format!("waiting: preempting job {} to make room", ids.join(", "))
        };
        out.waiting.push((job.id, why));
    }

    /// What each node offers a job of request `req` now.
    fn rooms(&self, layout: &Layout<'_>, req: &Request) -> Vec<NodeRoom> {
        let per = req.gpus.max(1) as usize;
        layout
            .cluster
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| NodeRoom {
                eligible: n.schedulable
                    && req.models.allows(n.model)
                    && req.nodes.allows(n.tags)
                    && n.gpu_free.len() >= per,
                idle: idle_gpus(layout, i),
                freeing: self.freeing[i],
                cpu_free: n.cpu_free + self.freeing_host[i].0,
                memory_free: n.memory_free + self.freeing_host[i].1,
            })
            .collect()
    }

    /// The running jobs job `k` may stop, one [`Holder`] per node each holds GPUs on: the ones
    /// the queue says lost their place; for a job limited to some GPU models (which the queue
    /// does not see), or when `wide`, every running job ranked below it.
    fn holders(&self, k: usize, req: &Request, layout: &Layout<'_>, wide: bool) -> Vec<Holder> {
        // The queue counts GPUs blind to models and pools.
        let limited =
            layout.cluster.nodes().iter().any(|n| {
                !n.gpu_free.is_empty() && (!req.models.allows(n.model) || !req.nodes.allows(n.tags))
            });
        let below = |c: &usize| self.rank.get(*c).is_some_and(|r| *r > self.rank[k]);
        let mut pool: Vec<usize> = self.candidates.clone();
        if limited || wide {
            pool.extend(self.running.iter().filter(|(c, _)| below(c)).map(|(c, _)| *c));
            pool.sort_unstable();
            pool.dedup();
        }
        let mut out = Vec::new();
        let stopped = |c: &usize| self.services[*c].is_some_and(|s| self.stopped_services.contains(&s));
        for c in pool.into_iter().filter(|c| !self.chosen.contains(c) && *c != k && !stopped(c)) {
            for (node, _) in &self.view.jobs[c].held {
                let Some(victim) = self.victim(k, c, *node) else { continue };
                let (cpu_milli, memory_mib) = host_on(self.view, c, *node);
                let service = self.services[c];
                out.push(Holder { node: *node, victim, cpu_milli, memory_mib, service });
            }
        }
        out
    }

    /// GPUs job `c` frees on `node` when it stops: what it holds there, an elastic job's whole
    /// width (the queue counts it at its minimum, the GPUs above that as free).
    fn held_on(&self, c: usize, node: usize) -> u32 {
        let held = self.view.jobs[c].held.iter().filter(|(n, _)| *n == node).map(|(_, g)| g).sum();
        super::elastic::held(self.view.source[c], held)
    }

    /// Candidate `c` as a victim for job `k` on `node`, judged by the core's rules.
    fn victim(&self, k: usize, c: usize, node: usize) -> Option<Victim> {
        let gpus = self.held_on(c, node);
        if gpus == 0 {
            return None;
        }
        let by = self.contender(k);
        let judged = self.teams().judged_priority(&by, &self.contender(c));
        // A job that checkpoints yields to any job the queue ranks above it.
        let floor = by.priority.saturating_sub(1);
        let priority =
            if self.yields_to(k, c) { Some(judged.map_or(floor, |p| p.min(floor))) } else { judged }?;
        let victim = self.view.source[c];
        let running_s = (self.at - victim.started_at.unwrap_or(self.at)).max(0) as f64 / 1000.0;
        Some(Victim {
            id: c as u64,
            priority,
            gpus,
            lost_gpu_s: f64::from(self.view.jobs[c].gpus) * running_s,
        })
    }

    /// Whether `c` checkpoints and the queue ranks `k` above it.
    fn yields_to(&self, k: usize, c: usize) -> bool {
        self.yielding.contains(&c) && self.rank[c] > self.rank[k]
    }

    fn contender(&self, k: usize) -> Contender {
        let job = &self.view.jobs[k];
        Contender { team: job.team, priority: job.priority, gpus: job.gpus }
    }

    fn teams(&self) -> TeamsNow<'_> {
        TeamsNow {
            teams: &self.view.teams,
            held: &self.team_held,
            preempts_others: &self.view.preempts_others,
        }
    }

    fn reason(&self, k: usize, c: usize) -> String {
        let (by, job) = (self.view.source[k], self.view.source[c]);
        if by.priority > job.priority {
            format!("preempted by job {} (priority {} over {})", by.id, by.priority, job.priority)
        } else if self.yields_to(k, c) && !self.teams().reclaims(&self.contender(k), &self.contender(c)) {
            format!("preempted by job {}, which the queue ranks above it (it checkpoints)", by.id)
        } else {
            let name = |t: usize| self.view.names.get(t).copied().unwrap_or("?");
            let (mine, theirs) = (self.view.jobs[k].team, self.view.jobs[c].team);
            format!(
                "preempted by job {}: team {} reclaims GPUs team {} borrowed",
                by.id,
                name(mine),
                name(theirs)
            )
        }
    }
}

/// Wholly idle GPUs of a schedulable node.
fn idle_gpus(layout: &Layout<'_>, node: usize) -> u32 {
    layout
        .cluster
        .node(node)
        .filter(|n| n.schedulable)
        .map_or(0, |n| n.gpu_free.iter().filter(|f| **f == WHOLE_GPU).count() as u32)
}

/// Holds `gpus` idle GPUs, `cpu` and `memory` of `node` on the ledger for the rest of the pass.
fn reserve(layout: &mut Layout<'_>, node: usize, gpus: u32, cpu: u64, memory: u64) {
    let Some(n) = layout.cluster.node(node) else { return };
    let (req, idle) = if gpus == 0 {
        (Ok(Request::cpu_only(cpu, memory)), Some(Vec::new()))
    } else {
        (Request::new(cpu, memory, gpus, WHOLE_GPU, 0, ModelSet::Any), n.lowest_idle_gpus(gpus))
    };
    let (Ok(req), Some(idle)) = (req, idle) else { return };
    layout.next_id += 1;
    let _ = layout.cluster.allocate(layout.next_id, &req, &crate::Placement { node, gpus: idle });
}

/// CPU and memory job `k` holds on `node`: a gang's per worker there, a plain job's own.
fn host_on(view: &QueueView<'_>, k: usize, node: usize) -> (u64, u64) {
    let (job, r) = (&view.jobs[k], &view.source[k].request);
    let workers = if view.source[k].gang.is_some() {
        let per = job.worker_gpus.max(1);
        u64::from(job.held.iter().filter(|(n, _)| *n == node).map(|(_, g)| g / per).sum::<u32>())
    } else {
        1
    };
    (r.cpu_milli * workers, r.memory_mib * workers)
}
