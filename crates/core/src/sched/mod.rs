//! The scheduling pass: every decision the server and the simulator make, as values.
//!
//! [`plan`] takes a [`Snapshot`] (nodes, GPUs, held allocations, pending and active jobs, teams,
//! the queue's memory and the states of the jobs pending jobs depend on), a placement policy and
//! a random stream, and returns every [`Decision`] of one pass: dependencies that can never be
//! met, placements, gangs, preemptions with their victims, elastic resizes, and why each other
//! pending job waits. It is pure: the caller loads the snapshot and carries the decisions out
//! (the server turns each into a command, the simulator applies it to its virtual cluster).
//!
//! How a pass decides (one file per step):
//! - [`gates`]: dependencies (`--after ok:12`) and array limits keep jobs out of the queue;
//! - `view`: the queue's input from the snapshot; *who* runs is [`crate::queue::plan_ranked`];
//! - `plan`: *where*, in rank order, on the core's ledger (`layout`), gangs all at once (`gang`);
//! - `victims`: which running jobs to stop for a started job that finds no room, through
//!   [`find_room`] (victims only where the freed GPUs make the job placeable) and
//!   [`TeamsNow::judged_priority`] (priority within a team, guarantees across teams);
//! - `elastic`: elastic jobs shrink for a waiting job at once and grow onto idle GPUs;
//! - `lend`: GPUs idle jobs lent are a state of the ledger, and waiting preemptible jobs
//!   borrow them after the queue's pass;
//! - `service`: replicas of one service spread over nodes, and a pass stops at most one;
//! - `pools`: a job's pool and node selector filter the nodes it may use, and its pool's
//!   placement (`pack` or `spread`) is a scoring term of its request;
//! - `stage`: a job with declared inputs is staged on the node its placement chose before it
//!   is placed there, its GPUs not held meanwhile;
//! - `locality`: a job with inputs prefers the nodes whose cache holds them, weighed against
//!   the wait it costs, and a queued one is staged ahead behind its queue wait;
//! - `reasons`: why each job waits, in the words `gantry jobs` shows;
//! - [`Standing`]: the ledger (nodes, held allocations, blocked GPUs) a caller keeps between
//!   passes and updates from its change log; [`plan_on`] plans on it, [`plan`] builds it;
//! - [`Memory`]: what the loop remembers between passes (decayed usage, resize widths,
//!   who each preempted job was stopped for).
//!
//! [`plan_priority_fifo`] is the pass the queue replaced, kept as the benchmark's baseline.

mod baseline;
mod decision;
mod elastic;
mod gang;
pub mod gates;
mod layout;
mod lend;
mod locality;
mod memory;
mod plan;
mod pools;
mod reasons;
mod room;
mod rules;
mod service;
mod snapshot;
mod stage;
mod standing;
mod victims;
mod view;

pub use baseline::plan_priority_fifo;
pub use decision::{Decision, GangPlace, Grant, Place, Plan, Preemption, Resize};
pub use gates::{Gated, gate};
pub use lend::preemptible;
pub use locality::{Cached, DEFAULT_BANDWIDTH_BPS, Locality};
pub use memory::Memory;
pub use plan::{plan, plan_grouped, plan_grouped_on, plan_on};
pub use room::{Holder, NodeRoom, Room, Shape, find_room};
pub use rules::{Contender, TeamsNow};
pub use snapshot::{Held, QueueInput, Snapshot};
pub use stage::{Stage, Staging};
pub use standing::Standing;

#[cfg(test)]
mod checkpoint_tests;

#[cfg(test)]
mod locality_tests;

#[cfg(test)]
mod room_tests;

#[cfg(test)]
mod service_tests;

#[cfg(test)]
mod stage_tests;

#[cfg(test)]
mod ledger_tests;
#[cfg(test)]
mod standing_tests;

#[cfg(test)]
mod lend_tests;
