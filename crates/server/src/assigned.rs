//! Held heartbeats: how an agent learns of new work, a cancel or a preemption without waiting
//! for its next poll.
//!
//! An agent used to learn what to run from the answer to its next heartbeat, up to a heartbeat
//! interval (250 ms) after the decision, and reported the start one interval later: half a
//! second from submission to running on an idle cluster. Now an agent sends each heartbeat
//! with `wait_ms` (how long it lets the server hold the answer) and `known` (the version of the
//! assignments it applied last). The server applies the report at once, as before, so liveness
//! and the report's size limits are unchanged; then, when the node's assignments are still the
//! `known` ones, it holds the answer until a command that changes them commits or the hold
//! passes, and answers the assignments as they are then. The agent sends its next heartbeat as
//! soon as it has applied an answer, so a node always has one heartbeat waiting and the server
//! sees one at least every heartbeat interval (the hold is at most that long).
//!
//! The signal is per node ([`Assigned`]): a `watch` channel whose value counts the changes
//! committed for the node. A held heartbeat subscribes before the store reads its assignments,
//! so a change committed between that read and the wait is not missed. [`touched`] names the
//! nodes a command may change the work of: the node of a placement, the nodes of a gang's
//! workers, and the node (or nodes) of a cancelled, preempted or resized job, its gang's
//! workers' and its array's members'. A change without a signal (none is known) costs what
//! polling cost: the next heartbeat, one hold later, reads the store anew.
//!
//! An older agent sends no `wait_ms` and gets its answer at once; an older server ignores the
//! query and answers without a `version`, which tells the agent to poll on its interval.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use gantry_store::{JobFilter, JobId, Store};
use tokio::sync::watch;

use crate::command::Command;

/// Per-node signals that a node's assigned work changed.
#[derive(Debug, Default)]
pub struct Assigned {
    nodes: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl Assigned {
    /// A receiver that sees every change signalled for `node` after this call.
    pub fn subscribe(&self, node: &str) -> watch::Receiver<u64> {
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        nodes.entry(node.to_owned()).or_insert_with(|| watch::channel(0).0).subscribe()
    }

    /// Signals that the work assigned to `node` changed (a no-op when no heartbeat of it was
    /// ever held).
    pub fn changed(&self, node: &str) {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = nodes.get(node) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// What a command may change of nodes' assigned work, known before it is applied.
#[derive(Debug, Clone, Default)]
pub enum Touches {
    /// Nothing (or only what the command's own answer carries, as a heartbeat's).
    #[default]
    Nothing,
    /// These nodes.
    Nodes(Vec<String>),
    /// Where this job runs, with its gang's workers (and, with `array`, its array's members).
    Job {
        /// The job.
        id: JobId,
        /// The whole array.
        array: bool,
    },
}

/// The nodes `command` may change the work of.
pub fn touches(command: &Command) -> Touches {
    match command {
        Command::Place(p) | Command::Borrow(p) => Touches::Nodes(vec![p.node_id.clone()]),
        Command::PlaceGang(g) => Touches::Nodes(g.workers.iter().map(|w| w.node_id.clone()).collect()),
        Command::Cancel { id, array, .. } => Touches::Job { id: *id, array: *array },
        Command::Preempt { job, .. } | Command::Resize { job, .. } | Command::Idle { job, .. } => {
            Touches::Job { id: *job, array: false }
        }
        _ => Touches::Nothing,
    }
}

/// The nodes `touches` names, read after the command committed (a stopping job keeps its
/// node). A failed read is logged and signals nothing: the agent learns on its next heartbeat.
pub fn touched(store: &dyn Store, touches: Touches) -> Vec<String> {
    let (id, array) = match touches {
        Touches::Nothing => return Vec::new(),
        Touches::Nodes(nodes) => return nodes,
        Touches::Job { id, array } => (id, array),
    };
    let read = || -> Result<Vec<String>, gantry_store::StoreError> {
        let Some(job) = store.job(id)? else { return Ok(Vec::new()) };
        let mut jobs = vec![job];
        if array {
            jobs.extend(store.jobs(&JobFilter { array: Some(id), ..JobFilter::default() })?);
        }
        let mut nodes = Vec::new();
        for job in jobs {
            if job.gang.as_ref().is_some_and(|g| !g.is_worker()) {
                nodes.extend(store.workers(job.id)?.into_iter().filter_map(|w| w.node_id));
            }
            nodes.extend(job.node_id);
        }
        nodes.sort_unstable();
        nodes.dedup();
        Ok(nodes)
    };
    read().unwrap_or_else(|e| {
        tracing::debug!(job = id, error = %e, "cannot tell which agents a command concerns");
        Vec::new()
    })
}

/// A digest of a node's assignments (which attempt of which job, on which GPUs), the
/// `version` an agent sends back as `known`. FNV-1a: stable across restarts and builds.
pub fn version(jobs: &[gantry_store::Job]) -> String {
    digest(jobs.iter().map(|j| (j.id, j.attempt, j.gpu_uuids.as_slice())))
}

/// FNV-1a over (job, attempt, GPU UUIDs) triples, as 16 hex digits.
fn digest<'a>(jobs: impl IntoIterator<Item = (JobId, u32, &'a [String])>) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for (id, attempt, gpus) in jobs {
        eat(&id.to_le_bytes());
        eat(&attempt.to_le_bytes());
        for uuid in gpus {
            eat(uuid.as_bytes());
            eat(&[0]);
        }
        eat(&[0xff]);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: JobId, attempt: u32, gpus: &[&str]) -> (JobId, u32, Vec<String>) {
        (id, attempt, gpus.iter().map(|g| (*g).to_owned()).collect())
    }

    fn version(jobs: &[(JobId, u32, Vec<String>)]) -> String {
        digest(jobs.iter().map(|(id, attempt, gpus)| (*id, *attempt, gpus.as_slice())))
    }

    #[test]
    fn the_version_changes_with_the_jobs_their_attempts_and_their_gpus_and_only_with_them() {
        let base = [job(1, 1, &["GPU-a"]), job(2, 1, &[])];
        let same = version(&base);
        assert_eq!(same, version(&[job(1, 1, &["GPU-a"]), job(2, 1, &[])]));
        assert_ne!(same, version(&[job(1, 2, &["GPU-a"]), job(2, 1, &[])]), "a new attempt");
        assert_ne!(same, version(&[job(1, 1, &["GPU-b"]), job(2, 1, &[])]), "other GPUs");
        assert_ne!(same, version(&[job(1, 1, &["GPU-a"])]), "a job fewer");
        assert_ne!(version(&[]), version(&[job(1, 1, &[])]));
    }

    #[tokio::test]
    async fn a_subscriber_sees_a_change_signalled_for_its_node_and_not_one_for_another() {
        let assigned = Assigned::default();
        let mut n1 = assigned.subscribe("n1");
        let n2 = assigned.subscribe("n2");
        assigned.changed("n1");
        assigned.changed("n3");
        assert!(n1.has_changed().expect("open"));
        assert!(!n2.has_changed().expect("open"));
        n1.changed().await.expect("open");
        assert!(!n1.has_changed().expect("open"));
    }
}
