//! What-if replay (`gantry whatif`): the cluster's own history on a changed fleet.
//!
//! The question an operator asks before buying GPUs is "what would my jobs have seen?", and
//! the answer open-simulator or cluster-capacity give ("what fits now") does not say it. Slurm's
//! simulator answers it by replaying a site's own history through the real scheduler; this
//! module does the same for Gantry. Its input is a list of [`ReplayJob`]s (what the cluster
//! recorded: arrival, GPUs, gang shape, models allowed, team, priority, run time and the model
//! it ran on) and a [`Fleet`]; its output, per fleet, the waits, completion times, GPU use and
//! cost the same jobs get there ([`report`]).
//!
//! - [`fleet`]: nodes, and the changes (`--add 4x8xH100`, `--remove`, `--replace V100:H100`);
//! - [`speed`]: run times on another GPU model, from the history or a speed table (Gavel's);
//! - [`engine`]: the event-driven replay through the core's queue and placement;
//! - [`report`]: per-fleet and per-team figures, with intervals over seeds.
//!
//! Seeds: seed 0 replays the history as recorded; every other seed scales each run time by a
//! log-normal factor (σ = 0.1, median 1) and breaks placement ties differently, so the
//! intervals say how much a figure depends on the exact run times of one history.
//!
//! Fidelity is checked the way Slurm's simulator was: replaying the unchanged fleet must give
//! back the recorded mean wait and mean completion time (within 5 % on the history the tests
//! build through `gantry up`). The reaction time of the real cluster (arrival or job end to the
//! pass that reacts, and placement to running) is taken from the history itself.

pub mod chart;
pub mod engine;
pub mod fleet;
pub mod report;
pub mod speed;

pub use engine::{Outcome, Replayed, Settings, replay};
pub use fleet::{Fleet, FleetChange, FleetError, FleetNode, NodeShape};
pub use report::{Comparison, Question, Summary, TeamRow, compare, summarize_recorded};
pub use speed::{Observed, SpeedModel, SpeedSource, SpeedTable};

use gantry_core::{RandomSource, SplitMix64};

/// One recorded job, as the replay needs it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReplayJob {
    /// The cluster's job id.
    pub id: u64,
    /// Its team.
    pub team: String,
    /// What identifies "the same job" across runs: its `job_type` label, else its name.
    pub key: String,
    /// Its priority.
    pub priority: i32,
    /// GPUs in all (a gang: workers × GPUs per worker).
    pub gpus: u32,
    /// GPUs per worker of a gang; 0 for a job on one node.
    pub gpus_per_worker: u32,
    /// Models it accepts (empty: any).
    pub models: Vec<String>,
    /// Submission, s since the history's start.
    pub submit_s: f64,
    /// Seconds it held its GPUs in its last attempt (placement to end), on `ran_on`.
    pub run_s: f64,
    /// The model it ran on.
    pub ran_on: Option<String>,
    /// Placement to running, s (the agent's start).
    pub start_delay_s: f64,
    /// Its GPUs' mean utilisation while it ran (0..1), when measured.
    pub util: Option<f64>,
    /// As recorded: when it started running and ended, s (the `recorded` column).
    pub recorded: Option<(f64, f64)>,
}

impl ReplayJob {
    /// GPUs of one worker: what must sit on one node.
    pub fn worker_gpus(&self) -> u32 {
        if self.gpus_per_worker == 0 { self.gpus.max(1) } else { self.gpus_per_worker }
    }
}

/// A team's share, as the cluster sets it.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamShare {
    /// Its name.
    pub name: String,
    /// GPUs guaranteed.
    pub guaranteed_gpus: u32,
    /// Fair-share weight.
    pub weight: f64,
}

/// The jobs of seed `seed`: as recorded for 0, else with run times scaled by a log-normal
/// factor of σ = 0.1 drawn per job.
pub fn perturbed(jobs: &[ReplayJob], seed: u64) -> Vec<ReplayJob> {
    if seed == 0 {
        return jobs.to_vec();
    }
    let mut rng = SplitMix64::new(seed ^ 0x5eed_0f7a_11ed);
    let mut uniform = move || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    jobs.iter()
        .map(|j| {
            // Box–Muller: one standard normal draw from two uniforms.
            let (u1, u2) = (uniform().max(1e-12), uniform());
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            ReplayJob { run_s: j.run_s * (0.1 * z).exp(), ..j.clone() }
        })
        .collect()
}

#[cfg(test)]
mod tests;
