//! Specifications of the GPU models the simulated backend knows, from the vendors' data sheets.

/// Fixed properties of one GPU model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelSpec {
    /// Name used in fleet specs (`8xH100`).
    pub key: &'static str,
    /// Product name as NVML reports it.
    pub product_name: &'static str,
    /// Framebuffer in MiB.
    pub memory_mib: u64,
    /// Framebuffer the driver reserves, MiB.
    pub reserved_mib: u64,
    /// Board power limit, watts.
    pub power_limit_watts: f64,
    /// Power at idle, watts.
    pub idle_watts: f64,
    /// Highest SM clock, MHz.
    pub max_sm_clock_mhz: u32,
    /// Idle SM clock, MHz.
    pub idle_sm_clock_mhz: u32,
    /// Memory clock, MHz.
    pub mem_clock_mhz: u32,
    /// Number of NVLinks (0: PCIe only).
    pub nvlinks: u32,
    /// High-bandwidth memory (has a memory temperature sensor).
    pub hbm: bool,
    /// Share of busy time a typical training kernel mix keeps the tensor pipes active.
    pub tensor_share: f64,
    /// Temperature at which the GPU slows down, °C.
    pub slowdown_celsius: f64,
}

#[allow(clippy::too_many_arguments, reason = "one row of the model table")]
const fn spec(
    key: &'static str,
    product_name: &'static str,
    memory_mib: u64,
    power: (f64, f64),
    sm_clock: (u32, u32),
    mem_clock_mhz: u32,
    nvlinks: u32,
    hbm: bool,
) -> ModelSpec {
    ModelSpec {
        key,
        product_name,
        memory_mib,
        reserved_mib: memory_mib / 160,
        power_limit_watts: power.0,
        idle_watts: power.1,
        max_sm_clock_mhz: sm_clock.0,
        idle_sm_clock_mhz: sm_clock.1,
        mem_clock_mhz,
        nvlinks,
        hbm,
        tensor_share: if hbm { 0.62 } else { 0.45 },
        slowdown_celsius: if hbm { 87.0 } else { 92.0 },
    }
}

/// Every model the simulated backend can place, keyed case-insensitively by `key`.
pub const MODELS: &[ModelSpec] = &[
    spec("H100", "NVIDIA H100 80GB HBM3", 81_559, (700.0, 72.0), (1980, 345), 2619, 18, true),
    spec("H200", "NVIDIA H200", 143_771, (700.0, 75.0), (1980, 345), 3201, 18, true),
    spec("A100-80GB", "NVIDIA A100-SXM4-80GB", 81_920, (400.0, 55.0), (1410, 210), 1593, 12, true),
    spec("A100-40GB", "NVIDIA A100-SXM4-40GB", 40_960, (400.0, 52.0), (1410, 210), 1215, 12, true),
    spec("A100", "NVIDIA A100-SXM4-40GB", 40_960, (400.0, 52.0), (1410, 210), 1215, 12, true),
    spec("V100", "Tesla V100-SXM2-32GB", 32_768, (300.0, 40.0), (1530, 135), 877, 6, true),
    spec("L40S", "NVIDIA L40S", 46_068, (350.0, 35.0), (2520, 210), 9001, 0, false),
    spec("L4", "NVIDIA L4", 23_034, (72.0, 16.0), (2040, 210), 6251, 0, false),
    spec("T4", "Tesla T4", 15_360, (70.0, 10.0), (1590, 300), 5001, 0, false),
];

/// Looks a model up by its key, ignoring case.
pub fn find_model(key: &str) -> Option<&'static ModelSpec> {
    MODELS.iter().find(|m| m.key.eq_ignore_ascii_case(key))
}
