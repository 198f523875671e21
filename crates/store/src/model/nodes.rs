//! Nodes, their GPUs and what agents report.

use serde::{Deserialize, Serialize};

pub use gantry_api::types::RegisterRequest;

/// A node registering (or registering again): what its agent sent, checked, and when the
/// server received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRegistration {
    /// The agent's request (node id, inventory, defaults, the attempts it kept).
    pub request: RegisterRequest,
    /// When the server received it, ms since the epoch (the server's clock).
    pub at: i64,
}
