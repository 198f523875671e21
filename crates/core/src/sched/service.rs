//! Replicas of a service in a pass: where they go and which of them may be stopped.
//!
//! A service's replicas (jobs the snapshot names as replicas of one `team/name`,
//! [`super::Snapshot::service`]) serve the same traffic: two on one node fail together, and
//! stopping two at once halves what the service can answer. Two rules follow, both terms of
//! the ordinary decisions rather than special cases:
//! - **Spread** ([`Spread`]): a replica is placed among the nodes that take it and hold the
//!   fewest replicas of its service; the placement policy scores only those (its scores and
//!   tie-break decide among them). This is a score term ranked above the policy's own: packing
//!   never puts a second replica beside the first while another node could take it. Two
//!   replicas never share a GPU unless they asked for a slice (`gpu_memory`): whole GPUs are
//!   never shared by the ledger, and a slice is the one request that may share.
//! - **Victims** (`super::victims`, [`super::find_room`]): a pass stops a replica only when
//!   stopping jobs that are not replicas cannot make room, and never stops more than one replica
//!   of the same service.

use std::collections::HashMap;

use super::layout::Layout;
use super::snapshot::Snapshot;
use crate::{Cluster, NodeId, Request};

/// Replicas of each service per node, as the pass goes.
#[derive(Debug, Default)]
pub(super) struct Spread {
    per_node: HashMap<String, Vec<u32>>,
}

impl Spread {
    /// The replicas active jobs are on (nothing to count when no job is a replica).
    pub(super) fn new(s: &Snapshot, layout: &Layout<'_>) -> Self {
        let mut out = Self::default();
        if s.services.is_empty() {
            return out;
        }
        for job in &s.active {
            if let (Some(service), Some(node)) = (s.service(job.id), layout.node_of(job)) {
                out.placed(service, node, layout.nodes.len());
            }
        }
        out
    }

    /// Notes a replica of `service` on `node` (of `nodes`).
    pub(super) fn placed(&mut self, service: &str, node: NodeId, nodes: usize) {
        let counts = self.per_node.entry(service.to_owned()).or_insert_with(|| vec![0; nodes]);
        if let Some(c) = counts.get_mut(node) {
            *c += 1;
        }
    }

    /// The nodes a replica of `service` asking `req` may be scored on: those that take it and
    /// hold the fewest replicas of the service, in node order. `None` when the service has no
    /// replica yet or no node takes the request (then nothing narrows the choice).
    pub(super) fn nodes_for(&self, service: &str, cluster: &Cluster, req: &Request) -> Option<Vec<NodeId>> {
        let counts = self.per_node.get(service)?;
        let fits: Vec<NodeId> = (0..cluster.nodes().len())
            .filter(|n| cluster.node(*n).is_some_and(|node| node.fits(req)))
            .collect();
        let fewest = fits.iter().map(|n| counts.get(*n).copied().unwrap_or(0)).min()?;
        Some(fits.into_iter().filter(|n| counts.get(*n).copied().unwrap_or(0) == fewest).collect())
    }
}
