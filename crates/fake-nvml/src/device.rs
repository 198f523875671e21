//! Per-GPU queries: identity, memory, utilisation, clocks, power, temperature, PCIe, ECC,
//! throttle reasons, field values, processes and NVLink. Each answers from the scenario's
//! readings at the current time; an unscripted reading answers `NOT_SUPPORTED`.

use crate::scenario::Gpu;
use crate::{
    INSUFFICIENT_SIZE, INVALID_ARGUMENT, NOT_SUPPORTED, Ret, SUCCESS, b, fill, put, put_str, with_gpu,
};
use b::field_id as fi;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong};

fn uuid(gpu: &Gpu, index: usize) -> String {
    gpu.uuid.clone().unwrap_or_else(|| format!("GPU-fa4e0000-0000-4000-8000-{index:012x}"))
}

pub(crate) fn bus_id(gpu: &Gpu, index: usize) -> String {
    gpu.pci_bus_id.clone().unwrap_or_else(|| format!("00000000:{:02X}:00.0", 0x18 + index))
}

/// `nvmlPciInfo_t` for a bus id in `dddddddd:bb:dd.f` form.
fn pci_info(bus_id: &str) -> b::nvmlPciInfo_t {
    let mut p = b::nvmlPciInfo_t {
        busIdLegacy: [0; 16],
        domain: 0,
        bus: 0,
        device: 0,
        pciDeviceId: 0x2335_10DE,
        pciSubSystemId: 0,
        busId: [0; 32],
    };
    let parts: Vec<&str> = bus_id.split([':', '.']).collect();
    let hex = |k: usize| parts.get(k).and_then(|s| u32::from_str_radix(s, 16).ok()).unwrap_or(0);
    (p.domain, p.bus, p.device) = (hex(0), hex(1), hex(2));
    fill(&mut p.busId, bus_id);
    fill(&mut p.busIdLegacy, bus_id.get(4..).unwrap_or(bus_id));
    p
}

fn some<T>(v: Option<T>) -> Result<T, Ret> {
    v.ok_or(NOT_SUPPORTED)
}

macro_rules! scalar {
    ($name:ident, $t:ty, |$c:ident| $body:expr) => {
        #[unsafe(no_mangle)]
        pub(crate) unsafe extern "C" fn $name(device: b::nvmlDevice_t, out: *mut $t) -> Ret {
            let v = with_gpu(stringify!($name), device, |$c| $body);
            // SAFETY: `out` is null or valid (NVML's contract).
            unsafe { put(out, v) }
        }
    };
}

macro_rules! string {
    ($name:ident, |$c:ident| $body:expr) => {
        #[unsafe(no_mangle)]
        pub(crate) unsafe extern "C" fn $name(
            device: b::nvmlDevice_t,
            out: *mut c_char,
            length: c_uint,
        ) -> Ret {
            let v = with_gpu(stringify!($name), device, |$c| Ok($body));
            // SAFETY: `out` holds `length` bytes (NVML's contract).
            unsafe { put_str(out, length, v) }
        }
    };
}

string!(nvmlDeviceGetName, |c| c.gpu.name.clone());
string!(nvmlDeviceGetUUID, |c| uuid(c.gpu, c.index));
scalar!(nvmlDeviceGetPciInfo_v3, b::nvmlPciInfo_t, |c| Ok(pci_info(&bus_id(c.gpu, c.index))));
scalar!(nvmlDeviceGetEnforcedPowerLimit, c_uint, |c| some(c.gpu.power_limit_mw));
scalar!(nvmlDeviceGetPowerUsage, c_uint, |c| some(c.reading.power_mw));
scalar!(nvmlDeviceGetTotalEnergyConsumption, c_ulonglong, |c| some(c.reading.energy_mj));
scalar!(nvmlDeviceGetPcieReplayCounter, c_uint, |c| some(c.reading.pcie_replays));
scalar!(nvmlDeviceGetSupportedEventTypes, c_ulonglong, |c| Ok(c.gpu.event_mask()));
scalar!(nvmlDeviceGetCurrentClocksThrottleReasons, c_ulonglong, |c| throttle(&c.reading));
scalar!(nvmlDeviceGetCurrentClocksEventReasons, c_ulonglong, |c| throttle(&c.reading));
scalar!(nvmlDeviceGetUtilizationRates, b::nvmlUtilization_t, |c| {
    // The driver has no whole-GPU utilisation in MIG mode (dcgm-exporter#216).
    if c.gpu.mig {
        return Err(NOT_SUPPORTED);
    }
    let (gpu, memory) = (some(c.reading.gpu_util_percent)?, some(c.reading.mem_util_percent)?);
    Ok(b::nvmlUtilization_t { gpu, memory })
});

fn throttle(r: &crate::Reading) -> Result<c_ulonglong, Ret> {
    Ok(some(r.throttle.as_ref())?.iter().fold(0, |m, t| m | t.bit()))
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: b::nvmlDevice_t,
    memory: *mut b::nvmlMemory_v2_t,
) -> Ret {
    // NVML_STRUCT_VERSION(Memory, 2): a caller passing the v1 struct gets a version mismatch.
    let want = (std::mem::size_of::<b::nvmlMemory_v2_t>() | (2 << 24)) as c_uint;
    // SAFETY: `memory` is null or valid (NVML's contract).
    match unsafe { memory.as_ref() } {
        None => return INVALID_ARGUMENT,
        Some(m) if m.version != want => return crate::VERSION_MISMATCH,
        Some(_) => {}
    }
    let v = with_gpu("nvmlDeviceGetMemoryInfo_v2", device, |c| {
        let total = c.gpu.memory_total_bytes;
        let reserved = c.reading.memory_reserved_bytes.unwrap_or(0);
        let used = c.reading.memory_used_bytes.unwrap_or(0);
        let free = total.saturating_sub(used).saturating_sub(reserved);
        Ok(b::nvmlMemory_v2_t { version: want, total, reserved, free, used })
    });
    // SAFETY: checked non-null above.
    unsafe { put(memory, v) }
}

macro_rules! by_kind {
    ($name:ident, |$c:ident, $kind:ident| $body:expr) => {
        #[unsafe(no_mangle)]
        pub(crate) unsafe extern "C" fn $name(
            device: b::nvmlDevice_t,
            $kind: c_uint,
            out: *mut c_uint,
        ) -> Ret {
            let v = with_gpu(stringify!($name), device, |$c| $body);
            // SAFETY: `out` is null or valid.
            unsafe { put(out, v) }
        }
    };
}

by_kind!(nvmlDeviceGetClockInfo, |c, clock| match clock {
    b::nvmlClockType_enum_NVML_CLOCK_SM => some(c.reading.sm_clock_mhz),
    b::nvmlClockType_enum_NVML_CLOCK_MEM => some(c.reading.mem_clock_mhz),
    _ => Err(NOT_SUPPORTED),
});
by_kind!(nvmlDeviceGetMaxClockInfo, |c, clock| match clock {
    b::nvmlClockType_enum_NVML_CLOCK_SM => some(c.gpu.max_sm_clock_mhz),
    _ => Err(NOT_SUPPORTED),
});
by_kind!(nvmlDeviceGetTemperature, |c, sensor| match sensor {
    b::nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU => some(c.reading.gpu_temp_c),
    _ => Err(INVALID_ARGUMENT),
});
by_kind!(nvmlDeviceGetPcieThroughput, |c, counter| match counter {
    b::nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_TX_BYTES => some(c.reading.pcie_tx_kb_per_s),
    b::nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_RX_BYTES => some(c.reading.pcie_rx_kb_per_s),
    _ => Err(INVALID_ARGUMENT),
});
by_kind!(nvmlDeviceGetNvLinkState, |c, link| {
    match c.gpu.nvlink_peers.len() {
        0 => Err(NOT_SUPPORTED),
        n if (link as usize) < n => Ok(b::nvmlEnableState_enum_NVML_FEATURE_ENABLED),
        _ => Ok(b::nvmlEnableState_enum_NVML_FEATURE_DISABLED),
    }
});

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    device: b::nvmlDevice_t,
    link: c_uint,
    pci: *mut b::nvmlPciInfo_t,
) -> Ret {
    let v = with_gpu("nvmlDeviceGetNvLinkRemotePciInfo_v2", device, |c| {
        let peer = c.gpu.nvlink_peers.get(link as usize).ok_or(NOT_SUPPORTED)?;
        Ok(pci_info(peer))
    });
    // SAFETY: `pci` is null or valid.
    unsafe { put(pci, v) }
}

macro_rules! codec {
    ($name:ident, $field:ident) => {
        #[unsafe(no_mangle)]
        pub(crate) unsafe extern "C" fn $name(
            device: b::nvmlDevice_t,
            util: *mut c_uint,
            period_us: *mut c_uint,
        ) -> Ret {
            let v = with_gpu(stringify!($name), device, |c| some(c.reading.$field));
            // SAFETY: both are null or valid.
            match unsafe { put(period_us, v.map(|_| 167_000)) } {
                SUCCESS => unsafe { put(util, v) },
                e => e,
            }
        }
    };
}

codec!(nvmlDeviceGetEncoderUtilization, encoder_util_percent);
codec!(nvmlDeviceGetDecoderUtilization, decoder_util_percent);

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: b::nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Ret {
    let v = with_gpu("nvmlDeviceGetMigMode", device, |c| Ok(c_uint::from(c.gpu.mig)));
    // SAFETY: both are null or valid.
    match unsafe { put(current, v) } {
        SUCCESS => unsafe { put(pending, v) },
        e => e,
    }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: b::nvmlDevice_t,
    error_type: c_uint,
    // Volatile and aggregate counts are the same here: the fake never reboots.
    _counter_type: c_uint,
    count: *mut c_ulonglong,
) -> Ret {
    let v = with_gpu("nvmlDeviceGetTotalEccErrors", device, |c| match error_type {
        b::nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED => {
            some(c.reading.ecc_corrected_volatile)
        }
        b::nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED => {
            some(c.reading.ecc_uncorrected_volatile)
        }
        _ => Err(INVALID_ARGUMENT),
    });
    // SAFETY: `count` is null or valid.
    unsafe { put(count, v) }
}

/// One field value, or `NOT_SUPPORTED` for a field the scenario does not script.
fn field(r: &crate::Reading, id: c_uint) -> Option<(b::nvmlValueType_t, b::nvmlValue_t)> {
    let uint = |v: u32| (b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT, b::nvmlValue_t { uiVal: v });
    match id {
        fi::NVML_FI_DEV_MEMORY_TEMP => r.memory_temp_c.map(uint),
        fi::NVML_FI_DEV_REMAPPED_COR => r.remapped_rows_correctable.map(uint),
        fi::NVML_FI_DEV_REMAPPED_UNC => r.remapped_rows_uncorrectable.map(uint),
        fi::NVML_FI_DEV_REMAPPED_FAILURE => r.row_remap_failure.map(|f| uint(u32::from(f))),
        fi::NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL => r.nvlink_total_kib.map(|k| {
            (b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, b::nvmlValue_t { ullVal: k })
        }),
        _ => None,
    }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: b::nvmlDevice_t,
    count: c_int,
    values: *mut b::nvmlFieldValue_t,
) -> Ret {
    let Ok(n) = usize::try_from(count) else {
        return INVALID_ARGUMENT;
    };
    if values.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: NVML's contract: `values` holds `count` entries with `fieldId` set.
    let values = unsafe { std::slice::from_raw_parts_mut(values, n) };
    let r = with_gpu("nvmlDeviceGetFieldValues", device, |c| {
        for v in values.iter_mut() {
            v.timestamp = (c.now * 1e6) as i64;
            v.latencyUsec = 0;
            match field(&c.reading, v.fieldId) {
                Some((kind, value)) => (v.nvmlReturn, v.valueType, v.value) = (SUCCESS, kind, value),
                None => v.nvmlReturn = NOT_SUPPORTED,
            }
        }
        Ok(())
    });
    r.err().unwrap_or(SUCCESS)
}

/// One sample per running process that declares `sm_util_percent`, stamped at the fake's time,
/// when that time is after `last_seen` (µs; 0 asks for every sample kept);
/// `NVML_ERROR_NOT_FOUND` when there is none, as the driver answers when no process ran a
/// kernel since `last_seen`.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: b::nvmlDevice_t,
    utilization: *mut b::nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> Ret {
    let samples = match with_gpu("nvmlDeviceGetProcessUtilization", device, |c| {
        let stamp = (c.now * 1e6) as u64;
        let running = c.gpu.processes_at(c.now).filter_map(|p| p.sm_util_percent.map(|u| (p.pid, u)));
        Ok(if last_seen == 0 || stamp > last_seen {
            running.map(|(pid, u)| (pid, u, stamp)).collect::<Vec<_>>()
        } else {
            Vec::new()
        })
    }) {
        Ok(s) => s,
        Err(e) => return e,
    };
    // SAFETY: `count` is null or valid.
    let Some(count) = (unsafe { count.as_mut() }) else {
        return INVALID_ARGUMENT;
    };
    if samples.is_empty() {
        *count = 0;
        return b::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
    }
    let room = *count as usize;
    *count = samples.len() as c_uint;
    if utilization.is_null() || room < samples.len() {
        return INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller said `utilization` holds `room >= samples.len()` entries.
    let out = unsafe { std::slice::from_raw_parts_mut(utilization, samples.len()) };
    for (o, (pid, sm, stamp)) in out.iter_mut().zip(samples) {
        *o = b::nvmlProcessUtilizationSample_t {
            pid,
            timeStamp: stamp,
            smUtil: sm,
            memUtil: 0,
            encUtil: 0,
            decUtil: 0,
        };
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: b::nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut b::nvmlProcessInfo_t,
) -> Ret {
    const NO_INSTANCE: c_uint = 0xFFFF_FFFF;
    let procs = match with_gpu("nvmlDeviceGetComputeRunningProcesses_v3", device, |c| {
        Ok(c.gpu.processes_at(c.now).map(|p| (p.pid, p.used_memory_bytes)).collect::<Vec<_>>())
    }) {
        Ok(p) => p,
        Err(e) => return e,
    };
    // SAFETY: `count` is null or valid.
    let Some(count) = (unsafe { count.as_mut() }) else {
        return INVALID_ARGUMENT;
    };
    let room = *count as usize;
    *count = procs.len() as c_uint;
    if procs.is_empty() {
        return SUCCESS;
    }
    if infos.is_null() || room < procs.len() {
        return INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller said `infos` holds `room >= procs.len()` entries.
    let out = unsafe { std::slice::from_raw_parts_mut(infos, procs.len()) };
    for (o, (pid, mem)) in out.iter_mut().zip(procs) {
        *o = b::nvmlProcessInfo_t {
            pid,
            // NVML_VALUE_NOT_AVAILABLE: the driver could not say (some containers, Windows WDDM).
            usedGpuMemory: mem.unwrap_or(u64::MAX),
            gpuInstanceId: NO_INSTANCE,
            computeInstanceId: NO_INSTANCE,
        };
    }
    SUCCESS
}
