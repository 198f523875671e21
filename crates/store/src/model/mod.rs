//! The store's vocabulary: the wire types of [`gantry_api::model`] (jobs, nodes, GPUs, users,
//! tokens, teams, events), plus what never leaves the control plane: submissions, placements
//! and allocations, token records to store, audited changes and list filters; services and
//! their replicas.

mod allocations;
mod auth;
mod changes;
mod jobs;
mod lease;
mod nodes;
mod services;

pub use allocations::*;
pub use auth::*;
pub use changes::*;
pub use gantry_api::model::*;
pub use gantry_api::pools::{Pool, PoolPlacement};
pub use gantry_api::volumes::{Volume, VolumeMount};
pub use jobs::*;
pub use lease::*;
pub use nodes::*;
pub use services::*;
