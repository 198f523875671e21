//! End-to-end tests of the `gantry` binary: `gantry up`, the client commands, crashes and
//! agent loss.

mod agent_loss;
mod crash;
mod harness;
mod sharing;
mod walkthrough;
