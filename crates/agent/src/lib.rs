//! Gantry's node daemon as a library.
//!
//! - [`runner`]: registers the node with the control plane, reports GPU inventory, health and
//!   samples from the GPU layer, and runs the jobs it is assigned as process groups
//!   (start with [`runner::run`]).
//!
//! It is not the scheduler: it runs exactly what the server's heartbeat answer lists and stops
//! everything else.

pub mod runner;
