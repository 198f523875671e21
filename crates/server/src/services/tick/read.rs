//! A tick's one blocking store read: the services with their replicas, the nodes, the GPUs
//! and what binds each service's team.

use std::collections::{BTreeMap, HashMap};

use gantry_store::{Gpu, JobFilter, JobState, Node, Store, StoreError};

use super::{ENDED_READ, Loaded};
use crate::services::quota::{self, TeamQuota};

/// What binds each service's team, by team.
pub(super) type Quotas = HashMap<String, TeamQuota>;

/// One tick's read: the services, the nodes, the teams' quotas and the GPUs.
pub(super) type Read = (Vec<Loaded>, Vec<Node>, Quotas, Vec<Gpu>);

/// Scraped series of one replica.
pub(super) type Series = BTreeMap<String, f64>;

/// Services with their replicas, the nodes, and what binds each service's team.
pub(super) fn load(store: &dyn Store, borrow_limit: f64) -> Result<Read, StoreError> {
    let mut out = Vec::new();
    let services = store.services(None)?;
    // Read once a tick, and only when a service mounts any.
    let volumes =
        if services.iter().any(|s| !s.spec.volumes.is_empty()) { store.volumes(None)? } else { Vec::new() };
    for service in services {
        let replicas = store.service_replicas(&service.team, &service.name, ENDED_READ)?;
        let volumes = volumes
            .iter()
            .filter(|v| v.team == service.team && service.spec.volumes.iter().any(|m| m.name == v.name))
            .cloned()
            .collect();
        out.push(Loaded { service, replicas, volumes });
    }
    let mut quotas = HashMap::new();
    let mut all_gpus = Vec::new();
    if !out.is_empty() {
        all_gpus = store.gpus()?;
        let (teams, counts, gpus) = (store.teams()?, store.job_counts()?, all_gpus.len() as u32);
        for l in &out {
            let name = &l.service.team;
            if quotas.contains_key(name) {
                continue;
            }
            let team = teams.iter().find(|t| t.name == *name);
            let guarantee = team.and_then(|t| t.gpu_quota);
            let pending = counts.iter().filter(|(t, s, _)| t == name && *s == JobState::Pending).map(|c| c.2);
            let quota = TeamQuota {
                team: name.clone(),
                guarantee,
                cap: quota::cap(guarantee, borrow_limit, gpus),
                used_gpus: active_gpus(store, name)?,
                pending: pending.sum(),
                pending_limit: team
                    .and_then(|t| t.pending_limit)
                    .unwrap_or(crate::command::DEFAULT_PENDING_LIMIT),
                replicas: out
                    .iter()
                    .filter(|o| o.service.team == *name)
                    .flat_map(|o| &o.replicas)
                    .filter(|r| !r.job.state.is_terminal())
                    .count() as u32,
                replica_limit: team
                    .map_or(gantry_store::Team::DEFAULT_MAX_REPLICAS, gantry_store::Team::replica_cap),
            };
            quotas.insert(name.clone(), quota);
        }
    }
    Ok((out, store.nodes()?, quotas, all_gpus))
}

/// Whole GPUs the team's jobs that have not ended ask for (a gang counts its workers).
fn active_gpus(store: &dyn Store, team: &str) -> Result<u32, StoreError> {
    let mut total = 0;
    for state in [JobState::Pending, JobState::Scheduled, JobState::Running] {
        let filter = JobFilter { state: Some(state), team: Some(team.to_owned()), ..JobFilter::default() };
        for job in store.jobs(&filter)? {
            let parent = job.gang.as_ref().is_some_and(|g| !g.is_worker());
            if !parent && job.stop.is_none() {
                total += job.request.gpus;
            }
        }
    }
    Ok(total)
}
