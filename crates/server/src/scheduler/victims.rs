//! Which running jobs to stop for a job the queue started but that cannot get its GPUs yet.
//!
//! The queue says which running jobs lost their place; stopping all of them would lose work
//! nobody needs. For each started job that finds no room, [`gantry_core::queue::choose_victims`]
//! picks, on each node the queue chose for it, the smallest set among them that frees what it
//! needs: lowest priority first, then least GPU-time lost, never a job of equal or higher
//! priority. Priority preempts only within a team (Slurm's QOS `Preempt` list, KAI's in-quota
//! vs over-quota): another team's job is a victim only when the preemptor's team reclaims its
//! guarantee from a team that borrows beyond its own (then at equal priority too), or when an
//! admin let the preemptor's team preempt other teams (`preempt_other_teams`). GPUs that jobs already
//! stopping will free count as free, so a job waiting for its victims to stop asks for no more.
//! A gang is a victim as a whole (its GPUs on that node are what it frees there).

use std::collections::HashSet;

use gantry_core::queue::{Decision, Victim, choose_victims};
use gantry_core::resources::WHOLE_GPU;
use gantry_core::{ModelSet, Request};
use gantry_store::JobState;

use super::plan::{Layout, Plan, Preemption, QueueView};

/// Candidates and what is already being freed, across one pass.
pub(super) struct Victims<'v, 'a> {
    view: &'v QueueView<'a>,
    /// Running jobs (indices into the view) the queue says lost their place.
    candidates: Vec<usize>,
    /// Already picked this pass.
    chosen: HashSet<usize>,
    /// Per node, GPUs that jobs stopping will free and no started job has claimed yet.
    freeing: Vec<u32>,
    /// Whole GPUs each team holds now.
    team_held: Vec<u32>,
    at: i64,
}

impl<'v, 'a> Victims<'v, 'a> {
    pub(super) fn new(view: &'v QueueView<'a>, decisions: &[Decision], layout: &Layout<'_>, at: i64) -> Self {
        let mut freeing = vec![0u32; layout.cluster.nodes().len()];
        let mut team_held = vec![0u32; view.teams.len()];
        let mut candidates = Vec::new();
        for (k, job) in view.jobs.iter().enumerate() {
            let source = view.source[k];
            for (node, gpus) in &job.held {
                team_held[job.team] += gpus;
                if source.stop.is_some() {
                    freeing[*node] += gpus;
                }
            }
            let lost = matches!(decisions[k], Decision::Preempt { .. });
            if lost && source.stop.is_none() && source.state == JobState::Running {
                candidates.push(k);
            }
        }
        Self { view, candidates, chosen: HashSet::new(), freeing, team_held, at }
    }

    /// Frees `parts` ((node, GPUs)) for job `k`, which waits: picks victims on each node, or
    /// none at all when some node cannot be freed. Records the preemptions and why `k` waits
    /// (`otherwise` when its GPUs are idle already and something else keeps it out).
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
            self.candidates.retain(|c| !out.resizes.iter().any(|r| r.job_id == view.source[*c].id));
        }
        if parts.iter().all(|(node, need)| idle_gpus(layout, *node) >= *need) {
            out.waiting.push((job.id, otherwise));
            return;
        }
        let mut picked: Vec<usize> = Vec::new();
        let mut idle_per_part = Vec::with_capacity(parts.len());
        for (node, need) in parts {
            let idle = idle_gpus(layout, *node);
            let freed_here: u32 = picked.iter().map(|c| self.held_on(*c, *node)).sum();
            let candidates: Vec<Victim> = self
                .candidates
                .iter()
                .filter(|c| !self.chosen.contains(c) && !picked.contains(c))
                .filter_map(|c| self.victim(k, *c, *node))
                .collect();
            let free = idle + self.freeing[*node] + freed_here;
            match choose_victims(*need, free, job.priority, &candidates) {
                Some(ids) => picked.extend(ids.into_iter().map(|id| id as usize)),
                None => {
                    let why = "waiting: the GPUs it needs are held by jobs it may not preempt \
                               (of equal or higher priority, or of teams within their guarantee)";
                    out.waiting.push((job.id, why.into()));
                    return;
                }
            }
            idle_per_part.push(idle);
        }
        for c in &picked {
            self.chosen.insert(*c);
            for (node, gpus) in &self.view.jobs[*c].held {
                self.freeing[*node] += gpus;
            }
            let victim = self.view.source[*c];
            out.preemptions.push(Preemption {
                job_id: victim.id,
                by: Some(job.id),
                reason: self.reason(k, *c),
            });
        }
        // Claim the room: idle GPUs are held for the job on the ledger (nothing later in the
        // pass takes them), the rest comes from the GPUs being freed.
        for ((node, need), idle) in parts.iter().zip(idle_per_part) {
            let take = idle.min(*need);
            reserve(layout, *node, take);
            self.freeing[*node] = self.freeing[*node].saturating_sub(need - take);
        }
        let why = if picked.is_empty() {
            "waiting for preempted jobs to stop".to_owned()
        } else {
            let ids: Vec<String> = picked.iter().map(|c| self.view.source[*c].id.to_string()).collect();
            format!("waiting: preempting job {} to make room", ids.join(", "))
        };
        out.waiting.push((job.id, why));
    }

    fn held_on(&self, c: usize, node: usize) -> u32 {
        self.view.jobs[c].held.iter().filter(|(n, _)| *n == node).map(|(_, g)| g).sum()
    }

    /// Candidate `c` as a victim for job `k` on `node`; the priority it is judged by is one
    /// below `k`'s when `k` reclaims its team's guarantee from a borrower.
    fn victim(&self, k: usize, c: usize, node: usize) -> Option<Victim> {
        let gpus = self.held_on(c, node);
        if gpus == 0 {
            return None;
        }
        let victim = self.view.source[c];
        let (me, them) = (self.view.jobs[k].team, self.view.jobs[c].team);
        let may_preempt_others = self.view.preempts_others.get(me).copied().unwrap_or(false);
        if me != them && !may_preempt_others && !self.reclaims(k, c) {
            return None;
        }
        let priority = if self.reclaims(k, c) {
            self.view.source[k].priority.saturating_sub(1)
        } else {
            victim.priority
        };
        let running_s = (self.at - victim.started_at.unwrap_or(self.at)).max(0) as f64 / 1000.0;
        Some(Victim {
            id: c as u64,
            priority,
            gpus,
            lost_gpu_s: f64::from(self.view.jobs[c].gpus) * running_s,
        })
    }

    /// Whether `k` is within its team's guarantee and `c` is another team's job, of no higher
    /// priority, whose team holds more than its guarantee.
    fn reclaims(&self, k: usize, c: usize) -> bool {
        let (me, them) = (&self.view.jobs[k], &self.view.jobs[c]);
        let guarantee = |team: usize| self.view.teams.get(team).map_or(0, |t| t.guaranteed_gpus);
        me.team != them.team
            && them.priority <= me.priority
            && self.team_held[me.team] + me.gpus <= guarantee(me.team)
            && self.team_held[them.team] > guarantee(them.team)
    }

    fn reason(&self, k: usize, c: usize) -> String {
        let (by, job) = (self.view.source[k], self.view.source[c]);
        if by.priority > job.priority {
            format!("preempted by job {} (priority {} over {})", by.id, by.priority, job.priority)
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

/// Holds `gpus` idle GPUs of `node` on the ledger for the rest of the pass.
fn reserve(layout: &mut Layout<'_>, node: usize, gpus: u32) {
    let Some(idle) = layout.cluster.node(node).and_then(|n| n.lowest_idle_gpus(gpus)) else { return };
    let Ok(req) = Request::new(0, 0, gpus, WHOLE_GPU, 0, ModelSet::Any) else { return };
    layout.next_id += 1;
    let _ = layout.cluster.allocate(layout.next_id, &req, &gantry_core::Placement { node, gpus: idle });
}
