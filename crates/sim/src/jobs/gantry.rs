//! The `gantry` policy: the simulator's adapter onto [`gantry_core::queue::plan`], the same
//! entry point the server's scheduling pass uses. It reads nothing the server could not know:
//! arrival, GPUs asked, service received and time waited; never the remaining duration.
//!
//! Teams come from the workload (or round-robin); each is guaranteed an even split of
//! `team_guarantee` × the cluster and may borrow idle GPUs up to `borrow_limit` beyond it.
//!
//! Under `--elastic` it calls [`gantry_core::queue::plan_elastic`] instead: the same admission at
//! each job's minimum, then widths from the goodput curves the jobs report.

use std::collections::HashMap;

use gantry_core::queue::{self, Decision, ElasticJob, ElasticSettings, QueueWeights, QueuedJob, Team, Usage};

use super::engine::{ClusterShape, JobPolicy, JobView};

/// Gantry's queue as a job-simulator policy.
#[derive(Debug)]
pub struct GantryPolicy {
    weights: QueueWeights,
    usage: Usage,
    /// Per job: seconds waited so far.
    waited: HashMap<usize, f64>,
    last_now: Option<u64>,
    /// Resize elastic jobs, paying `restart_s` per change.
    elastic: Option<f64>,
}

impl GantryPolicy {
    /// A policy with these weights.
    pub fn new(weights: QueueWeights) -> Self {
        Self { weights, usage: Usage::new(0, 0.0), waited: HashMap::new(), last_now: None, elastic: None }
    }

    /// A policy that resizes elastic jobs, each change costing `restart_s` seconds.
    pub fn elastic(weights: QueueWeights, restart_s: f64) -> Self {
        Self { elastic: Some(restart_s), ..Self::new(weights) }
    }

    fn account(&mut self, now: u64, jobs: &[JobView<'_>]) {
        let dt = self.last_now.map_or(0, |t| now.saturating_sub(t)) as f64;
        self.usage.decay_to(now as f64, self.weights.half_life_s);
        for job in jobs {
            let waited = self.waited.entry(job.id).or_insert(0.0);
            if job.alloc.is_empty() {
                // Waiting since submission or since the last round, whichever is later.
                *waited += dt.min(now as f64 - job.row.submit).max(0.0);
            } else {
                self.usage.charge(job.team, dt * job.alloc.len() as f64);
            }
        }
        self.last_now = Some(now);
    }
}

impl JobPolicy for GantryPolicy {
    fn elastic(&self) -> bool {
        self.elastic.is_some()
    }

    fn schedule(&mut self, now: u64, jobs: &[JobView<'_>], shape: &ClusterShape) -> Vec<Vec<usize>> {
        self.account(now, jobs);
        let team_count = jobs.iter().map(|j| j.team + 1).max().unwrap_or(1);
        let each =
            (f64::from(shape.total_gpus()) * self.weights.team_guarantee / team_count as f64).floor() as u32;
        let teams = vec![Team { guaranteed_gpus: each, weight: 1.0 }; team_count];
        let queued: Vec<QueuedJob> = jobs
            .iter()
            .map(|j| QueuedJob {
                id: j.id as u64,
                team: j.team,
                priority: j.row.priority,
                submitted_s: j.row.submit,
                gpus: j.min_gpus,
                worker_gpus: 1,
                attained_gpu_s: j.attained_gpu_s,
                waited_s: self.waited.get(&j.id).copied().unwrap_or(0.0),
                held: parts(j.alloc),
                preemptible: true,
            })
            .collect();
        let capacity = vec![shape.gpus_per_node; shape.nodes as usize];
        if let Some(restart_s) = self.elastic {
            let info: Vec<ElasticJob> = jobs
                .iter()
                .map(|j| ElasticJob {
                    max_gpus: j.max_gpus,
                    speedup: j.speedup.to_vec(),
                    age_s: j.first_start.map_or(0.0, |t| now.saturating_sub(t) as f64),
                    since_change_s: j.last_change.map_or(0.0, |t| now.saturating_sub(t) as f64),
                })
                .collect();
            let settings = ElasticSettings { restart_s, resize_margin: self.weights.resize_margin };
            let parts =
                queue::plan_elastic(&self.weights, &teams, &queued, &info, &self.usage, &capacity, settings);
            return parts.iter().map(|p| gpus_of(p)).collect();
        }
        let decisions = queue::plan(&self.weights, &teams, &queued, &self.usage, &capacity);
        decisions
            .into_iter()
            .zip(jobs)
            .map(|(d, j)| match d {
                Decision::Keep { .. } => j.alloc.to_vec(),
                Decision::Start { nodes, .. } => gpus_of(&nodes),
                Decision::Preempt { .. } | Decision::Wait { .. } => Vec::new(),
            })
            .collect()
    }
}

/// (node, GPUs) parts → node index per GPU.
fn gpus_of(parts: &[(usize, u32)]) -> Vec<usize> {
    parts.iter().flat_map(|(node, n)| std::iter::repeat_n(*node, *n as usize)).collect()
}

/// Node index per GPU → (node, GPUs) in first-seen order.
fn parts(alloc: &[usize]) -> Vec<(usize, u32)> {
    let mut out: Vec<(usize, u32)> = Vec::new();
    for node in alloc {
        match out.iter_mut().find(|p| p.0 == *node) {
            Some(p) => p.1 += 1,
            None => out.push((*node, 1)),
        }
    }
    out
}
