//! One collection cycle: events → health, samples, probes, processes, findings.
//!
//! Shared by the exporter's sampler loop and `gantry gpus`, so both tell the same story.

use crate::findings::{Finding, FindingsConfig, GpuWindow};
use crate::health::{GpuHealth, HealthConfig, HealthState, Signal, Transition};
use crate::{GpuBackend, GpuError, GpuEventKind, GpuInfo, GpuSample, ProcessUsage};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Everything known about one GPU after a cycle.
#[derive(Debug, Clone, Serialize)]
pub struct GpuReport {
    /// Inventory entry.
    pub info: GpuInfo,
    /// The reading, unless it failed.
    pub sample: Option<GpuSample>,
    /// Why the reading failed.
    pub error: Option<String>,
    /// Health state.
    pub health: HealthState,
    /// Findings in force.
    pub findings: Vec<Finding>,
    /// XIDs seen since start, by number.
    pub xid_counts: BTreeMap<u32, u64>,
}

/// Result of one cycle.
#[derive(Debug, Clone, Serialize)]
pub struct Collection {
    /// Backend time of the cycle.
    #[serde(serialize_with = "crate::serde_secs")]
    pub at: Duration,
    /// `nvml` or `simulated`.
    pub backend: &'static str,
    /// Driver version.
    pub driver_version: String,
    /// One per GPU, in index order.
    pub gpus: Vec<GpuReport>,
    /// Compute processes.
    pub processes: Vec<ProcessUsage>,
    /// Health changes during this cycle.
    pub transitions: Vec<Transition>,
}

/// Owns a backend and the per-GPU state that outlives a cycle.
pub struct Collector {
    backend: Box<dyn GpuBackend>,
    health_cfg: HealthConfig,
    findings_cfg: FindingsConfig,
    health: Vec<GpuHealth>,
    windows: Vec<GpuWindow>,
    xids: Vec<BTreeMap<u32, u64>>,
    remap_failed: Vec<bool>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector").field("backend", &self.backend.kind()).finish_non_exhaustive()
    }
}

impl Collector {
    /// Starts with every GPU healthy.
    pub fn new(backend: Box<dyn GpuBackend>, health_cfg: HealthConfig, findings_cfg: FindingsConfig) -> Self {
        let n = backend.inventory().len();
        Self {
            health: (0..n as u32).map(GpuHealth::new).collect(),
            windows: vec![GpuWindow::default(); n],
            xids: vec![BTreeMap::new(); n],
            remap_failed: vec![false; n],
            backend,
            health_cfg,
            findings_cfg,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &dyn GpuBackend {
        self.backend.as_ref()
    }

    /// Runs one cycle at `now`. Only a failing event poll or process list is an error;
    /// a failing GPU read is recorded in its report.
    pub fn collect(&mut self, now: Duration) -> Result<Collection, GpuError> {
        let mut transitions = Vec::new();
        for ev in self.backend.poll_events(now)? {
            let i = ev.gpu_index as usize;
            if let (GpuEventKind::Xid(n), Some(counts)) = (ev.kind, self.xids.get_mut(i)) {
                *counts.entry(n).or_default() += 1;
            }
            if let Some(h) = self.health.get_mut(i) {
                transitions.extend(h.on_signal(&self.health_cfg, Signal::Event(ev.kind), now));
            }
        }
        let processes = self.backend.processes(now)?;
        let inventory = self.backend.inventory().to_vec();
        let mut gpus = Vec::with_capacity(inventory.len());
        for (i, info) in inventory.into_iter().enumerate() {
            let (sample, error) = self.check(i, info.index, now, &mut transitions);
            let findings = match &sample {
                Some(s) => {
                    let has_process = processes.iter().any(|p| p.gpu_index == info.index);
                    if let Some(util) = s.gpu_util_percent {
                        self.windows[i].push(&self.findings_cfg, now, util, has_process);
                    }
                    self.windows[i].judge(&self.findings_cfg, s, info.memory_total_bytes)
                }
                None => Vec::new(),
            };
            let health = self.health[i].state();
            gpus.push(GpuReport { info, sample, error, health, findings, xid_counts: self.xids[i].clone() });
        }
        Ok(Collection {
            at: now,
            backend: self.backend.kind(),
            driver_version: self.backend.driver_version().to_owned(),
            gpus,
            processes,
            transitions,
        })
    }

    /// Reads GPU `i`, feeds the result to its health machine and probes it when due.
    fn check(
        &mut self,
        i: usize,
        index: u32,
        now: Duration,
        transitions: &mut Vec<Transition>,
    ) -> (Option<GpuSample>, Option<String>) {
        let cfg = &self.health_cfg;
        let (sample, error) = match self.backend.sample(index, now) {
            Ok(s) => (Some(s), None),
            Err(e) => {
                let signal = match e {
                    GpuError::Lost { .. } => Signal::Event(GpuEventKind::Lost),
                    _ => Signal::ReadFailed,
                };
                transitions.extend(self.health[i].on_signal(cfg, signal, now));
                (None, Some(e.to_string()))
            }
        };
        // NVML has no event for a failed row remap: it shows in the reading, and it lasts until
        // the GPU is reset, so it is critical when it appears and fails every probe after.
        let remap_failed = sample.as_ref().is_some_and(|s| s.row_remap_failure == Some(true));
        if remap_failed && !self.remap_failed[i] {
            let signal = Signal::Event(GpuEventKind::RowRemapFailure);
            transitions.extend(self.health[i].on_signal(cfg, signal, now));
        }
        self.remap_failed[i] = remap_failed;
        if self.health[i].probe_due(now) {
            let passed = self.backend.probe(index, now).is_ok() && !remap_failed;
            transitions.extend(self.health[i].on_probe(cfg, passed, now));
        }
        transitions.extend(self.health[i].on_tick(cfg, now));
        (sample, error)
    }
}
