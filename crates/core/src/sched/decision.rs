//! What a pass decides, as values: [`Decision`] is one decision, [`Plan`] the same decisions
//! grouped by kind (what tests and benchmarks read). The server turns each decision into a
//! command; the simulator applies it to its virtual cluster.

use gantry_api::model::JobId;

pub use super::elastic::Resize;
pub use super::stage::Stage;

/// One GPU (or slice of one) of a placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Which GPU.
    pub uuid: String,
    /// Compute share in milli-GPU (1000 = whole).
    pub share_milli: u32,
    /// GPU memory granted, MiB.
    pub memory_mib: u64,
}

/// A job placed on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The job.
    pub job_id: JobId,
    /// The node.
    pub node_id: String,
    /// The node epoch the decision was made under.
    pub epoch: u64,
    /// What each GPU gives.
    pub grants: Vec<Grant>,
    /// ms since the epoch.
    pub at: i64,
}

/// A gang placed: every worker at once, in rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangPlace {
    /// The gang.
    pub gang_id: JobId,
    /// One placement per worker, by rank (`job_id` is the worker's id).
    pub workers: Vec<Place>,
    /// ms since the epoch.
    pub at: i64,
}

/// A running job the pass asks to stop and requeue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    /// The victim.
    pub job_id: i64,
    /// The job it makes room for.
    pub by: Option<i64>,
    /// Why, in words (`gantry job` shows it).
    pub reason: String,
}

/// One decision of a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A pending job whose dependency can never be met ends with this reason.
    FailDependency {
        /// The job.
        job: JobId,
        /// Why, in words.
        reason: String,
    },
    /// A job starts on a node.
    Place(Place),
    /// A gang starts, every worker at once.
    PlaceGang(GangPlace),
    /// A preemptible job starts on GPUs their idle owner lent (see `super::lend`).
    Borrow(Place),
    /// A running job is stopped and requeued for another.
    Preempt(Preemption),
    /// A running elastic job is stopped to restart at another width.
    Resize(Resize),
    /// A pending job's inputs are staged on a node before it is placed there.
    Stage(Stage),
    /// A pending job keeps waiting, and why.
    Wait {
        /// The job.
        job: JobId,
        /// Why, in words (`gantry jobs` shows it).
        reason: String,
    },
}

/// What a pass decided, grouped by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Jobs whose dependency can never be met, with the reason they end with.
    pub failed: Vec<(JobId, String)>,
    /// Placements, in queue order.
    pub placements: Vec<Place>,
    /// Gangs placed, every worker at once.
    pub gangs: Vec<GangPlace>,
    /// Preemptible jobs placed on lent GPUs.
    pub borrows: Vec<Place>,
    /// Why each pending job that was not placed waits.
    pub waiting: Vec<(i64, String)>,
    /// Running jobs to stop and requeue.
    pub preemptions: Vec<Preemption>,
    /// Running elastic jobs to restart at another width.
    pub resizes: Vec<Resize>,
    /// Pending jobs whose inputs are to be staged on a node first.
    pub stages: Vec<Stage>,
}

impl Plan {
    /// The decisions in the order they are carried out: failed dependencies, placements, gangs,
    /// borrows, preemptions, resizes, stagings, then why the others wait.
    pub fn into_decisions(self) -> Vec<Decision> {
        let failed = self.failed.into_iter().map(|(job, reason)| Decision::FailDependency { job, reason });
        let waits = self.waiting.into_iter().map(|(job, reason)| Decision::Wait { job, reason });
        failed
            .chain(self.placements.into_iter().map(Decision::Place))
            .chain(self.gangs.into_iter().map(Decision::PlaceGang))
            .chain(self.borrows.into_iter().map(Decision::Borrow))
            .chain(self.preemptions.into_iter().map(Decision::Preempt))
            .chain(self.resizes.into_iter().map(Decision::Resize))
            .chain(self.stages.into_iter().map(Decision::Stage))
            .chain(waits)
            .collect()
    }
}

impl From<Vec<Decision>> for Plan {
    fn from(decisions: Vec<Decision>) -> Self {
        let mut out = Plan::default();
        for d in decisions {
            match d {
                Decision::FailDependency { job, reason } => out.failed.push((job, reason)),
                Decision::Place(p) => out.placements.push(p),
                Decision::PlaceGang(g) => out.gangs.push(g),
                Decision::Borrow(p) => out.borrows.push(p),
                Decision::Preempt(p) => out.preemptions.push(p),
                Decision::Resize(r) => out.resizes.push(r),
                Decision::Stage(st) => out.stages.push(st),
                Decision::Wait { job, reason } => out.waiting.push((job, reason)),
            }
        }
        out
    }
}
