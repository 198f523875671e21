//! Plain data the backends return: inventory, samples, processes and events.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One mebibyte in bytes.
pub const MIB: u64 = 1024 * 1024;

/// What a GPU is: fixed for the life of the process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuInfo {
    /// NVML index (`gpu` label).
    pub index: u32,
    /// `GPU-…` UUID (`UUID` label).
    pub uuid: String,
    /// Product name as NVML reports it (`modelName` label).
    pub name: String,
    /// PCI bus id, `00000000:18:00.0` form (`pci_bus_id` label).
    pub pci_bus_id: String,
    /// Installed framebuffer memory in bytes.
    pub memory_total_bytes: u64,
    /// Enforced power limit in watts (`None` where the GPU cannot say).
    pub power_limit_watts: Option<f64>,
    /// Highest SM clock in MHz (`None` where the GPU cannot say).
    pub max_sm_clock_mhz: Option<u32>,
    /// PCI bus ids of GPUs reachable over active NVLinks.
    pub nvlink_peers: Vec<String>,
    /// Whether MIG mode is enabled.
    pub mig_enabled: bool,
}

/// Why the clocks are held down right now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Throttle {
    /// Software power cap or hardware power brake.
    pub power: bool,
    /// Software or hardware thermal slowdown.
    pub thermal: bool,
    /// Other hardware slowdown.
    pub hardware: bool,
}

impl Throttle {
    /// Whether any reason is set.
    pub fn any(&self) -> bool {
        self.power || self.thermal || self.hardware
    }
}

/// One reading of one GPU. Optional fields are those some GPUs do not support: `None` there,
/// never a made-up zero (a dashboard must not show a consumer card at 0 W).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GpuSample {
    /// NVML index.
    pub index: u32,
    /// Percent of time a kernel ran (`None` where NVML cannot say, e.g. in MIG mode).
    pub gpu_util_percent: Option<f64>,
    /// Percent of time memory was read or written.
    pub mem_copy_util_percent: Option<f64>,
    /// Encoder utilisation, percent.
    pub encoder_util_percent: Option<f64>,
    /// Decoder utilisation, percent.
    pub decoder_util_percent: Option<f64>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub mem_clock_mhz: Option<u32>,
    /// Power draw, watts.
    pub power_watts: Option<f64>,
    /// Energy since driver load, millijoules.
    pub energy_millijoules: Option<u64>,
    /// GPU temperature, °C.
    pub gpu_temp_celsius: Option<f64>,
    /// Memory (HBM) temperature, °C.
    pub memory_temp_celsius: Option<f64>,
    /// Framebuffer used by processes, bytes.
    pub memory_used_bytes: u64,
    /// Framebuffer free, bytes.
    pub memory_free_bytes: u64,
    /// Framebuffer reserved by the driver, bytes.
    pub memory_reserved_bytes: u64,
    /// PCIe replay counter.
    pub pcie_replay_count: Option<u64>,
    /// PCIe transmit throughput, bytes per second.
    pub pcie_tx_bytes_per_second: Option<f64>,
    /// PCIe receive throughput, bytes per second.
    pub pcie_rx_bytes_per_second: Option<f64>,
    /// Volatile single-bit ECC errors.
    pub ecc_single_bit_volatile: Option<u64>,
    /// Volatile double-bit ECC errors.
    pub ecc_double_bit_volatile: Option<u64>,
    /// Rows remapped after correctable errors.
    pub remapped_rows_correctable: Option<u64>,
    /// Rows remapped after uncorrectable errors.
    pub remapped_rows_uncorrectable: Option<u64>,
    /// A row remapping failed (the GPU needs service).
    pub row_remap_failure: Option<bool>,
    /// Throttle reasons.
    pub throttle: Throttle,
    /// Ratio of time the graphics/compute engine was active (0–1).
    pub gr_engine_active: Option<f64>,
    /// Ratio of cycles the tensor pipes were active (0–1).
    pub tensor_active: Option<f64>,
    /// Ratio of cycles the memory interface was active (0–1).
    pub dram_active: Option<f64>,
    /// Ratio of SMs busy, averaged over the interval (0–1; GPM's `SM_UTIL`, the reading
    /// DCGM calls `SM_ACTIVE`). A service's `sm_active` autoscaling metric reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sm_active: Option<f64>,
    /// NVLink traffic, all lanes, bytes since driver load.
    pub nvlink_bytes_total: Option<u64>,
    /// Last XID seen on this GPU (0: none).
    pub last_xid: u32,
}

/// A compute process using a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessUsage {
    /// Host pid.
    pub pid: u32,
    /// GPU the process runs on.
    pub gpu_index: u32,
    /// Framebuffer memory the process holds, bytes.
    pub memory_used_bytes: u64,
    /// Job id, when the backend knows it (the simulated backend does; NVML never).
    pub job_id: Option<String>,
    /// The process's own utilisation of the GPU, percent, when the backend reads it (the
    /// simulated backend does; NVML's per-process utilisation is not read yet): what tells an
    /// idle GPU's owner from a job borrowing the GPU beside it.
    pub util_percent: Option<u32>,
}

/// Something a GPU reported that may change its health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuEventKind {
    /// An XID error with its number.
    Xid(u32),
    /// A corrected single-bit ECC error.
    SingleBitEcc,
    /// An uncorrectable double-bit ECC error.
    DoubleBitEcc,
    /// Row remapping failed.
    RowRemapFailure,
    /// The GPU fell off the bus.
    Lost,
}

/// An event with the GPU and the time it was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuEvent {
    /// GPU index.
    pub gpu_index: u32,
    /// When it was seen (caller's clock).
    pub at: Duration,
    /// What happened.
    pub kind: GpuEventKind,
}
