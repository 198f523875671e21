//! Every exported metric, declared once.
//!
//! GPU series follow dcgm-exporter's default counter set (`etc/default-counters.csv`): same
//! names, types, units and labels, so dashboards built for dcgm-exporter work unchanged.
//! Counters keep dcgm's names without a `_total` suffix, which is why the exporter writes the
//! Prometheus text format itself instead of using an OpenMetrics encoder that appends one.

use gantry_gpu::GpuSample;

/// Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Goes up and down.
    Gauge,
    /// Only goes up (resets on driver reload).
    Counter,
}

impl Kind {
    /// The word in `# TYPE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// A per-GPU metric read from a sample; `None` means the GPU does not support it.
#[derive(Debug, Clone, Copy)]
pub struct GpuMetric {
    /// Metric name.
    pub name: &'static str,
    /// Type.
    pub kind: Kind,
    /// Help text (dcgm-exporter's).
    pub help: &'static str,
    /// How to read it.
    pub read: fn(&GpuSample) -> Option<f64>,
}

const MIB: f64 = 1024.0 * 1024.0;

macro_rules! m {
    ($name:literal, $kind:ident, $help:literal, |$s:ident| $read:expr) => {
        GpuMetric { name: $name, kind: Kind::$kind, help: $help, read: |$s: &GpuSample| $read }
    };
}

/// Labels on every GPU series, in the order dcgm-exporter writes them.
pub const GPU_LABELS: [&str; 7] =
    ["gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", "DCGM_FI_DRIVER_VERSION"];

/// Labels a GPU series gets on Kubernetes when one container holds the GPU, in the order
/// dcgm-exporter writes them (after [`GPU_LABELS`]).
pub const POD_LABELS: [&str; 3] = ["container", "namespace", "pod"];

/// dcgm-exporter's default set, in its order.
pub const DCGM_METRICS: &[GpuMetric] = &[
    m!("DCGM_FI_DEV_SM_CLOCK", Gauge, "SM clock frequency (in MHz).", |s| s.sm_clock_mhz.map(f64::from)),
    m!("DCGM_FI_DEV_MEM_CLOCK", Gauge, "Memory clock frequency (in MHz).", |s| s
        .mem_clock_mhz
        .map(f64::from)),
    m!("DCGM_FI_DEV_MEMORY_TEMP", Gauge, "Memory temperature (in C).", |s| s.memory_temp_celsius),
    m!("DCGM_FI_DEV_GPU_TEMP", Gauge, "GPU temperature (in C).", |s| s.gpu_temp_celsius),
    m!("DCGM_FI_DEV_POWER_USAGE", Gauge, "Power draw (in W).", |s| s.power_watts),
    m!(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        Counter,
        "Total energy consumption since boot (in mJ).",
        |s| s.energy_millijoules.map(|e| e as f64)
    ),
    m!("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", Counter, "Total number of PCIe retries.", |s| s
        .pcie_replay_count
        .map(|c| c as f64)),
    m!("DCGM_FI_DEV_GPU_UTIL", Gauge, "GPU utilization (in %).", |s| s.gpu_util_percent),
    m!("DCGM_FI_DEV_MEM_COPY_UTIL", Gauge, "Memory utilization (in %).", |s| s.mem_copy_util_percent),
    m!("DCGM_FI_DEV_ENC_UTIL", Gauge, "Encoder utilization (in %).", |s| s.encoder_util_percent),
    m!("DCGM_FI_DEV_DEC_UTIL", Gauge, "Decoder utilization (in %).", |s| s.decoder_util_percent),
    m!("DCGM_FI_DEV_XID_ERRORS", Gauge, "Value of the last XID error encountered.", |s| Some(f64::from(
        s.last_xid
    ))),
    m!("DCGM_FI_DEV_FB_FREE", Gauge, "Framebuffer memory free (in MiB).", |s| Some(
        (s.memory_free_bytes as f64 / MIB).floor()
    )),
    m!("DCGM_FI_DEV_FB_USED", Gauge, "Framebuffer memory used (in MiB).", |s| Some(
        (s.memory_used_bytes as f64 / MIB).ceil()
    )),
    m!("DCGM_FI_DEV_FB_RESERVED", Gauge, "Framebuffer memory reserved (in MiB).", |s| Some(
        (s.memory_reserved_bytes as f64 / MIB).round()
    )),
    m!(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        Counter,
        "Total number of NVLink bandwidth counters for all lanes.",
        |s| s.nvlink_bytes_total.map(|b| b as f64)
    ),
    m!(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        Counter,
        "Number of remapped rows for uncorrectable errors",
        |s| s.remapped_rows_uncorrectable.map(|r| r as f64)
    ),
    m!(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        Counter,
        "Number of remapped rows for correctable errors",
        |s| s.remapped_rows_correctable.map(|r| r as f64)
    ),
    m!("DCGM_FI_DEV_ROW_REMAP_FAILURE", Gauge, "Whether remapping of rows has failed", |s| s
        .row_remap_failure
        .map(|f| if f { 1.0 } else { 0.0 })),
    m!("DCGM_FI_PROF_GR_ENGINE_ACTIVE", Gauge, "Ratio of time the graphics engine is active.", |s| s
        .gr_engine_active),
    m!("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Gauge, "Ratio of cycles the tensor (HMMA) pipe is active.", |s| s
        .tensor_active),
    m!(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        Gauge,
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        |s| s.dram_active
    ),
    m!(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        Gauge,
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        |s| s.pcie_tx_bytes_per_second
    ),
    m!(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        Gauge,
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        |s| s.pcie_rx_bytes_per_second
    ),
];

/// dcgm-exporter defaults Gantry does not export, with why.
pub const DCGM_NOT_EXPORTED: &[(&str, &str)] = &[(
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "only meaningful inside vGPU guests; NVML on bare metal has no value to report",
)];

/// A Gantry-specific metric: name, type, help and the labels it adds to the GPU labels.
#[derive(Debug, Clone, Copy)]
pub struct GantryMetric {
    /// Metric name.
    pub name: &'static str,
    /// Type.
    pub kind: Kind,
    /// Help text.
    pub help: &'static str,
    /// Labels beyond the GPU labels (none for exporter-wide series, which carry no GPU labels).
    pub extra_labels: &'static [&'static str],
    /// Whether the series carries the GPU labels.
    pub per_gpu: bool,
}

const fn g(
    name: &'static str,
    kind: Kind,
    help: &'static str,
    extra_labels: &'static [&'static str],
    per_gpu: bool,
) -> GantryMetric {
    GantryMetric { name, kind, help, extra_labels, per_gpu }
}

/// Health state per GPU.
pub const HEALTH_STATE: GantryMetric = g(
    "gantry_gpu_health_state",
    Kind::Gauge,
    "GPU health: 0 healthy, 1 suspect, 2 recovering, 3 unhealthy.",
    &[],
    true,
);
/// XIDs seen, by number.
pub const XID_ERRORS: GantryMetric = g(
    "gantry_gpu_xid_errors_total",
    Kind::Counter,
    "XID errors seen since the exporter started, by XID.",
    &["xid"],
    true,
);
/// Findings, one series per kind, 1 while in force.
pub const FINDING: GantryMetric = g(
    "gantry_gpu_finding",
    Kind::Gauge,
    "1 while a finding (bottleneck) holds for the GPU, else 0.",
    &["finding"],
    true,
);
/// Memory per process with its job (and `pod_uid` on Kubernetes, from the process's cgroup).
/// The label is `job_id`, not `job`: Prometheus owns `job` (the scrape job) and would rename
/// ours to `exported_job`.
pub const PROCESS_MEMORY: GantryMetric = g(
    "gantry_gpu_process_memory_used_bytes",
    Kind::Gauge,
    "Framebuffer memory held by a process, with the job it belongs to (unknown if none).",
    &["pid", "job_id"],
    true,
);
/// Time the last collection took.
pub const COLLECTION_DURATION: GantryMetric = g(
    "gantry_exporter_collection_duration_seconds",
    Kind::Gauge,
    "Time the last collection took (in s).",
    &[],
    false,
);
/// Collections done.
pub const COLLECTIONS: GantryMetric =
    g("gantry_exporter_collections_total", Kind::Counter, "Collections done since start.", &[], false);
/// Collections that failed.
pub const COLLECTION_ERRORS: GantryMetric = g(
    "gantry_exporter_collection_errors_total",
    Kind::Counter,
    "Collections that failed since start.",
    &[],
    false,
);

/// Every Gantry-specific metric.
pub const GANTRY_METRICS: &[GantryMetric] =
    &[HEALTH_STATE, XID_ERRORS, FINDING, PROCESS_MEMORY, COLLECTION_DURATION, COLLECTIONS, COLLECTION_ERRORS];
