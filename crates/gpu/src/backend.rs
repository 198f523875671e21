//! The seam between Gantry and GPUs: one trait, a real and a simulated implementation.

use crate::{GpuError, GpuEvent, GpuInfo, GpuSample, ProcessUsage};
use std::time::Duration;

/// A source of GPU facts. Calls may block (NVML does), so run them off async executors.
///
/// Time is passed in as `now`, the caller's monotonic time since it opened the backend; it must
/// never decrease. The NVML backend ignores it except to stamp events; the simulated backend is a
/// pure function of its seed, its script and the `now` values it is called with.
pub trait GpuBackend: Send {
    /// Short name: `nvml` or `simulated`.
    fn kind(&self) -> &'static str;
    /// Driver version (the `DCGM_FI_DRIVER_VERSION` label).
    fn driver_version(&self) -> &str;
    /// The GPUs found when the backend was opened.
    fn inventory(&self) -> &[GpuInfo];
    /// Reads one GPU. A GPU that fell off the bus answers [`GpuError::Lost`].
    fn sample(&mut self, index: u32, now: Duration) -> Result<GpuSample, GpuError>;
    /// Compute processes on all GPUs.
    fn processes(&mut self, now: Duration) -> Result<Vec<ProcessUsage>, GpuError>;
    /// Health events (XID, ECC, lost GPU) seen since the previous call.
    fn poll_events(&mut self, now: Duration) -> Result<Vec<GpuEvent>, GpuError>;
    /// Checks that an unhealthy GPU answers again; `Ok` means the probe passed.
    fn probe(&mut self, index: u32, now: Duration) -> Result<(), GpuError>;
}
