//! Every export, listed once: its name (scenarios may only mark these `not_supported`) and a
//! compile-time check that its type is the one `nvml-wrapper` loads it as.

use nvml_wrapper_sys::bindings::NvmlLib;

/// Only compiles when `f` has the function-pointer type of the `NvmlLib` field.
fn same<T, E>(_field: &Result<T, E>, _f: T) {}

macro_rules! exports {
    ($($module:ident :: $name:ident),* $(,)?) => {
        /// The NVML functions this library exports.
        pub(crate) const EXPORTED: &[&str] = &[$(stringify!($name)),*];

        /// Never called: it exists so that a signature that drifts from the bindings is a
        /// compile error rather than undefined behaviour at run time.
        #[allow(dead_code)] // reason: a compile-time check only.
        fn signatures_match_the_bindings(lib: &NvmlLib) {
            $( same(&lib.$name, crate::$module::$name); )*
        }
    };
}

exports! {
    system::nvmlInit_v2,
    system::nvmlInitWithFlags,
    system::nvmlShutdown,
    system::nvmlErrorString,
    system::nvmlSystemGetDriverVersion,
    system::nvmlSystemGetNVMLVersion,
    system::nvmlSystemGetCudaDriverVersion,
    system::nvmlSystemGetCudaDriverVersion_v2,
    system::nvmlDeviceGetCount_v2,
    system::nvmlDeviceGetHandleByIndex_v2,
    system::nvmlDeviceGetIndex,
    device::nvmlDeviceGetName,
    device::nvmlDeviceGetUUID,
    device::nvmlDeviceGetPciInfo_v3,
    device::nvmlDeviceGetMemoryInfo_v2,
    device::nvmlDeviceGetEnforcedPowerLimit,
    device::nvmlDeviceGetMaxClockInfo,
    device::nvmlDeviceGetClockInfo,
    device::nvmlDeviceGetMigMode,
    device::nvmlDeviceGetUtilizationRates,
    device::nvmlDeviceGetEncoderUtilization,
    device::nvmlDeviceGetDecoderUtilization,
    device::nvmlDeviceGetPowerUsage,
    device::nvmlDeviceGetTotalEnergyConsumption,
    device::nvmlDeviceGetTemperature,
    device::nvmlDeviceGetPcieReplayCounter,
    device::nvmlDeviceGetPcieThroughput,
    device::nvmlDeviceGetTotalEccErrors,
    device::nvmlDeviceGetCurrentClocksThrottleReasons,
    device::nvmlDeviceGetCurrentClocksEventReasons,
    device::nvmlDeviceGetFieldValues,
    device::nvmlDeviceGetComputeRunningProcesses_v3,
    device::nvmlDeviceGetProcessUtilization,
    device::nvmlDeviceGetNvLinkState,
    device::nvmlDeviceGetNvLinkRemotePciInfo_v2,
    device::nvmlDeviceGetSupportedEventTypes,
    events::nvmlEventSetCreate,
    events::nvmlDeviceRegisterEvents,
    events::nvmlEventSetWait_v2,
    events::nvmlEventSetFree,
    gpm::nvmlGpmQueryDeviceSupport,
    gpm::nvmlGpmSampleAlloc,
    gpm::nvmlGpmSampleFree,
    gpm::nvmlGpmSampleGet,
    gpm::nvmlGpmMetricsGet,
}
