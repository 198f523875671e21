//! The store's vocabulary: the wire types of [`gantry_api::model`] (jobs, nodes, GPUs, users,
//! tokens, teams, events), plus what never leaves the control plane: submissions, placements
//! and allocations, token records to store, audited changes and list filters.

mod allocations;
mod auth;
mod changes;
mod jobs;
mod lease;
mod nodes;

pub use allocations::*;
pub use auth::*;
pub use changes::*;
pub use gantry_api::model::*;
pub use jobs::*;
pub use lease::*;
pub use nodes::*;
