//! Who may preempt whom: priority within a team, guarantees across teams.
//!
//! Priority orders a team's own queue and lets its jobs stop the team's lower-priority jobs; it
//! does not let one team take another's running GPUs (Slurm's QOS `Preempt` list, KAI's
//! in-quota vs over-quota). Across teams a job may stop another team's job only when
//! - its team reclaims its guarantee: the preemptor fits within its team's guaranteed GPUs
//!   (counting what the team holds), and the victim's team holds more than its own guarantee,
//!   the victim being of no higher priority; such a victim is judged one level below the
//!   preemptor, so an equal-priority borrower can be stopped; or
//! - an admin let the preemptor's team preempt other teams (`preempt_other_teams`), and then by
//!   priority as within a team.

use crate::queue::Team;

/// A job as the rules see it: its team (an index into the teams), priority and whole GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contender {
    /// Team index.
    pub team: usize,
    /// Priority.
    pub priority: i32,
    /// Whole GPUs (all workers of a gang).
    pub gpus: u32,
}

/// The teams at the start of a pass.
#[derive(Debug, Clone, Copy)]
pub struct TeamsNow<'a> {
    /// Guarantees, by team index.
    pub teams: &'a [Team],
    /// Whole GPUs each team holds now.
    pub held: &'a [u32],
    /// Whether each team may preempt other teams by priority.
    pub preempts_others: &'a [bool],
}

impl TeamsNow<'_> {
    fn guarantee(&self, team: usize) -> u32 {
        self.teams.get(team).map_or(0, |t| t.guaranteed_gpus)
    }

    fn held(&self, team: usize) -> u32 {
        self.held.get(team).copied().unwrap_or(0)
    }

    /// Whether `by` reclaims its team's guarantee from `victim`'s team (see the module doc).
    pub fn reclaims(&self, by: &Contender, victim: &Contender) -> bool {
        by.team != victim.team
            && victim.priority <= by.priority
            && self.held(by.team) + by.gpus <= self.guarantee(by.team)
            && self.held(victim.team) > self.guarantee(victim.team)
    }

    /// The priority `victim` is judged by as a victim of `by` ([`crate::queue::choose_victims`]
    /// takes only strictly lower ones), or `None` when `by` may not stop it at all.
    pub fn judged_priority(&self, by: &Contender, victim: &Contender) -> Option<i32> {
        if self.reclaims(by, victim) {
            return Some(by.priority.saturating_sub(1));
        }
        let may_cross = self.preempts_others.get(by.team).copied().unwrap_or(false);
        (by.team == victim.team || may_cross).then_some(victim.priority)
    }
}
