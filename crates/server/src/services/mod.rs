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

/// Gives each service replica among `jobs` (the active jobs of one node) a `$PORT` of
/// `range` that no other replica of that node holds: ports are a node's, chosen when a replica
/// is first handed to the node it was placed on, so pending replicas hold none and each node
/// has the whole range. A replica keeps the port it has unless an older one of the node holds
/// it too (one preempted elsewhere and placed here). The search starts at a place of the job's
/// id, so a replica refused its port (another process of the node held it) gets another next
/// time. Returns the replicas given a port; `None` for one the range has no room for (it then
/// starts without, and fails with the agent's sentence).
pub fn assign_ports(range: (u16, u16), jobs: &mut [gantry_store::Job]) -> Vec<(JobId, Option<u16>)> {
    let (lo, hi) = range;
    let span = u32::from(hi.saturating_sub(lo)) + 1;
    let port_of = |j: &gantry_store::Job| j.env.get("PORT").and_then(|p| p.parse::<u16>().ok());
    let mut order: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].service.is_some()).collect();
    order.sort_by_key(|&i| jobs[i].id);
    let mut held = std::collections::HashSet::new();
    let mut changed = Vec::new();
    for i in order {
        if port_of(&jobs[i]).is_some_and(|p| held.insert(p)) {
            continue;
        }
        let start = (jobs[i].id.unsigned_abs() % u64::from(span)) as u32;
        let free = (0..span).map(|k| lo + ((start + k) % span) as u16).find(|p| !held.contains(p));
        if let Some(p) = free {
            held.insert(p);
            jobs[i].env.insert("PORT".into(), p.to_string());
        }
        changed.push((jobs[i].id, free));
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(id: JobId, port: Option<u16>) -> gantry_store::Job {
        let mut env = std::collections::BTreeMap::new();
        if let Some(p) = port {
            env.insert("PORT".to_owned(), p.to_string());
        }
        gantry_store::Job { id, env, service: Some("svc".into()), ..gantry_store::Job::default() }
    }

    #[test]
    fn a_nodes_replicas_get_ports_of_their_own_kept_once_given_and_a_clash_goes_to_the_newer() {
        let mut jobs = vec![replica(7, Some(20001)), replica(9, None), replica(8, Some(20001))];
        jobs.push(gantry_store::Job { id: 10, ..gantry_store::Job::default() }); // a batch job
        let changed = assign_ports((20000, 20002), &mut jobs);
        let port = |j: &gantry_store::Job| j.env.get("PORT").cloned();
        assert_eq!(port(&jobs[0]).as_deref(), Some("20001"), "the older keeps its port");
        assert_eq!(changed.iter().map(|c| c.0).collect::<Vec<_>>(), vec![8, 9]);
        let given: std::collections::HashSet<_> = jobs[..3].iter().filter_map(port).collect();
        assert_eq!(given.len(), 3, "three replicas, three ports: {jobs:?}");
        assert!(port(&jobs[3]).is_none(), "a batch job gets none");
        // A full range: the next replica gets none, and says so by its absence.
        let mut full = vec![replica(1, Some(20000)), replica(2, Some(20001)), replica(3, None)];
        assert_eq!(assign_ports((20000, 20001), &mut full), vec![(3, None)]);
        // Nothing to do: nothing changes.
        assert!(assign_ports((20000, 20002), &mut jobs).is_empty());
    }
}
