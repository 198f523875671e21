//! Placement prefers the data: a job with declared inputs goes where a node's cache holds them,
//! when the copy that saves is worth more than the wait it costs (issue 22).
//!
//! A job that reads a 150 GB dataset and lands on a node that has it cached starts a copy of
//! nothing; on any other node it waits `bytes / bandwidth` for the copy (staged while it is
//! pending, see `super::stage`, so its GPUs are not held, but it still waits). FGD's score and
//! Gantry's terms know nothing of this, and a hard "only where the data is" filter would leave a
//! job waiting for one busy node while others sit idle. So the pass weighs two times in seconds,
//! from what the caller knows ([`Locality`]: every node's cached datasets as its agent reports
//! them, keyed by source and version with their bytes, and the node-local stage bandwidth):
//!
//! 1. **Copy saved.** For a job and a node, C(n) = Σ over the job's inputs of the bytes of that
//!    input cached on n (same team; of the source's current version, the one most recently used
//!    on any node: an older version is a stale copy) / bandwidth. A source never cached anywhere
//!    has an unknown size and counts nothing, so it leaves every node equal.
//! 2. **Wait it costs.** A node without room now gets room when enough of its jobs end. Job
//!    durations are unknown to the server, so the wait is estimated from their ages: a job that
//!    has run for t is taken to run about t more (the Lindy estimate, fair for the heavy-tailed
//!    durations of training jobs), the youngest end first, and W(n) is the age of the job whose
//!    end completes the room (infinite when all ending would not).
//!
//! When the queue starts a job, the nodes that fit now and save within `tolerance_s` of the
//! best saving among them are the placement policy's only candidates (packing decides among
//! them, so a few seconds of copying never overrides it); when a node without room saves more
//! than that best by more than its wait W(n) plus the tolerance, the job waits for that node
//! instead, and its inputs are staged there at once (a cache hit, or the missing part). A job
//! whose inputs are staged on a node without room goes elsewhere when the copy there costs
//! less than waiting, and stays otherwise. A job the queue keeps waiting is staged ahead, on
//! the node where it would be ready soonest, max(W(n), copy time left on n): its copy runs
//! behind its queue wait, as Slurm's burst buffer stages a job in before its expected start.

use std::collections::HashMap;

use gantry_api::model::{Job, JobState};

use super::layout::Layout;
use super::snapshot::Snapshot;
use crate::{NodeId, Request};

/// The default node-local stage bandwidth, bytes a second, when the caller knows none.
pub const DEFAULT_BANDWIDTH_BPS: u64 = 500_000_000;

/// One dataset in one node's cache, as its agent reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    /// The node.
    pub node: String,
    /// The team it is cached for (a job of another team finds nothing of it).
    pub team: String,
    /// Its source URL (a job's input names the same URL).
    pub url: String,
    /// The version it was keyed by (an ETag, or a digest).
    pub version: String,
    /// Size, bytes.
    pub bytes: u64,
    /// Last use, ms since the epoch (the most recent version of a source is its current one).
    pub last_used_ms: i64,
}

/// What the pass knows of the nodes' caches (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Locality {
    /// Every node's cached datasets.
    pub cached: Vec<Cached>,
    /// Node-local stage bandwidth, bytes a second.
    pub bandwidth_bps: u64,
    /// Savings closer than this, seconds, count as equal.
    pub tolerance_s: f64,
}

impl Default for Locality {
    fn default() -> Self {
        Self { cached: Vec::new(), bandwidth_bps: DEFAULT_BANDWIDTH_BPS, tolerance_s: 60.0 }
    }
}

/// Where the data makes a started job go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Prefer {
    /// Among these nodes (they fit now and save the most).
    Among(Vec<NodeId>),
    /// Wait for this node, which saves more than the wait costs.
    WaitFor(NodeId),
}

/// One source's size, and the bytes of its current version cached on each node index.
type Source = (u64, Vec<(NodeId, u64)>);

/// The pass's view of the caches: per (team, url) the current version's bytes on each node.
pub(super) struct Data<'a> {
    s: &'a Snapshot,
    /// (team, url) → (size, bytes cached on each node index).
    sources: HashMap<(&'a str, &'a str), Source>,
    /// Per node index, (started_at ms, GPUs) of its active jobs, youngest first.
    ages: Vec<Vec<(i64, u32)>>,
}

impl<'a> Data<'a> {
    pub(super) fn new(s: &'a Snapshot, layout: &Layout<'_>) -> Self {
        let mut current: HashMap<(&str, &str), (&str, i64)> = HashMap::new();
        for c in &s.locality.cached {
            let e = current.entry((c.team.as_str(), c.url.as_str())).or_insert((&c.version, c.last_used_ms));
            if (c.last_used_ms, c.version.as_str()) > (e.1, e.0) {
                *e = (&c.version, c.last_used_ms);
            }
        }
        let mut sources: HashMap<(&str, &str), Source> = HashMap::new();
        for c in &s.locality.cached {
            let key = (c.team.as_str(), c.url.as_str());
            if current.get(&key).is_none_or(|v| v.0 != c.version) {
                continue;
            }
            let Some(&node) = layout.index.get(c.node.as_str()) else { continue };
            let e = sources.entry(key).or_default();
            e.0 = e.0.max(c.bytes);
            e.1.push((node, c.bytes));
        }
        let mut ages = vec![Vec::new(); layout.nodes.len()];
        if !sources.is_empty() || s.pending.iter().any(|j| !j.inputs.is_empty()) {
            for j in &s.active {
                let Some(node) = layout.node_of(j) else { continue };
                let started = if j.state == JobState::Running { j.started_at.unwrap_or(s.at) } else { s.at };
                ages[node].push((started, j.gpu_uuids.len() as u32));
            }
            for a in &mut ages {
                a.sort_by_key(|(t, _)| std::cmp::Reverse(*t));
            }
        }
        Self { s, sources, ages }
    }

    /// The pass's time, ms.
    pub(super) fn at(&self) -> i64 {
        self.s.at
    }

    fn secs(&self, bytes: u64) -> f64 {
        bytes as f64 / self.s.locality.bandwidth_bps.max(1) as f64
    }

    /// C(n): seconds of copying the cache on `node` saves `job`.
    pub(super) fn saved_s(&self, job: &Job, node: NodeId) -> f64 {
        let bytes: u64 = job
            .inputs
            .iter()
            .filter_map(|i| self.sources.get(&(job.team.as_str(), i.url.as_str())))
            .filter_map(|(_, on)| on.iter().find(|(n, _)| *n == node).map(|(_, b)| *b))
            .sum();
        self.secs(bytes)
    }

    /// Seconds of copying left for `job` on `node` (inputs of unknown size count nothing).
    pub(super) fn copy_s(&self, job: &Job, node: NodeId) -> f64 {
        let total: u64 = job
            .inputs
            .iter()
            .filter_map(|i| self.sources.get(&(job.team.as_str(), i.url.as_str())))
            .map(|(size, _)| *size)
            .sum();
        (self.secs(total) - self.saved_s(job, node)).max(0.0)
    }

    /// Whether any input of `job` is cached anywhere.
    fn known(&self, job: &Job) -> bool {
        job.inputs.iter().any(|i| self.sources.contains_key(&(job.team.as_str(), i.url.as_str())))
    }

    /// W(n): seconds until `node` has room for `req`'s GPUs, from its jobs' ages (0 when it
    /// has room now, `None` when it never will).
    pub(super) fn wait_s(&self, layout: &Layout<'_>, node: NodeId, req: &Request) -> Option<f64> {
        let n = layout.cluster.node(node)?;
        if !n.schedulable || !req.nodes.allows(n.tags) || (n.gpu_free.len() as u32) < req.gpus {
            return None;
        }
        if n.fits(req) {
            return Some(0.0);
        }
        let mut free = n.idle_gpus() as u32;
        for (started, gpus) in &self.ages[node] {
            free += gpus;
            if free >= req.gpus {
                return Some((self.s.at - started).max(0) as f64 / 1000.0);
            }
        }
        None
    }

    /// Where the data makes a job the queue starts go (`None`: nothing of it is cached, or no
    /// node fits and none is worth waiting for; the pass places it as any other).
    pub(super) fn prefer(&self, layout: &Layout<'_>, job: &Job, req: &Request) -> Option<Prefer> {
        if !self.known(job) {
            return None;
        }
        let tol = self.s.locality.tolerance_s;
        let nodes = 0..layout.nodes.len();
        let fitting: Vec<(NodeId, f64)> = nodes
            .clone()
            .filter(|n| layout.cluster.node(*n).is_some_and(|x| x.fits(req)))
            .map(|n| (n, self.saved_s(job, n)))
            .collect();
        let here = fitting.iter().map(|f| f.1).fold(f64::NEG_INFINITY, f64::max);
        let wait = nodes
            .filter(|n| !fitting.iter().any(|f| f.0 == *n))
            .filter_map(|n| Some((n, self.saved_s(job, n) - self.wait_s(layout, n, req)?)))
            .filter(|(_, net)| *net > here.max(0.0) + tol)
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        if let Some((n, _)) = wait {
            return Some(Prefer::WaitFor(n));
        }
        if fitting.is_empty() {
            return None;
        }
        Some(Prefer::Among(fitting.iter().filter(|f| f.1 >= here - tol).map(|f| f.0).collect()))
    }

    /// For a job whose inputs are staged on `node`, which has no room: the nodes that fit now
    /// where copying them again costs less than waiting for `node` (empty: it waits).
    pub(super) fn instead_of(
        &self,
        layout: &Layout<'_>,
        job: &Job,
        req: &Request,
        node: NodeId,
    ) -> Vec<NodeId> {
        let fits = |n: &NodeId| *n != node && layout.cluster.node(*n).is_some_and(|x| x.fits(req));
        let Some(wait) = self.wait_s(layout, node, req) else {
            return (0..layout.nodes.len()).filter(fits).collect();
        };
        if !self.known(job) {
            // Sizes unknown: the copy elsewhere may cost anything; it stays.
            return Vec::new();
        }
        // What is staged on `node` is all of the job's inputs.
        let sizes = job.inputs.iter().filter_map(|i| self.sources.get(&(job.team.as_str(), i.url.as_str())));
        let staged = self.secs(sizes.map(|(size, _)| *size).sum());
        let tol = self.s.locality.tolerance_s;
        (0..layout.nodes.len()).filter(fits).filter(|n| staged - self.saved_s(job, *n) + tol < wait).collect()
    }

    /// Where a job the queue keeps waiting is staged ahead: the node where it would be ready
    /// soonest, max(W(n), copy left on n), most cached first among equals, then node order.
    pub(super) fn ahead(&self, layout: &Layout<'_>, job: &Job, req: &Request) -> Option<NodeId> {
        (0..layout.nodes.len())
            .filter_map(|n| {
                let ready = self.wait_s(layout, n, req)?.max(self.copy_s(job, n));
                Some((n, ready, self.saved_s(job, n)))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1).then(b.2.total_cmp(&a.2)).then(a.0.cmp(&b.0)))
            .map(|(n, ..)| n)
    }
}
