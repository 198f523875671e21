//! The server's recorded history turned into jobs a replay can run.
//!
//! A job counts once it ran to an end: its run time is its last attempt's (placement to end,
//! on the model it ran on), its wait and completion time as recorded come from its first start
//! and last end. Jobs still pending or running when the history was read, and jobs cancelled
//! before they ran, are left out and counted. The cluster's reaction time, from an arrival or
//! a job end to the placement that follows it, is measured here too: the median over every
//! placement of the gap to the latest of its job's submission and the last job end before it.

use gantry_api::history::{HistoryJob, HistoryResponse};
use gantry_sim::whatif::{Fleet, FleetNode, Observed, ReplayJob, TeamShare};

/// What the history gave.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Jobs that ran to an end, oldest first.
    pub jobs: Vec<ReplayJob>,
    /// The fleet now.
    pub fleet: Fleet,
    /// Teams and their guarantees.
    pub teams: Vec<TeamShare>,
    /// Run times by job and model.
    pub observed: Observed,
    /// Median reaction time, s.
    pub pass_delay_s: f64,
    /// Jobs left out (still queued or running, or never ran).
    pub left_out: usize,
    /// Jobs that ran on no GPU (not replayed).
    pub cpu_only: usize,
}

fn secs(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

/// Converts the history; times become seconds since its first submission.
pub fn convert(h: &HistoryResponse) -> Recorded {
    let t0 = h.jobs.iter().map(|j| j.submitted_at).min().unwrap_or(h.since);
    let mut out = Recorded {
        jobs: Vec::new(),
        fleet: Fleet {
            nodes: h
                .nodes
                .iter()
                .filter(|n| n.gpus > 0)
                .map(|n| FleetNode { name: n.id.clone(), gpus: n.gpus, model: n.model.clone() })
                .collect(),
        },
        teams: h
            .teams
            .iter()
            .map(|t| TeamShare { name: t.name.clone(), guaranteed_gpus: t.guaranteed_gpus, weight: 1.0 })
            .collect(),
        observed: Observed::default(),
        pass_delay_s: 0.0,
        left_out: 0,
        cpu_only: 0,
    };
    for j in &h.jobs {
        if j.gpus == 0 {
            out.cpu_only += 1;
            continue;
        }
        match replay_job(j, t0) {
            Some(job) => {
                if let Some(model) = &job.ran_on {
                    out.observed.record(&job.key, model, job.run_s);
                }
                out.jobs.push(job);
            }
            None => out.left_out += 1,
        }
    }
    out.pass_delay_s = reaction_s(&h.jobs);
    out
}

fn replay_job(j: &HistoryJob, t0: i64) -> Option<ReplayJob> {
    let last = j.attempts.iter().rev().find(|a| a.finished_at.is_some())?;
    let first_start = j.attempts.iter().find_map(|a| a.started_at)?;
    let finished = last.finished_at?;
    if j.attempts.last().is_some_and(|a| a.finished_at.is_none()) {
        return None;
    }
    let started = last.started_at.unwrap_or(last.placed_at);
    let gpus = j.gpus * j.workers.max(1);
    let held_s: f64 =
        j.attempts.iter().filter_map(|a| Some(secs(a.finished_at? - a.placed_at).max(0.0))).sum();
    let util =
        j.used_gpu_s.filter(|_| held_s > 0.0).map(|u| (u / (f64::from(gpus) * held_s)).clamp(0.0, 1.0));
    Some(ReplayJob {
        id: j.id as u64,
        team: j.team.clone(),
        key: j.job_type.clone().unwrap_or_else(|| j.name.clone()),
        priority: j.priority,
        gpus,
        gpus_per_worker: if j.workers > 1 { j.gpus } else { 0 },
        models: j.gpu_models.clone(),
        submit_s: secs(j.submitted_at - t0),
        run_s: secs(finished - last.placed_at).max(0.0),
        ran_on: last.model.clone(),
        start_delay_s: secs(started - last.placed_at).max(0.0),
        util,
        recorded: Some((secs(first_start - t0), secs(finished - t0))),
    })
}

/// The median gap from what a placement waited for (its submission, or the last job end
/// before it, whichever is later) to the placement.
fn reaction_s(jobs: &[HistoryJob]) -> f64 {
    let mut ends: Vec<i64> =
        jobs.iter().flat_map(|j| j.attempts.iter().filter_map(|a| a.finished_at)).collect();
    ends.sort_unstable();
    let mut gaps: Vec<i64> = Vec::new();
    for j in jobs {
        for a in &j.attempts {
            let before = ends.partition_point(|e| *e <= a.placed_at);
            let last_end = before.checked_sub(1).map_or(i64::MIN, |i| ends[i]);
            gaps.push((a.placed_at - j.submitted_at.max(last_end)).max(0));
        }
    }
    gaps.sort_unstable();
    gaps.get(gaps.len() / 2).map_or(0.0, |g| secs(*g))
}

#[cfg(test)]
mod tests {
    use gantry_api::history::{HistoryAttempt, HistoryNode};
    use gantry_api::model::JobState;

    use super::*;

    fn attempt(placed_at: i64, started_at: i64, finished_at: Option<i64>) -> HistoryAttempt {
        HistoryAttempt {
            placed_at,
            started_at: Some(started_at),
            finished_at,
            outcome: finished_at.map(|_| JobState::Succeeded),
            model: Some("T4".into()),
        }
    }

    fn job(id: i64, submitted_at: i64, attempts: Vec<HistoryAttempt>) -> HistoryJob {
        HistoryJob {
            id,
            team: "a".into(),
            name: format!("j{id}"),
            job_type: None,
            priority: 0,
            gpus: 2,
            workers: 1,
            gpu_milli: 1000,
            gpu_models: vec![],
            submitted_at,
            state: JobState::Succeeded,
            attempts,
            used_gpu_s: None,
        }
    }

    #[test]
    fn finished_jobs_become_replay_jobs_and_running_ones_are_left_out() {
        let h = HistoryResponse {
            since: 0,
            until: 100_000,
            nodes: vec![HistoryNode { id: "n".into(), gpus: 4, model: "T4".into() }],
            teams: vec![],
            jobs: vec![
                job(1, 10_000, vec![attempt(10_100, 10_300, Some(20_100))]),
                job(2, 11_000, vec![attempt(20_200, 20_400, Some(25_000))]),
                job(3, 12_000, vec![attempt(25_100, 25_300, None)]),
            ],
        };
        let r = convert(&h);
        assert_eq!(r.left_out, 1);
        assert_eq!(r.jobs.len(), 2);
        let j = &r.jobs[1];
        assert_eq!((j.submit_s, j.run_s, j.start_delay_s), (1.0, 4.8, 0.2));
        assert_eq!(j.recorded, Some((10.4, 15.0)));
        // Gaps: 100 ms after job 1's submission, 100 after job 1's end, 100 after job 2's.
        assert!((r.pass_delay_s - 0.1).abs() < 1e-9, "{}", r.pass_delay_s);
        assert_eq!(r.fleet.gpus(), 4);
    }
}
