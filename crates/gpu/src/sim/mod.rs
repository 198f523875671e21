//! The simulated backend: a seeded fleet whose readings follow the processes placed on it.
//!
//! [`SimulatedBackend`] is what the sampler owns; [`FleetHandle`] is a cheap clone that other
//! parts (the agent launching jobs, tests) use to start and stop processes and inject faults
//! while the sampler keeps reading.

mod fault;
mod fleet;
mod models;
mod noise;
mod process;
mod spec;

pub use fault::{Fault, FaultKind};
pub use models::{MODELS, ModelSpec, find_model};
pub use process::{SIM_PROFILE_VAR, UtilProfile};
pub use spec::{FleetSpec, ProcessSpec};

use self::fleet::Fleet;
use self::process::SimProcess;
use crate::{GpuBackend, GpuError, GpuEvent, GpuInfo, GpuSample, MIB, ProcessUsage};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Driver version the simulated fleet reports.
pub const SIMULATED_DRIVER_VERSION: &str = "550.90.07";

/// A GPU named by index or UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuRef {
    /// NVML index.
    Index(u32),
    /// `GPU-…` UUID.
    Uuid(String),
}

impl From<u32> for GpuRef {
    fn from(i: u32) -> Self {
        GpuRef::Index(i)
    }
}

impl From<&str> for GpuRef {
    fn from(s: &str) -> Self {
        s.parse().map_or_else(|_| GpuRef::Uuid(s.to_owned()), GpuRef::Index)
    }
}

/// A simulated fleet that implements [`GpuBackend`].
#[derive(Debug)]
pub struct SimulatedBackend {
    handle: FleetHandle,
}

/// Shared control of a simulated fleet: start/stop processes, inject faults.
#[derive(Debug, Clone)]
pub struct FleetHandle {
    fleet: Arc<Mutex<Fleet>>,
    inventory: Arc<[GpuInfo]>,
}

impl SimulatedBackend {
    /// Builds the fleet and places the spec's processes at time zero.
    pub fn new(spec: &FleetSpec) -> Result<Self, GpuError> {
        let fleet = Fleet::new(spec);
        let inventory: Arc<[GpuInfo]> = fleet.inventory().into();
        let handle = FleetHandle { fleet: Arc::new(Mutex::new(fleet)), inventory };
        for p in &spec.processes {
            handle.start_process(p.gpu, p.pid, p.job.clone(), p.memory_mib, p.util)?;
        }
        Ok(Self { handle })
    }

    /// A handle for starting and stopping processes and injecting faults.
    pub fn handle(&self) -> FleetHandle {
        self.handle.clone()
    }
}

impl FleetHandle {
    fn lock(&self) -> MutexGuard<'_, Fleet> {
        // The fleet holds plain data; a panic elsewhere cannot leave it half-updated in a way
        // that matters more than losing the whole simulation would.
        self.fleet.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The GPUs of the fleet.
    pub fn gpus(&self) -> &[GpuInfo] {
        &self.inventory
    }

    /// Resolves an index or UUID to an index.
    pub fn resolve(&self, gpu: &GpuRef) -> Result<u32, GpuError> {
        let found = match gpu {
            GpuRef::Index(i) => self.inventory.iter().find(|g| g.index == *i),
            GpuRef::Uuid(u) => self.inventory.iter().find(|g| g.uuid == *u),
        };
        found.map(|g| g.index).ok_or_else(|| GpuError::UnknownGpu(format!("{gpu:?}")))
    }

    /// Starts a process holding `memory_mib` on `gpu` and loading it per `profile`, from the
    /// latest time the backend was read at.
    pub fn start_process(
        &self,
        gpu: impl Into<GpuRef>,
        pid: u32,
        job_id: Option<String>,
        memory_mib: u64,
        profile: UtilProfile,
    ) -> Result<(), GpuError> {
        let index = self.resolve(&gpu.into())?;
        let mut fleet = self.lock();
        if fleet.processes.contains_key(&pid) {
            return Err(GpuError::DuplicatePid(pid));
        }
        let free_mib = fleet.memory_free_bytes(index as usize) / MIB;
        if memory_mib > free_mib {
            return Err(GpuError::OutOfMemory { index, free_mib, asked_mib: memory_mib });
        }
        let started_at = fleet.now;
        let process = SimProcess { gpu: index, job_id, memory_bytes: memory_mib * MIB, profile, started_at };
        fleet.processes.insert(pid, process);
        Ok(())
    }

    /// Stops a process; its memory and load go away at once.
    pub fn stop_process(&self, pid: u32) -> Result<(), GpuError> {
        self.lock().processes.remove(&pid).map(|_| ()).ok_or(GpuError::UnknownPid(pid))
    }

    /// What the simulated process `pid` feeds its GPU with now, when its profile models it
    /// ([`UtilProfile::input_at`]).
    pub fn input_of(&self, pid: u32) -> Option<crate::stall::InputActivity> {
        let fleet = self.lock();
        let p = fleet.processes.get(&pid)?;
        p.profile.input_at(fleet.now.saturating_sub(p.started_at))
    }

    /// Schedules a fault; one whose time has passed fires on the next read.
    pub fn inject(&self, fault: Fault) -> Result<(), GpuError> {
        self.resolve(&GpuRef::Index(fault.gpu))?;
        self.lock().faults.push(fault);
        Ok(())
    }

    /// Fires `kind` on `gpu` at the next read.
    pub fn inject_now(&self, gpu: impl Into<GpuRef>, kind: FaultKind) -> Result<(), GpuError> {
        let gpu = self.resolve(&gpu.into())?;
        let at = self.lock().now;
        self.inject(Fault { at, gpu, kind })
    }
}

impl GpuBackend for SimulatedBackend {
    fn kind(&self) -> &'static str {
        "simulated"
    }

    fn driver_version(&self) -> &str {
        SIMULATED_DRIVER_VERSION
    }

    fn inventory(&self) -> &[GpuInfo] {
        &self.handle.inventory
    }

    fn sample(&mut self, index: u32, now: Duration) -> Result<GpuSample, GpuError> {
        let mut fleet = self.handle.lock();
        fleet.advance(now)?;
        if index as usize >= fleet.gpus.len() {
            return Err(GpuError::UnknownGpu(index.to_string()));
        }
        fleet.sample(index as usize)
    }

    fn processes(&mut self, now: Duration) -> Result<Vec<ProcessUsage>, GpuError> {
        let mut fleet = self.handle.lock();
        fleet.advance(now)?;
        Ok(fleet.processes())
    }

    fn poll_events(&mut self, now: Duration) -> Result<Vec<GpuEvent>, GpuError> {
        let mut fleet = self.handle.lock();
        fleet.advance(now)?;
        Ok(std::mem::take(&mut fleet.events))
    }

    fn probe(&mut self, index: u32, now: Duration) -> Result<(), GpuError> {
        self.sample(index, now).map(|_| ())
    }
}
