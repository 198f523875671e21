//! The service controller: keeps each service's replicas, probes them, feeds the gateway and
//! runs the autoscaler.
//!
//! A replica is a job naming its service (`Job::service`), submitted by this controller with
//! `$PORT` set; the scheduler places it like any job (it counts against its team's guarantee
//! and waits with a reason when nothing fits) and the agent runs it like any job, publishing
//! `$PORT` on the node where the job has a network namespace of its own. Every tick
//! (`ServerConfig::service_tick`) the controller
//!
//! 1. reads the services, their replicas and the nodes (one blocking store read);
//! 2. takes the probe results that came back and the gateway's demand (requests held for a
//!    service with no ready replica);
//! 3. per service: the autoscaler's decision ([`scale`]: HPA every `sync_s`, to zero after
//!    `scale_to_zero_after`, from zero on demand), recorded with its reason; then the plan
//!    ([`plan`], pure: start, drain, stop; rolling updates surge one; back-off for replicas that
//!    keep failing; the team's quota as a limit that is said, [`quota`]);
//! 4. carries the plan out (submit, stop) and finishes drains whose in-flight requests are
//!    answered;
//! 5. hands the gateway the whole routing table ([`crate::gateway::Gateway::set_routes`]):
//!    every running replica with its address `NODE:PORT`, ready when its probe passes and it is
//!    not draining;
//! 6. sends the probes that are due ([`probe`]), whose answers arrive by the next tick.
//!
//! What it keeps in memory (probe states, drains, autoscaler windows, failure counts) is
//! rebuilt from scratch after a restart: replicas keep running, are probed again and rejoin the
//! table once they answer.

pub mod plan;
pub mod probe;
pub mod quota;
pub mod rate;
pub mod scale;
pub mod signals;
mod tick;

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use gantry_store::JobId;

pub use tick::run;

/// What the controller last saw of each service, for `gantry service get` (not stored: it
/// changes every tick).
#[derive(Debug, Default)]
pub struct Status {
    services: RwLock<HashMap<(String, String), ServiceStatus>>,
}

/// One service as of the last tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceStatus {
    /// Why the service has fewer replicas than it wants, if it has.
    pub short: Option<String>,
    /// Why its rollout is stuck, if it is (`rollout stuck: generation 3 failed readiness …`).
    pub rollout: Option<String>,
    /// Each replica the controller tracks.
    pub replicas: HashMap<JobId, ReplicaStatus>,
}

/// One replica as of the last tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaStatus {
    /// Passing its probe and not draining.
    pub ready: bool,
    /// Where the gateway reaches it.
    pub address: Option<std::net::SocketAddr>,
    /// Why it is not ready.
    pub reason: Option<String>,
}

impl Status {
    /// One service's status (default: never seen).
    pub fn get(&self, team: &str, name: &str) -> ServiceStatus {
        let services = self.services.read().unwrap_or_else(PoisonError::into_inner);
        services.get(&(team.to_owned(), name.to_owned())).cloned().unwrap_or_default()
    }

    /// Whether the controller last saw replica `job` ready (`None`: it tracks no such replica).
    pub fn replica_ready(&self, job: JobId) -> Option<bool> {
        let services = self.services.read().unwrap_or_else(PoisonError::into_inner);
        services.values().find_map(|s| s.replicas.get(&job)).map(|r| r.ready)
    }

    fn replace(&self, all: HashMap<(String, String), ServiceStatus>) {
        *self.services.write().unwrap_or_else(PoisonError::into_inner) = all;
    }
}

/// The next replica port after `last` in `lo..=hi` (wrapping) that no live replica uses;
/// `None` when every one is taken.
pub fn next_port((lo, hi): (u16, u16), last: u16, used: &std::collections::HashSet<u16>) -> Option<u16> {
    let span = u32::from(hi.saturating_sub(lo)) + 1;
    let start = u32::from(last.clamp(lo, hi) - lo);
    (1..=span).map(|i| lo + ((start + i) % span) as u16).find(|p| !used.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_ports_rotate_through_the_range_and_skip_those_in_use() {
        let range = (30000, 32767);
        let used = [30001, 30002].into_iter().collect();
        assert_eq!(next_port(range, 30000, &used), Some(30003));
        assert_eq!(next_port(range, 32767, &Default::default()), Some(30000));
        let all: std::collections::HashSet<u16> = (30000..=32767).collect();
        assert_eq!(next_port(range, 30000, &all), None);
    }
}
