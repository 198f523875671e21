//! Scheduling decisions the server and the simulator share, beyond the queue's order.
//!
//! [`crate::queue`] decides *who* runs from GPU counts alone: it does not know GPU models, a
//! node's CPU and memory, or which node a job may use. What it decides is therefore checked
//! against the nodes before anyone is stopped for it. This module holds that check as pure
//! functions over plain views of the nodes and the running jobs, so that the server's pass and
//! the simulator call the same code:
//! - [`find_room`]: the nodes and the victims that make a job placeable, or nothing at all
//!   (preemption is issued only when the victims suffice);
//! - [`TeamsNow::judged_priority`]: who may preempt whom (priority within a team, guarantees
//!   across teams, `preempt_other_teams`).

mod room;
mod rules;

pub use room::{Holder, NodeRoom, Room, Shape, find_room};
pub use rules::{Contender, TeamsNow};

#[cfg(test)]
mod room_tests;
