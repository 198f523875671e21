//! The `gantry` policy (placeholder).

use gantry_core::queue::QueueWeights;

use super::engine::{ClusterShape, JobPolicy, JobView};

/// Gantry's queue as a job-simulator policy.
#[derive(Debug)]
pub struct GantryPolicy {
    inner: super::baselines::Fifo,
}

impl GantryPolicy {
    /// A policy with these weights.
    pub fn new(_weights: QueueWeights) -> Self {
        Self { inner: super::baselines::Fifo }
    }
}

impl JobPolicy for GantryPolicy {
    fn schedule(&mut self, now: u64, jobs: &[JobView<'_>], shape: &ClusterShape) -> Vec<Vec<usize>> {
        self.inner.schedule(now, jobs, shape)
    }
}
