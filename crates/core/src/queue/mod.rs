//! Queueing: who runs when (placeholder, filled below).

/// Weights of the gantry queue policy.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueWeights {}

impl QueueWeights {
    /// Parses `key=value,…` (empty = defaults).
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() { Ok(Self::default()) } else { Err(format!("unknown weights `{s}`")) }
    }
}
