//! The sampler thread and the snapshot it publishes.

use super::attribution::Attributor;
use super::encode::{self, Counters, Pods};
use super::pod_names::PodNames;
use super::pods::{PodCell, PodUids, ProcessPod};
use axum::body::Bytes;
use gantry_gpu::{Collection, Collector};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the exporter needs besides a collector.
#[derive(Debug, Clone)]
pub struct ExporterConfig {
    /// Time between collections.
    pub interval: Duration,
    /// `hostname` label.
    pub hostname: String,
    /// Where to read process environments and cgroups (normally `/proc`).
    pub proc_root: PathBuf,
    /// Kubernetes attribution kept up to date by someone else (`None`: no pod labels).
    pub pods: Option<Arc<PodCell>>,
    /// The kubelet's pod log directory (`/var/log/pods`), to name the pods of process series
    /// (`None`: process series carry `pod_uid` only).
    pub pod_logs: Option<PathBuf>,
}

impl ExporterConfig {
    /// Defaults: 1 s cadence, this machine's hostname, `/proc`.
    pub fn new() -> Self {
        Self {
            interval: Duration::from_secs(1),
            hostname: local_hostname(),
            proc_root: PathBuf::from("/proc"),
            pods: None,
            pod_logs: None,
        }
    }
}

impl Default for ExporterConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// This machine's hostname, `localhost` if it cannot be read.
pub fn local_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The latest encoded collection.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Prometheus text.
    pub body: Bytes,
    /// When it was published; `None` until the first collection succeeded.
    pub collected_at: Option<Instant>,
}

/// Holds the latest snapshot; readers clone an `Arc`, the writer swaps it.
#[derive(Debug)]
pub struct SnapshotCell(RwLock<Arc<Snapshot>>);

impl Default for SnapshotCell {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotCell {
    /// An empty cell: only the exporter's own counters until the first collection.
    pub fn new() -> Self {
        let mut body = String::new();
        encode::encode_counters(&mut body, &Counters::default());
        Self(RwLock::new(Arc::new(Snapshot { body: Bytes::from(body), collected_at: None })))
    }

    /// The latest snapshot.
    pub fn latest(&self) -> Arc<Snapshot> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Replaces the latest snapshot.
    pub fn publish(&self, s: Snapshot) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(s);
    }
}

/// A running sampler; dropping it stops the thread.
#[derive(Debug)]
pub struct Exporter {
    cell: Arc<SnapshotCell>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    interval: Duration,
}

impl Exporter {
    /// Starts collecting at once, then every `cfg.interval`.
    pub fn start(collector: Collector, cfg: ExporterConfig) -> std::io::Result<Self> {
        let publisher = Publisher::new(&cfg);
        let cell = publisher.cell();
        let stop = Arc::new(AtomicBool::new(false));
        let interval = cfg.interval;
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("gantry-sampler".to_owned())
            .spawn(move || run(collector, cfg.interval, publisher, &s))?;
        Ok(Self { cell, stop, thread: Some(thread), interval })
    }

    /// The snapshot cell the server reads.
    pub fn cell(&self) -> Arc<SnapshotCell> {
        self.cell.clone()
    }

    /// Collection cadence.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Turns collections into published snapshots: attribution, counters, encoding. The sampler
/// thread uses one; so does the agent of `gantry up`, which serves the collections it already
/// makes for its heartbeats instead of opening the GPUs twice.
#[derive(Debug)]
pub struct Publisher {
    cell: Arc<SnapshotCell>,
    attributor: Attributor,
    hostname: String,
    counters: Counters,
    pods: Option<(Arc<PodCell>, PodUids)>,
    last: Option<Attributed>,
    /// The node's dataset cache, when an agent serves these metrics.
    cache: Option<Arc<super::cache::CacheMetrics>>,
}

/// A collection with its jobs and pod UIDs.
#[derive(Debug)]
struct Attributed {
    collection: Collection,
    jobs: Vec<Arc<str>>,
    uids: Vec<Option<ProcessPod>>,
}

impl Publisher {
    /// A publisher into a new cell.
    pub fn new(cfg: &ExporterConfig) -> Self {
        Self {
            cell: Arc::new(SnapshotCell::new()),
            attributor: Attributor::new(&cfg.proc_root),
            hostname: cfg.hostname.clone(),
            counters: Counters::default(),
            pods: cfg.pods.clone().map(|cell| {
                let uids = PodUids::new(&cfg.proc_root);
                let uids = match &cfg.pod_logs {
                    Some(dir) => uids.with_names(PodNames::new(dir)),
                    None => uids,
                };
                (cell, uids)
            }),
            last: None,
            cache: None,
        }
    }

    /// Also appends the node's cache and staging metrics to every snapshot.
    pub fn set_cache(&mut self, cache: Arc<super::cache::CacheMetrics>) {
        self.cache = Some(cache);
    }

    /// The cell the `/metrics` route serves.
    pub fn cell(&self) -> Arc<SnapshotCell> {
        self.cell.clone()
    }

    /// Records one collection attempt that took `took`; on failure the previous collection is
    /// served again, with the error counted.
    pub fn record(&mut self, result: Result<&Collection, &gantry_gpu::GpuError>, took: Duration) {
        self.counters.collections += 1;
        match result {
            Ok(c) => {
                for t in &c.transitions {
                    tracing::warn!(gpu = t.gpu, from = t.from.as_str(), to = t.to.as_str(), reason = %t.reason, "GPU health changed");
                }
                let jobs = self.attributor.attribute(&c.processes);
                let uids = match &mut self.pods {
                    Some((_, uids)) => uids.lookup(&c.processes),
                    None => Vec::new(),
                };
                self.last = Some(Attributed { collection: c.clone(), jobs, uids });
            }
            Err(e) => {
                self.counters.errors += 1;
                tracing::warn!(error = %e, "GPU collection failed; serving the previous one");
            }
        }
        self.counters.last_duration = took;
        if let Some(a) = &self.last {
            let map = self.pods.as_ref().map(|(cell, _)| cell.latest());
            let pods = Pods { map: map.as_deref(), uids: &a.uids };
            let mut body =
                encode::encode_with_pods(&a.collection, &self.hostname, &a.jobs, pods, &self.counters);
            if let Some(cache) = &self.cache {
                cache.encode(&mut body);
            }
            self.cell.publish(Snapshot { body: Bytes::from(body), collected_at: Some(Instant::now()) });
        }
    }
}

fn run(mut collector: Collector, interval: Duration, mut publisher: Publisher, stop: &AtomicBool) {
    let origin = Instant::now();
    let mut next = origin;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let result = collector.collect(started - origin);
        publisher.record(result.as_ref(), started.elapsed());
        next += interval;
        let now = Instant::now();
        if next < now {
            // Fell behind (slow NVML): skip the missed ticks instead of bursting.
            next = now + interval;
        }
        while !stop.load(Ordering::Relaxed) && Instant::now() < next {
            std::thread::park_timeout(next.saturating_duration_since(Instant::now()));
        }
    }
}
