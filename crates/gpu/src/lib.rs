//! Gantry's GPU layer: what the agent, the exporter, the device plugin and the scheduler read
//! GPUs through.
//!
//! - [`GpuBackend`] is the seam. [`NvmlBackend`] talks to the NVIDIA driver through
//!   `nvml-wrapper`, which loads `libnvidia-ml.so.1` at run time, so this crate builds and runs
//!   on machines without a GPU: opening it there returns [`GpuError::LibraryNotFound`].
//!   [`SimulatedBackend`] is a seeded fleet (`8xH100`, `2xA100-80GB,4xT4` or a TOML file) whose
//!   readings follow the processes placed on it, with scriptable faults.
//! - [`health`] is the per-GPU state machine (healthy → suspect → unhealthy → recovering →
//!   healthy); [`findings`] flags bottlenecks; [`Collector`] runs one cycle of both over a backend.
//!
//! Time is always passed in (`now`, a [`Duration`](std::time::Duration) since the caller opened
//! the backend); nothing here reads a clock, so the simulated fleet is deterministic for a seed.
//!
//! # Putting load on the simulated fleet (for the agent and tests)
//!
//! Keep a [`FleetHandle`] from [`SimulatedBackend::handle`] before handing the backend to the
//! sampler, then:
//!
//! ```text
//! handle.start_process(0, 4242, Some("job-17".into()), 20_000, UtilProfile::Steady { percent: 85.0 })?;
//! handle.start_process("GPU-…uuid…", 4243, None, 512, UtilProfile::Bursty { low: 5.0, high: 95.0, period_s: 4.0 })?;
//! handle.stop_process(4242)?;
//! handle.inject_now(1, FaultKind::Xid(79))?;           // or handle.inject(Fault { at, gpu, kind })
//! ```
//!
//! `start_process(gpu, pid, job_id, memory_mib, profile)` takes a GPU index or UUID; the job id,
//! when given, is reported with the process so the exporter attributes it without `/proc`.
//! A fleet file looks like:
//!
//! ```text
//! seed = 7
//! gpus = "2xA100-80GB,4xT4"
//! [[process]]
//! gpu = 0
//! pid = 1000
//! job = "train-1"
//! memory_mib = 30000
//! util = { kind = "steady", percent = 90 }
//! [[fault]]
//! at_s = 30
//! gpu = 1
//! xid = 79          # or event = "double_bit_ecc" | "row_remap_failure" | "single_bit_ecc"
//!                   #   | "fall_off_bus" | "return_to_bus" | "thermal_throttle" (+ duration_s)
//! ```
//!
//! Start reading at [`GpuBackend`], then [`sim`], [`health`] and [`collect`].

mod backend;
pub mod collect;
mod error;
pub mod findings;
pub mod health;
mod nvml;
pub mod sim;
pub mod stall;
mod types;

pub use backend::GpuBackend;
pub use collect::{Collection, Collector, GpuReport};
pub use error::GpuError;
pub use nvml::{MIN_DRIVER_MAJOR, NvmlBackend};
pub use sim::{Fault, FaultKind, FleetHandle, FleetSpec, GpuRef, SimulatedBackend, UtilProfile};
pub use types::{GpuEvent, GpuEventKind, GpuInfo, GpuSample, MIB, ProcessUsage, Throttle};

/// Serialises a duration as fractional seconds.
pub(crate) fn serde_secs<S: serde::Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}
