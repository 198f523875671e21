//! What handlers, the dispatcher and the scheduler share ([`App`]); built by
//! [`crate::server::Server::bind`].

use std::sync::Arc;

use gantry_store::Store;
use tokio::sync::{Notify, watch};

use crate::auth::{FailureLimiter, TokenCache};
pub use crate::clock::now_ms;
pub use crate::config::ServerConfig;
use crate::metrics::Metrics;
use crate::tls::Pki;

/// What handlers, the dispatcher and the scheduler share.
#[derive(Debug)]
pub struct App {
    /// Durable state.
    pub store: Arc<dyn Store>,
    /// Settings.
    pub config: ServerConfig,
    /// Exported metrics.
    pub metrics: Metrics,
    /// Wakes the scheduler early.
    pub wake: Notify,
    /// Counts changes that may let a pending job start (a submission, a job ending, a node
    /// joining, a quota changing); the scheduler skips a pass when it has not moved.
    pub changes: std::sync::atomic::AtomicU64,
    /// Verified tokens.
    pub tokens: TokenCache,
    /// The rows submissions are checked against.
    pub admission: crate::admission::AdmissionCache,
    /// Failed authentications per address.
    pub failures: FailureLimiter,
    /// Why pending jobs wait, as of the last scheduling pass (not stored: it changes every pass).
    pub waiting: std::sync::RwLock<std::collections::HashMap<gantry_store::JobId, String>>,
    /// The cluster CA, when TLS is on: issues client certificates and serves `/v1/ca.pem`.
    pub pki: Option<Arc<Pki>>,
    /// Open `/v1/watch` streams per token.
    pub(crate) streams: crate::api::watch::Streams,
    /// Turns true when the server begins to stop, so that open streams end.
    pub closing: watch::Sender<bool>,
    /// The queue as of the last scheduling pass: each team's decayed GPU-seconds (fair share)
    /// and the borrowing limit (read by `/v1/queues`).
    pub queue: std::sync::RwLock<crate::scheduler::QueueInput>,
    /// Job output kept on disk, counted per team.
    pub output: crate::output::Output,
    /// Unused one-time dashboard sign-in codes.
    pub signin: crate::signin::SignInCodes,
    /// The serving gateway: the service controller gives it routes
    /// ([`crate::gateway::Gateway::set_routes`]) and reads its demand and snapshots.
    pub gateway: Arc<crate::gateway::Gateway>,
    /// Signals held heartbeats that their node's work changed.
    pub assigned: crate::assigned::Assigned,
    /// What the service controller last saw of each service (readiness, why it is short).
    pub service_status: crate::services::Status,
    /// Uploaded working directories, per team.
    pub uploads: crate::uploads::Uploads,
    /// Where pending jobs' inputs are being staged, and the nodes' caches (issue 22).
    pub staging: crate::staging::Staging,
    /// Whether this replica leads (runs the scheduler and reconcilers), and under which epoch.
    pub leadership: crate::leader::Leadership,
}

impl App {
    /// Fills in why a pending job waits, from the last pass.
    pub fn explain(&self, job: &mut gantry_store::Job) {
        if job.state == gantry_store::JobState::Pending
            && job.reason.is_none()
            && let Ok(waiting) = self.waiting.read()
        {
            job.reason = waiting.get(&job.id).cloned();
        }
    }
}
