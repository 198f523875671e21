//! Node pools in a pass: which nodes each job may use and how its pool places it.
//!
//! A job's node selector (its pool as `pool=NAME`, then label pairs; see [`gantry_api::pools`])
//! is a filter: the pass numbers the distinct selectors of its queued and running jobs, tags
//! each node in the core's ledger with the bits of the selectors it matches
//! ([`crate::Cluster::set_tags`]), and gives each job's request the set of its selector
//! ([`crate::NodeSet`]), which the ledger checks wherever a placement is made or counted:
//! the policies, gangs, victims and elastic growth alike. A selector every node matches (the
//! usual case: no pools, no selectors) is `Any`, so a cluster without pools schedules exactly as
//! before. The pool's placement is the request's [`crate::Preference`], a scoring term of
//! the core's placement (`pack` or `spread`), not a decision made here. A team a pool does not
//! admit waits outside the queue with the reason.
//!
//! At most 64 distinct selectors are told apart in one pass; the jobs of any further one match
//! no node in that pass (they wait, and a later pass with fewer selectors places them).

use std::collections::{BTreeMap, HashMap};

use gantry_api::model::Job;
use gantry_api::pools::{self, Pool, PoolPlacement};

use super::snapshot::Snapshot;
use crate::{Cluster, NodeSet, Preference};

/// The pass's node filters and pool settings.
#[derive(Debug, Default)]
pub(super) struct Pools<'a> {
    /// The nodes each distinct node selector allows.
    sets: HashMap<&'a BTreeMap<String, String>, NodeSet>,
    /// Pools an admin set, by name.
    pools: HashMap<&'a str, &'a Pool>,
}

impl<'a> Pools<'a> {
    /// Numbers the selectors of `s`'s jobs and tags the ledger's nodes (`labels`: each node's
    /// labels with its GPU facts, in the ledger's node order).
    pub(super) fn build(s: &'a Snapshot, labels: &[BTreeMap<String, String>], cluster: &mut Cluster) -> Self {
        let mut sets = HashMap::new();
        let mut tags = vec![0u64; labels.len()];
        let mut bit = 0u32;
        for job in s.pending.iter().chain(&s.active) {
            let selector = &job.node_selector;
            if sets.contains_key(selector) {
                continue;
            }
            let allowed: Vec<bool> = labels.iter().map(|l| pools::selects(selector, l)).collect();
            let set = if allowed.iter().all(|a| *a) {
                NodeSet::Any
            } else if bit < 64 {
                for (t, _) in tags.iter_mut().zip(&allowed).filter(|(_, a)| **a) {
                    *t |= 1 << bit;
                }
                bit += 1;
                NodeSet::Only(1 << (bit - 1))
            } else {
                NodeSet::Only(0)
            };
            sets.insert(selector, set);
        }
        for (id, t) in tags.into_iter().enumerate().filter(|(_, t)| *t != 0) {
            let _ = cluster.set_tags(id, t);
        }
        Self { sets, pools: s.pools.iter().map(|p| (p.name.as_str(), p)).collect() }
    }

    /// The nodes `job` may use and how its pool places it.
    pub(super) fn of(&self, job: &Job) -> (NodeSet, Preference) {
        let set = self.sets.get(&job.node_selector).copied().unwrap_or(NodeSet::Only(0));
        let placement = match self.pools.get(pools::pool_of(&job.node_selector)).map(|p| p.placement) {
            Some(PoolPlacement::Spread) => Preference::Spread,
            Some(PoolPlacement::Pack) | None => Preference::Pack,
        };
        (set, placement)
    }

    /// Whether `job` may use only some of the nodes.
    pub(super) fn limits(&self, job: &Job) -> bool {
        self.of(job).0 != NodeSet::Any
    }

    /// Why `job` may not place at all: its pool does not admit its team.
    pub(super) fn refuses(&self, job: &Job) -> Option<String> {
        let name = pools::pool_of(&job.node_selector);
        let pool = self.pools.get(name).filter(|p| !p.admits(&job.team))?;
        Some(format!(
            "waiting: team {} may not use pool {name} (its teams: {}; `gantry pool set` changes them)",
            job.team,
            pool.teams.join(", ")
        ))
    }
}
