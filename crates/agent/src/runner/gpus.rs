//! The agent's view of its GPUs through the GPU layer: inventory for registration, health and
//! samples for heartbeats, and simulated load for jobs on a simulated fleet.

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use gantry_api::model::{GpuHealth, GpuInfo, GpuReport};
use gantry_gpu::findings::FindingsConfig;
use gantry_gpu::health::{HealthConfig, HealthState};
use gantry_gpu::{
    Collector, FleetHandle, FleetSpec, GpuBackend, MIB, NvmlBackend, ProcessUsage, SimulatedBackend,
    UtilProfile,
};

use super::error::AgentError;
use crate::exporter::{ExporterConfig, sampler::Publisher, sampler::SnapshotCell};

/// Which GPUs to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendChoice {
    /// NVML when it initialises, else this simulated fleet (e.g. `4xA100-80GB`).
    Auto(String),
    /// NVML only.
    Nvml,
    /// A simulated fleet.
    Simulated(String),
}

/// Sampled GPUs and, for a simulated fleet, the handle that puts job load on them.
#[derive(Debug)]
pub struct Gpus {
    // A mutex makes the agent's futures `Send` (backends are `Send` but not `Sync`).
    collector: Mutex<Collector>,
    sim: Option<FleetHandle>,
    opened: Instant,
    /// Publishes each collection for `/metrics` when the node serves GPU metrics.
    metrics: Option<Mutex<Publisher>>,
    /// One line saying which GPUs these are.
    pub description: String,
}

impl Gpus {
    /// Opens the chosen backend.
    pub fn open(choice: &BackendChoice, seed: u64) -> Result<Self, AgentError> {
        let fleet = match choice {
            BackendChoice::Simulated(spec) => spec.as_str(),
            BackendChoice::Nvml => return Ok(Self::nvml(NvmlBackend::open()?)),
            BackendChoice::Auto(spec) => match NvmlBackend::open() {
                Ok(nvml) => return Ok(Self::nvml(nvml)),
                Err(e) => {
                    tracing::debug!(error = %e, "NVML unavailable");
                    spec.as_str()
                }
            },
        };
        let backend = SimulatedBackend::new(&FleetSpec::from_flag_or_file(fleet, seed)?)?;
        let sim = backend.handle();
        let description = format!("no NVIDIA GPU found: using a simulated fleet of {fleet}");
        let collector = Collector::new(Box::new(backend), HealthConfig::default(), FindingsConfig::default());
        Ok(Self {
            collector: Mutex::new(collector),
            sim: Some(sim),
            opened: Instant::now(),
            metrics: None,
            description,
        })
    }

    fn nvml(backend: NvmlBackend) -> Self {
        let description = format!("using {} NVIDIA GPU(s) through NVML", backend.inventory().len());
        let collector = Collector::new(Box::new(backend), HealthConfig::default(), FindingsConfig::default());
        Self {
            collector: Mutex::new(collector),
            sim: None,
            opened: Instant::now(),
            metrics: None,
            description,
        }
    }

    /// Also publishes every collection (the heartbeat's) as exporter metrics; returns the cell
    /// to serve with [`crate::exporter::server::router`].
    pub fn publish_metrics(&mut self, cfg: &ExporterConfig) -> std::sync::Arc<SnapshotCell> {
        let publisher = Publisher::new(cfg);
        let cell = publisher.cell();
        self.metrics = Some(Mutex::new(publisher));
        cell
    }

    /// Serves the node's cache and staging metrics beside the GPUs' (when it publishes any).
    pub fn publish_cache(&self, cache: std::sync::Arc<crate::exporter::cache::CacheMetrics>) {
        if let Some(metrics) = &self.metrics {
            metrics.lock().unwrap_or_else(PoisonError::into_inner).set_cache(cache);
        }
    }

    /// Inventory in the store's terms.
    pub fn inventory(&self) -> Vec<GpuInfo> {
        let collector = self.collector.lock().unwrap_or_else(PoisonError::into_inner);
        collector
            .backend()
            .inventory()
            .iter()
            .map(|g| GpuInfo {
                uuid: g.uuid.clone(),
                index: g.index,
                model: g.name.clone(),
                memory_mib: g.memory_total_bytes / MIB,
            })
            .collect()
    }

    /// Each GPU's device minor (`/dev/nvidiaN`), by UUID: the driver's where it can be read
    /// ([`super::devices::nvidia_minor`]), else the index; a simulated GPU's is its index.
    pub fn minors(&self) -> std::collections::BTreeMap<String, u32> {
        let collector = self.collector.lock().unwrap_or_else(PoisonError::into_inner);
        let simulated = self.sim.is_some();
        collector
            .backend()
            .inventory()
            .iter()
            .map(|g| {
                let driver = (!simulated).then(|| super::devices::nvidia_minor(&g.pci_bus_id)).flatten();
                (g.uuid.clone(), driver.unwrap_or(g.index))
            })
            .collect()
    }

    /// One collection cycle: health and samples per GPU, and the compute processes.
    pub fn collect(&self) -> (Vec<GpuReport>, Vec<ProcessUsage>) {
        let mut collector = self.collector.lock().unwrap_or_else(PoisonError::into_inner);
        let started = Instant::now();
        let result = collector.collect(self.opened.elapsed());
        if let Some(metrics) = &self.metrics {
            let took = started.elapsed();
            metrics.lock().unwrap_or_else(PoisonError::into_inner).record(result.as_ref(), took);
        }
        match result {
            Ok(c) => {
                let reports = c
                    .gpus
                    .iter()
                    .map(|g| GpuReport {
                        uuid: g.info.uuid.clone(),
                        health: health(g.health),
                        sample: serde_json::to_value(g).ok(),
                    })
                    .collect();
                (reports, c.processes)
            }
            Err(e) => {
                tracing::warn!(error = %e, "GPU collection failed");
                (Vec::new(), Vec::new())
            }
        }
    }

    /// On a simulated fleet, loads each GPU of a job with a process whose utilisation its
    /// environment picks (`GANTRY_SIM_PROFILE`, see [`UtilProfile::for_job`]); returns the
    /// simulated pids.
    pub fn load(
        &self,
        job_id: i64,
        pid: u32,
        uuids: &[String],
        memory_mib: u64,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Vec<u32> {
        let Some(sim) = &self.sim else {
            return Vec::new();
        };
        let mut pids = Vec::new();
        for (i, uuid) in uuids.iter().enumerate() {
            // Pids stay below 2^22 on Linux, so the GPU's position above that keeps them distinct.
            let sim_pid = pid + ((i as u32) << 22);
            let profile = UtilProfile::for_job(env);
            match sim.start_process(uuid.as_str(), sim_pid, Some(job_id.to_string()), memory_mib, profile) {
                Ok(()) => pids.push(sim_pid),
                Err(e) => {
                    tracing::warn!(job = job_id, error = %e, "could not put simulated load on {uuid}")
                }
            }
        }
        pids
    }

    /// Removes a job's simulated load.
    pub fn unload(&self, pids: &[u32]) {
        if let Some(sim) = &self.sim {
            for pid in pids {
                let _ = sim.stop_process(*pid);
            }
        }
    }

    /// What a simulated process feeds its GPU with, when its profile models it
    /// (`GANTRY_SIM_PROFILE=input_stall:…`); `None` on real GPUs.
    pub fn sim_input(&self, pid: u32) -> Option<gantry_gpu::stall::InputActivity> {
        self.sim.as_ref()?.input_of(pid)
    }

    /// The simulated fleet's handle, for injecting faults in tests.
    pub fn fleet(&self) -> Option<FleetHandle> {
        self.sim.clone()
    }
}

fn health(state: HealthState) -> GpuHealth {
    match state {
        HealthState::Healthy => GpuHealth::Healthy,
        HealthState::Suspect => GpuHealth::Suspect,
        HealthState::Recovering => GpuHealth::Recovering,
        HealthState::Unhealthy => GpuHealth::Unhealthy,
    }
}
