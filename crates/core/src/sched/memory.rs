//! What the scheduling loop remembers between passes, and how a carried-out decision changes
//! it: the teams' decayed GPU usage (fair share, charged every pass for the GPUs active jobs
//! hold), the width each resize named until the job is placed again, and the job each
//! preempted job was stopped for.

use std::collections::HashMap;

use gantry_api::model::{Gang, Job, JobId};

use super::decision::Decision;
use super::elastic;
use super::snapshot::QueueInput;

/// The queue's memory between passes (see the module doc).
#[derive(Debug, Default)]
pub struct Memory {
    input: QueueInput,
    at_ms: Option<i64>,
}

impl Memory {
    /// A memory whose queue runs with `weights` (the job simulator's `--gantry-weights`);
    /// [`Memory::default`] has the server's.
    pub fn with_weights(weights: crate::queue::QueueWeights) -> Self {
        Self { input: QueueInput { weights, ..QueueInput::default() }, at_ms: None }
    }

    /// Charges each team, since the last charge, for the GPUs its `active` jobs hold at
    /// `now_ms`; a gang is charged for all its workers once.
    pub fn charge(&mut self, active: &[Job], now_ms: i64) {
        let dt = self.at_ms.map_or(0.0, |t| (now_ms - t).max(0) as f64 / 1000.0);
        self.at_ms = Some(now_ms);
        let q = &mut self.input;
        let half_life = q.weights.half_life_s;
        q.usage.decay_to(now_ms as f64 / 1000.0, half_life);
        for job in active.iter().filter(|j| !j.gang.as_ref().is_some_and(Gang::is_worker)) {
            let team = match q.teams.iter().position(|t| *t == job.team) {
                Some(i) => i,
                None => {
                    q.teams.push(job.team.clone());
                    q.teams.len() - 1
                }
            };
            let replicas = job.gang.as_ref().map_or(1, |g| g.replicas.max(1));
            let gpus = elastic::held(job, job.request.gpus.max(u32::from(job.request.gpu_memory_mib > 0)));
            q.usage.charge(team, dt * f64::from(gpus * replicas));
        }
    }

    /// Forgets jobs `knows` no longer knows (ended), and preemptions for them.
    pub fn retain(&mut self, knows: impl Fn(JobId) -> bool) {
        self.input.widths.retain(|id, _| knows(*id));
        self.input.preempted_for.retain(|id, by| knows(*id) && knows(*by));
    }

    /// The queue's input for a pass, with `resize_gap_ms` between two resizes of a job.
    pub fn queue_input(&self, resize_gap_ms: i64) -> QueueInput {
        QueueInput { resize_gap_ms, ..self.input.clone() }
    }

    /// Notes a decision that was carried out: a placement ends a resize's promise, a resize
    /// makes one, a preemption remembers whom its victim was stopped for.
    pub fn carried_out(&mut self, decision: &Decision) {
        let q = &mut self.input;
        match decision {
            Decision::Place(p) => {
                q.widths.remove(&p.job_id);
            }
            Decision::Resize(r) => {
                q.widths.insert(r.job_id, r.to);
            }
            Decision::Preempt(p) => {
                if let Some(by) = p.by {
                    q.preempted_for.insert(p.job_id, by);
                }
            }
            Decision::PlaceGang(_)
            | Decision::Borrow(_)
            | Decision::FailDependency { .. }
            | Decision::Wait { .. }
            | Decision::Stage(_) => {}
        }
    }
}

/// The width a resize named for each job, as the loop remembers it (tests).
impl Memory {
    /// The remembered widths.
    pub fn widths(&self) -> &HashMap<JobId, u32> {
        &self.input.widths
    }
}
