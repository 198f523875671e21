//! The queue's input ([`crate::queue::QueuedJob`]s, teams, capacity) built from a snapshot.

use std::collections::HashMap;

use gantry_api::model::Job;

use super::decision::Plan;
use super::layout::{Layout, to_request, whole_gpus};
use super::plan::{is_gang, is_worker};
use super::reasons::never_fits;
use super::snapshot::Snapshot;
use crate::Request;
use crate::queue::{self, QueuedJob, Usage};

/// The queue's input built from a snapshot: jobs (pending first, then active), teams, capacity.
pub(super) struct QueueView<'a> {
    pub(super) jobs: Vec<QueuedJob>,
    pub(super) source: Vec<&'a Job>,
    pub(super) teams: Vec<queue::Team>,
    pub(super) usage: Usage,
    pub(super) capacity: Vec<u32>,
    /// Team names in the index order of `teams`.
    pub(super) names: Vec<&'a str>,
    /// Whether each team (same order) may preempt other teams' jobs by priority.
    pub(super) preempts_others: Vec<bool>,
}

impl<'a> QueueView<'a> {
    pub(super) fn build(s: &'a Snapshot, layout: &Layout<'a>, out: &mut Plan) -> Self {
        let mut names: Vec<&str> = s.queue.teams.iter().map(String::as_str).collect();
        let mut team_index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let mut index_of = |team: &'a str| {
            *team_index.entry(team).or_insert_with(|| {
                names.push(team);
                names.len() - 1
            })
        };
        let largest = layout.cluster.nodes().iter().map(|n| n.gpu_free.len() as u32).max().unwrap_or(0);
        let mut view = QueueView {
            jobs: Vec::with_capacity(s.pending.len() + s.active.len()),
            source: Vec::with_capacity(s.pending.len() + s.active.len()),
            teams: Vec::new(),
            usage: s.queue.usage.clone(),
            capacity: layout.idle_whole_gpus(),
            names: Vec::new(),
            preempts_others: Vec::new(),
        };
        let secs = |ms: i64| ms as f64 / 1000.0;
        let mut usable = HashMap::new();
        for job in s.pending.iter().filter(|j| !is_worker(j)) {
            let Some(req) = to_request(job, layout.max_gpu_memory) else {
                out.waiting.push((job.id, "the request is not valid for the scheduler".into()));
                continue;
            };
            if whole_gpus(&req) > largest {
                out.waiting.push((job.id, layout.why_not(&req)));
                continue;
            }
            // The queue counts GPUs, not models: a job no set of nodes of its GPU models could
            // ever hold would keep a reservation on GPUs it cannot use. It waits outside the queue.
            if let Some(why) = never_fits(layout, job, &mut usable) {
                out.waiting.push((job.id, why));
                continue;
            }
            if let Some(why) = layout.pools.refuses(job) {
                out.waiting.push((job.id, why));
                continue;
            }
            view.push(job, index_of(&job.team), &req, Vec::new(), secs(s.at - job.submitted_at));
        }
        // A gang holds what its workers hold.
        let mut gang_held: HashMap<i64, Vec<(usize, u32)>> = HashMap::new();
        for w in s.active.iter().filter(|j| is_worker(j)) {
            let (Some(gang), Some(node)) = (
                w.gang.as_ref().map(|g| g.id),
                w.node_id.as_deref().and_then(|n| layout.index.get(n).copied()),
            ) else {
                continue;
            };
            view.capacity[node] += w.request.gpus;
            let parts = gang_held.entry(gang).or_default();
            match parts.iter_mut().find(|(n, _)| *n == node) {
                Some((_, held)) => *held += w.request.gpus,
                None => parts.push((node, w.request.gpus)),
            }
        }
        for job in s.active.iter().filter(|j| is_gang(j)) {
            let Some(req) = to_request(job, layout.max_gpu_memory) else { continue };
            let held = gang_held.remove(&job.id).unwrap_or_default();
            let waited = secs(job.started_at.unwrap_or(s.at) - job.submitted_at);
            view.push(job, index_of(&job.team), &req, held, waited);
        }
        // A borrower runs on GPUs their owners hold: outside the queue (see `super::lend`).
        let borrowers = super::lend::borrowers(s);
        for job in s.active.iter().filter(|j| j.gang.is_none() && !borrowers.contains(&j.id)) {
            let (Some(req), Some(node)) = (
                to_request(job, layout.max_gpu_memory),
                job.node_id.as_deref().and_then(|n| layout.index.get(n).copied()),
            ) else {
                continue;
            };
            let gpus = whole_gpus(&req);
            // An elastic job is held at its minimum: what it runs on above that counts as free.
            view.capacity[node] += super::elastic::held(job, gpus);
            let waited = secs(job.started_at.unwrap_or(s.at) - job.submitted_at);
            view.push(job, index_of(&job.team), &req, vec![(node, gpus)], waited);
        }
        let quotas: HashMap<&str, u32> =
            s.teams.iter().filter_map(|t| Some((t.name.as_str(), t.gpu_quota?))).collect();
        view.teams = names
            .iter()
            .map(|n| queue::Team { guaranteed_gpus: quotas.get(n).copied().unwrap_or(0), weight: 1.0 })
            .collect();
        let preempting: std::collections::HashSet<&str> =
            s.teams.iter().filter(|t| t.preempts_other_teams()).map(|t| t.name.as_str()).collect();
        view.preempts_others = names.iter().map(|n| preempting.contains(n)).collect();
        view.names = names;
        // A job that checkpoints is ranked by the service it received (its band); others are
        // in band 0.
        if !s.queue.checkpointing.is_empty() {
            for (q, job) in view.jobs.iter_mut().zip(&view.source) {
                q.attained_gpu_s = s.queue.checkpointing.get(&job.id).copied().unwrap_or(0.0);
            }
        }
        view
    }

    fn push(&mut self, job: &'a Job, team: usize, req: &Request, held: Vec<(usize, u32)>, waited_s: f64) {
        // A plain job runs on one node; a gang splits only between its workers.
        let replicas = job.gang.as_ref().map_or(1, |g| g.replicas.max(1));
        self.jobs.push(QueuedJob {
            id: self.jobs.len() as u64,
            team,
            priority: job.priority,
            submitted_s: job.submitted_at as f64 / 1000.0,
            gpus: whole_gpus(req) * replicas,
            worker_gpus: whole_gpus(req),
            attained_gpu_s: 0.0,
            waited_s: waited_s.max(0.0),
            held,
            preemptible: true,
        });
        self.source.push(job);
    }
}
