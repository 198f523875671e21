//! The one error type of the GPU layer.

use std::time::Duration;

/// Everything that can go wrong while talking to GPUs, real or simulated.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The NVIDIA management library (`libnvidia-ml.so.1`) could not be loaded.
    #[error("the NVIDIA library was not found ({detail})")]
    LibraryNotFound {
        /// What the dynamic loader said.
        detail: String,
    },
    /// The library loaded but the kernel driver is not running.
    #[error("the NVIDIA library was found but the NVIDIA driver is not loaded")]
    DriverNotLoaded,
    /// The driver is older than Gantry supports ([`MIN_DRIVER_MAJOR`](crate::MIN_DRIVER_MAJOR)),
    /// or its library lacks a function Gantry calls.
    #[error("the NVIDIA driver is too old ({detail}); Gantry needs driver {min} or newer", min = crate::nvml::MIN_DRIVER_MAJOR)]
    DriverTooOld {
        /// The version found, or the function missing.
        detail: String,
    },
    /// NVML refused an operation for lack of permission.
    #[error("no permission to query the NVIDIA driver")]
    NoPermission,
    /// The GPU fell off the bus or is otherwise unreachable.
    #[error("GPU {index} is lost (fell off the bus or is unreachable)")]
    Lost {
        /// Index of the GPU.
        index: u32,
    },
    /// A GPU named by index or UUID does not exist.
    #[error("no GPU matches {0:?}")]
    UnknownGpu(String),
    /// Any other NVML failure, with the call that failed.
    #[error("NVML call {call} failed: {source}")]
    Nvml {
        /// The NVML call.
        call: &'static str,
        /// NVML's error.
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    /// A simulated fleet description could not be understood.
    #[error("invalid simulated fleet: {0}")]
    InvalidFleet(String),
    /// A simulated fleet file could not be read.
    #[error("could not read simulated fleet file {path}: {source}")]
    FleetFile {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A simulated process with this pid already runs.
    #[error("simulated process {0} already exists")]
    DuplicatePid(u32),
    /// No simulated process has this pid.
    #[error("no simulated process has pid {0}")]
    UnknownPid(u32),
    /// A simulated process asked for more memory than the GPU has free.
    #[error("GPU {index} has {free_mib} MiB free, process asked for {asked_mib} MiB")]
    OutOfMemory {
        /// GPU index.
        index: u32,
        /// Free memory.
        free_mib: u64,
        /// Requested memory.
        asked_mib: u64,
    },
    /// A time went backwards (the caller passes time in; it must not decrease).
    #[error("time went backwards: {now:?} after {last:?}")]
    TimeWentBackwards {
        /// The time passed now.
        now: Duration,
        /// The latest time seen before.
        last: Duration,
    },
}

impl GpuError {
    /// Maps an NVML error for `call` onto the typed variants callers act on.
    pub(crate) fn from_nvml(call: &'static str, e: nvml_wrapper::error::NvmlError) -> Self {
        use nvml_wrapper::error::NvmlError as E;
        match e {
            E::LibloadingError(l) => GpuError::LibraryNotFound { detail: l.to_string() },
            E::DriverNotLoaded => GpuError::DriverNotLoaded,
            E::NoPermission => GpuError::NoPermission,
            E::FailedToLoadSymbol(why) => {
                GpuError::DriverTooOld { detail: format!("its library lacks {call}: {why}") }
            }
            other => GpuError::Nvml { call, source: other },
        }
    }
}
