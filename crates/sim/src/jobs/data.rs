//! Datasets in the job simulator (`gantry sim jobs --datasets FILE`, issue 22): each
//! application reads one dataset, and the run compares three ways of getting it to the GPUs.
//!
//! - [`DataMode::Copy`]: what users do today: the job copies its dataset when it starts, GPUs
//!   held and idle for `bytes / bandwidth`, at every start (a resumed job copies again).
//! - [`DataMode::Stage`]: the job declares it as an input; the core stages it on a node before
//!   placing the job there (`gantry_core::sched::Stage`), into that node's virtual cache, and
//!   knows nothing of the caches.
//! - [`DataMode::Locality`]: the same, and the core is told what every node's cache holds (the
//!   snapshot's `locality`, as the server is told by its agents), so it prefers those nodes.
//!
//! Each node has a cache of `cache_bytes`, per team as the agents keep it (a team's copy is
//! not another team's), least recently used evicted first. A gang is staged on every node of
//! its placement (one copy per node); a worker that lands on a node lacking the dataset all the
//! same copies it as it starts, GPUs held.
//!
//! Measured per run ([`DataStats`]): GPU-seconds held idle by copies, the stage-in time
//! (seconds of copying ordered by `Stage` decisions, and copies made holding GPUs) and the part
//! of it *exposed*: copying during a round in which the queue had started its job (placed it,
//! or kept it waiting only for that copy), up to the round's end or the copy's. Copying while
//! the queue keeps the job waiting anyway (it would not have run then) is hidden behind its
//! queue wait. A copy that ends within a round is reported then, and the job starts as it ends
//! (the server passes when the agent reports it; see `super::datarun`).

use std::collections::HashMap;
use std::path::Path;

use crate::trace::{Table, TraceError};

/// How jobs get their dataset (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataMode {
    /// Copied at every start, GPUs held.
    Copy,
    /// Staged while pending, placement blind to the caches.
    Stage,
    /// Staged while pending, placement prefers the nodes holding it.
    Locality,
}

impl DataMode {
    /// The three modes, in the order reported.
    pub const ALL: [DataMode; 3] = [DataMode::Copy, DataMode::Stage, DataMode::Locality];

    /// The name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Copy => "copy-holding-gpus",
            Self::Stage => "stage",
            Self::Locality => "stage+locality",
        }
    }
}

/// One application's dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Its source URL (one per application).
    pub url: String,
    /// Size, bytes.
    pub bytes: u64,
}

/// The datasets file and the node-local parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct DataSetup {
    /// Application → dataset.
    pub datasets: HashMap<String, Dataset>,
    /// Node-local stage bandwidth, bytes a second.
    pub bandwidth_bps: u64,
    /// Each node's cache, bytes.
    pub cache_bytes: u64,
}

impl DataSetup {
    /// Seconds to copy `bytes`.
    pub fn copy_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.bandwidth_bps.max(1) as f64
    }
}

/// Reads a datasets file: `application,url,bytes` (more columns, such as the size's source,
/// are allowed and ignored).
pub fn read_datasets(path: &Path) -> Result<HashMap<String, Dataset>, TraceError> {
    let mut table = Table::open(path, &["application", "url", "bytes"])?;
    let mut rows = Vec::new();
    while let Some(row) = table.next_row()? {
        let bytes = row.float("bytes")?;
        if !(0.0..=1e16).contains(&bytes) {
            return Err(row.bad("bytes", format!("expected 0 to 10 PB, found {bytes}")));
        }
        let url = row.text("url")?.trim().to_string();
        rows.push((row.text("application")?.trim().to_string(), Dataset { url, bytes: bytes as u64 }));
    }
    Ok(table.finish(rows)?.into_iter().collect())
}

/// What a run measured of its datasets.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct DataStats {
    /// GPU-seconds held idle while jobs copied their dataset.
    pub copy_idle_gpu_s: f64,
    /// Seconds of copying `Stage` decisions ordered.
    pub stage_in_s: f64,
    /// Of which a started job waited for.
    pub exposed_s: f64,
    /// Stagings ordered.
    pub stagings: u64,
    /// Of which the node's cache held the dataset already.
    pub hits: u64,
}

impl DataStats {
    /// The share of stage-in time hidden behind queue wait (1 when nothing was copied).
    pub fn hidden_share(&self) -> f64 {
        if self.stage_in_s <= 0.0 { 1.0 } else { 1.0 - (self.exposed_s / self.stage_in_s).clamp(0.0, 1.0) }
    }

    /// Adds another run's figures.
    pub fn add(&mut self, o: &DataStats) {
        self.copy_idle_gpu_s += o.copy_idle_gpu_s;
        self.stage_in_s += o.stage_in_s;
        self.exposed_s += o.exposed_s;
        self.stagings += o.stagings;
        self.hits += o.hits;
    }
}

/// Every node's cache: per node, (team, url) → (bytes, last use s), LRU within `cache_bytes`.
#[derive(Debug, Clone, Default)]
pub struct Caches {
    nodes: Vec<HashMap<(String, String), (u64, u64)>>,
    limit: u64,
}

impl Caches {
    /// `nodes` empty caches of `limit` bytes.
    pub fn new(nodes: usize, limit: u64) -> Self {
        Self { nodes: vec![HashMap::new(); nodes], limit }
    }

    /// How many nodes it keeps caches for.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Whether `node` holds `url` for `team` (and marks it used at `now`).
    pub fn hit(&mut self, node: usize, team: &str, url: &str, now: u64) -> bool {
        let key = (team.to_owned(), url.to_owned());
        match self.nodes.get_mut(node).and_then(|c| c.get_mut(&key)) {
            Some(e) => {
                e.1 = now;
                true
            }
            None => false,
        }
    }

    /// Puts `url` of `bytes` into `node`'s cache, evicting the least recently used entries.
    pub fn insert(&mut self, node: usize, team: &str, url: &str, bytes: u64, now: u64) {
        let (limit, Some(cache)) = (self.limit, self.nodes.get_mut(node)) else { return };
        if bytes > limit {
            return;
        }
        cache.insert((team.to_owned(), url.to_owned()), (bytes, now));
        while cache.values().map(|e| e.0).sum::<u64>() > limit {
            let oldest = cache.iter().min_by_key(|(k, e)| (e.1, (*k).clone())).map(|(k, _)| k.clone());
            match oldest {
                Some(k) if k.1 != url || k.0 != team => cache.remove(&k),
                _ => break,
            };
        }
    }

    /// Every entry, as the core's snapshot takes them (node ids `node-<i>`).
    pub fn listing(&self) -> Vec<gantry_core::sched::Cached> {
        let mut out = Vec::new();
        for (i, cache) in self.nodes.iter().enumerate() {
            for ((team, url), (bytes, used)) in cache {
                out.push(gantry_core::sched::Cached {
                    node: format!("node-{i}"),
                    team: team.clone(),
                    url: url.clone(),
                    version: "1".into(),
                    bytes: *bytes,
                    last_used_ms: *used as i64 * 1000,
                });
            }
        }
        out.sort_by(|a, b| (&a.node, &a.team, &a.url).cmp(&(&b.node, &b.team, &b.url)));
        out
    }
}
