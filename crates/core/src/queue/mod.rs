//! Queueing: who runs when. Pure: a snapshot of jobs, teams and free GPUs in, decisions out.
//!
//! # The problem
//! Placement ([`crate::placement`]) decides *where* a job runs; this module decides *when*, for
//! whole-GPU jobs and gangs (N workers, all or nothing). Four goals pull against each other:
//! short jobs should not wait behind long ones (JCT), a team's guaranteed quota must be there when
//! it asks for it, idle quota should not be wasted, and nothing may starve. No job's duration is
//! known in advance.
//!
//! # The order
//! Each round ranks every job — running or waiting — by a key compared left to right:
//! 1. **Guarantee.** A job that fits within its team's guaranteed GPUs (counting the team's
//!    higher-ranked jobs first) ranks before every job that borrows. A borrower therefore never
//!    blocks a team under its guarantee: when the owner returns, borrowers rank below it and are
//!    reclaimed (preempted) if the GPUs are needed. Borrowing is capped per team at
//!    `guarantee + borrow_limit` GPUs.
//! 2. **Priority**, higher first, raised by **aging**: every `aging_s` a job has waited since it
//!    last ran adds one level, so a waiting job eventually outranks any running job of its
//!    original level, and every job starts within a bound (property-tested).
//! 3. **Attained-service band** (two-dimensional least attained service, as in Tiresias, but
//!    with geometric bands): band 0 below `band_base_gpu_s` GPU-seconds of service, then one band
//!    per factor `band_factor`. Service is wall time × GPUs while holding GPUs, so it needs no
//!    duration estimate: a job that has run long is likely to run longer (Philly's job sizes are
//!    heavy-tailed), so new and small jobs go first. Tiresias is the special case of one
//!    threshold at 16 GPU-hours. A running job is ranked by its own band (`sticky` = 1 ranks it
//!    one band lower: fewer restarts, but long jobs then hold GPUs new jobs need).
//! 4. **Fair share.** The team's decayed GPU-seconds (half-life `half_life_s`) over its weight,
//!    lowest first, compared in steps of `share_step` (4×) over the least-used team: among jobs
//!    of equal standing a team that used far less recently goes first; smaller differences tie,
//!    so fair share does not reorder (and preempt) jobs every round as usage moves.
//! 5. **FIFO**: submission time, then id — for running and waiting jobs alike
//!    (`backfill_yields`). A job that backfilled past a blocked wider one therefore ranks below
//!    it and gives its GPUs back as soon as the wider job fits, as the skip-ahead of Tiresias
//!    does; otherwise narrow jobs arriving one after another keep a wide job waiting for as long
//!    as they arrive (Sia's Philly set, mostly 6–16-GPU jobs on 64 GPUs: see
//!    `docs/scheduling.md`). With `backfill_yields` = 0 running jobs rank before every waiting
//!    job of their band instead.
//!
//! # Admission, backfill, preemption
//! The ranked list is walked with a budget of all GPUs. A job (a whole gang) runs if its GPUs fit
//! in the budget; otherwise it waits and, if running, is preempted. Later jobs may still run
//! (backfill), which cannot delay the first job that did not fit (the *head*): a preemptible
//! backfill ranks below the head in later rounds too, so it is preempted as soon as the head
//! fits, and a non-preemptible job backfills only into
//! GPUs the head cannot use even after every preemptible job behind it is preempted
//! (reservation). Preemption thus only ever evicts lower-ranked jobs; [`choose_victims`] gives the
//! smallest victim set for an explicit priority preemption (least GPU-time lost, never a job of
//! equal or higher priority).
//!
//! # Placement
//! Jobs that keep running keep their GPUs (no migration, so no restart). Each newly admitted job
//! is placed in rank order ([`place_gang`]): on one node if any node has room (the fullest such
//! node, best fit, which keeps whole nodes free for gangs), else on the fewest nodes (nodes with
//! the most free GPUs first), splitting a gang only between its workers ([`place_workers`]).
//! Admission already checked the GPU count, so two gangs can never hold part of each other's
//! GPUs: no deadlock. With 1-GPU workers placement cannot fail; a gang of larger workers that
//! does not fit the nodes' remainders keeps its admitted GPUs (a reservation) and waits. With
//! `gang_reservation`, once a gang is blocked no waiting job starts unless it leaves the gang's
//! GPUs free, so small jobs cannot starve it.
//!
//! # Elastic jobs
//! A job with a range of GPUs is admitted at its minimum like any other; its width is the
//! scheduling pass's (`crate::sched`'s elastic rule), in the server and the simulator alike.

mod fairshare;
mod free;
mod plan;
mod weights;

pub use fairshare::Usage;
pub use plan::{
    Decision, NodeFree, QueuedJob, Team, Victim, admit, choose_victims, place_gang, place_workers, plan,
    plan_ranked, rank,
};
pub use weights::QueueWeights;

#[cfg(test)]
mod tests;
