//! The NVML backend: real GPUs through `nvml-wrapper`, which loads `libnvidia-ml.so.1` at run
//! time. Fields a GPU does not support come back as `None` rather than failing the read.

use crate::{GpuBackend, GpuError, GpuEvent, GpuEventKind, GpuInfo, GpuSample, ProcessUsage, Throttle};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id as fi;
use nvml_wrapper::{Device, EventSet, GpmSample, Nvml};
use std::path::Path;
use std::time::Duration;

/// NVLink links NVML can report per GPU.
const MAX_NVLINKS: u32 = 18;

/// The oldest driver branch whose library has every call the adapter needs: R510 added
/// `nvmlDeviceGetMemoryInfo_v2` (reserved memory) and `nvmlDeviceGetComputeRunningProcesses_v3`.
pub const MIN_DRIVER_MAJOR: u32 = 510;

/// GPUs read through NVML.
pub struct NvmlBackend {
    nvml: &'static Nvml,
    driver: String,
    inventory: Vec<GpuInfo>,
    events: Option<EventSet<'static>>,
    gpm_prev: Vec<Option<GpmSample<'static>>>,
    last_xid: Vec<u32>,
    /// Per GPU, the newest per-process utilisation sample read (µs; the next read asks for
    /// newer ones only).
    util_seen: Vec<u64>,
}

impl std::fmt::Debug for NvmlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlBackend").field("gpus", &self.inventory.len()).finish_non_exhaustive()
    }
}

/// Per process, the SM utilisation of its newest sample, and the newest sample's time (µs);
/// `NotFound` (no process ran a kernel since the last read) is an empty answer, and any other
/// failure `None` (the driver cannot tell processes apart: per-process readings stay unknown).
fn process_utilization(
    r: Result<Vec<nvml_wrapper::struct_wrappers::device::ProcessUtilizationSample>, NvmlError>,
) -> Option<(std::collections::HashMap<u32, u32>, u64)> {
    let samples = match r {
        Ok(s) => s,
        Err(NvmlError::NotFound) => Vec::new(),
        Err(_) => return None,
    };
    let mut newest: std::collections::HashMap<u32, (u64, u32)> = std::collections::HashMap::new();
    for s in &samples {
        let e = newest.entry(s.pid).or_insert((s.timestamp, s.sm_util));
        if s.timestamp >= e.0 {
            *e = (s.timestamp, s.sm_util);
        }
    }
    let at = samples.iter().map(|s| s.timestamp).max().unwrap_or(0);
    Some((newest.into_iter().map(|(pid, (_, u))| (pid, u)).collect(), at))
}

fn nv<T>(call: &'static str, r: Result<T, NvmlError>) -> Result<T, GpuError> {
    r.map_err(|e| GpuError::from_nvml(call, e))
}

impl NvmlBackend {
    /// Loads the library, lists the GPUs and registers for XID and ECC events.
    ///
    /// The `Nvml` handle is leaked on purpose: event sets and GPM samples borrow it, and a
    /// backend lives as long as the process. Open one per process.
    pub fn open() -> Result<Self, GpuError> {
        Self::opened(Nvml::init())
    }

    /// Like [`open`](Self::open), loading the library from `path` instead of searching the
    /// loader path for `libnvidia-ml.so.1` (tests load a fake one this way).
    pub fn open_at(path: &Path) -> Result<Self, GpuError> {
        Self::opened(Nvml::builder().lib_path(path.as_os_str()).init())
    }

    fn opened(init: Result<Nvml, NvmlError>) -> Result<Self, GpuError> {
        let nvml: &'static Nvml = Box::leak(Box::new(nv("nvmlInit", init)?));
        let driver = nv("nvmlSystemGetDriverVersion", nvml.sys_driver_version())?;
        // An unparsable version (a future format) is let through: a missing call then still
        // reports DriverTooOld when it is made.
        let major = driver.split('.').next().and_then(|m| m.parse::<u32>().ok());
        if major.is_some_and(|m| m < MIN_DRIVER_MAJOR) {
            return Err(GpuError::DriverTooOld { detail: format!("version {driver}") });
        }
        let count = nv("nvmlDeviceGetCount", nvml.device_count())?;
        let mut inventory = Vec::with_capacity(count as usize);
        for i in 0..count {
            let d = nv("nvmlDeviceGetHandleByIndex", nvml.device_by_index(i))?;
            inventory.push(describe(&d, i)?);
        }
        let events = register_events(nvml, count);
        Ok(Self {
            nvml,
            driver,
            inventory,
            events,
            gpm_prev: (0..count).map(|_| None).collect(),
            last_xid: vec![0; count as usize],
            util_seen: vec![0; count as usize],
        })
    }

    fn device(&self, index: u32) -> Result<Device<'static>, GpuError> {
        self.nvml.device_by_index(index).map_err(|e| lost_or(index, "nvmlDeviceGetHandleByIndex", e))
    }

    /// GR engine, tensor, DRAM and SM activity from GPM (Hopper and newer) between two samples.
    fn gpm(&mut self, index: u32, d: &Device<'static>) -> [Option<f64>; 4] {
        if !d.gpm_support().unwrap_or(false) {
            return [None; 4];
        }
        let Ok(cur) = d.gpm_sample() else {
            return [None; 4];
        };
        let slot = &mut self.gpm_prev[index as usize];
        let ids = [
            GpmMetricId::GraphicsUtil,
            GpmMetricId::AnyTensorUtil,
            GpmMetricId::DramBwUtil,
            GpmMetricId::SmUtil,
        ];
        let out = match slot.as_ref() {
            Some(prev) => match nvml_wrapper::gpm::gpm_metrics_get(self.nvml, prev, &cur, &ids) {
                Ok(vals) => {
                    let v = |k: usize| {
                        vals.get(k).and_then(|r| r.as_ref().ok()).map(|m| (m.value / 100.0).clamp(0.0, 1.0))
                    };
                    [v(0), v(1), v(2), v(3)]
                }
                Err(_) => [None; 4],
            },
            None => [None; 4],
        };
        *slot = Some(cur);
        out
    }
}

fn lost_or(index: u32, call: &'static str, e: NvmlError) -> GpuError {
    match e {
        NvmlError::GpuLost => GpuError::Lost { index },
        other => GpuError::from_nvml(call, other),
    }
}

/// A reading some GPUs do not have: `None` then, never a made-up zero. A GPU that fell off the
/// bus between two calls fails the whole sample instead of reporting absent readings.
fn optional<T>(index: u32, call: &'static str, r: Result<T, NvmlError>) -> Result<Option<T>, GpuError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::GpuLost) => Err(GpuError::Lost { index }),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => {
            tracing::debug!(gpu = index, call, error = %e, "reading unavailable");
            Ok(None)
        }
    }
}

fn describe(d: &Device<'_>, index: u32) -> Result<GpuInfo, GpuError> {
    let nvlink_peers = (0..MAX_NVLINKS)
        .filter_map(|l| {
            let link = d.link_wrapper_for(l);
            link.is_active().ok().filter(|a| *a).and_then(|_| link.remote_pci_info().ok()).map(|p| p.bus_id)
        })
        .collect();
    Ok(GpuInfo {
        index,
        uuid: nv("nvmlDeviceGetUUID", d.uuid())?,
        name: nv("nvmlDeviceGetName", d.name())?,
        pci_bus_id: nv("nvmlDeviceGetPciInfo", d.pci_info())?.bus_id,
        memory_total_bytes: nv("nvmlDeviceGetMemoryInfo", d.memory_info())?.total,
        power_limit_watts: d.enforced_power_limit().ok().map(|mw| f64::from(mw) / 1000.0),
        max_sm_clock_mhz: d.max_clock_info(Clock::SM).ok(),
        nvlink_peers,
        mig_enabled: d.mig_mode().map(|m| m.current == 1).unwrap_or(false),
    })
}

fn register_events(nvml: &'static Nvml, count: u32) -> Option<EventSet<'static>> {
    let wanted =
        EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR | EventTypes::SINGLE_BIT_ECC_ERROR;
    let mut set = nvml.create_event_set().ok()?;
    for i in 0..count {
        let Ok(d) = nvml.device_by_index(i) else {
            continue;
        };
        // GPUs too old for health events answer NotSupported; they are simply not watched.
        let types = d.supported_event_types().map(|t| t & wanted).unwrap_or(EventTypes::empty());
        if types.is_empty() {
            continue;
        }
        match d.register_events(types, set) {
            Ok(s) => set = s,
            Err(e) => {
                tracing::warn!(gpu = i, error = %e.error, "could not register for GPU health events");
                return None;
            }
        }
    }
    Some(set)
}

fn field_u64(v: &Result<nvml_wrapper::struct_wrappers::device::FieldValueSample, NvmlError>) -> Option<u64> {
    match v.as_ref().ok()?.value.as_ref().ok()? {
        SampleValue::U32(x) => Some(u64::from(*x)),
        SampleValue::U64(x) => Some(*x),
        SampleValue::I64(x) => u64::try_from(*x).ok(),
        SampleValue::F64(x) => Some(*x as u64),
    }
}

impl GpuBackend for NvmlBackend {
    fn kind(&self) -> &'static str {
        "nvml"
    }

    fn driver_version(&self) -> &str {
        &self.driver
    }

    fn inventory(&self) -> &[GpuInfo] {
        &self.inventory
    }

    fn sample(&mut self, index: u32, _now: Duration) -> Result<GpuSample, GpuError> {
        // A reading the GPU may lack: `None` if so; a lost GPU fails the sample.
        macro_rules! read {
            ($call:literal, $r:expr) => {
                optional(index, $call, $r)?
            };
        }
        let d = self.device(index)?;
        // Utilisation is not supported in MIG mode (dcgm-exporter#216): report none, not zero.
        let util = read!("nvmlDeviceGetUtilizationRates", d.utilization_rates());
        let mem = d.memory_info().map_err(|e| lost_or(index, "nvmlDeviceGetMemoryInfo", e))?;
        let ids = [
            fi::NVML_FI_DEV_MEMORY_TEMP,
            fi::NVML_FI_DEV_REMAPPED_COR,
            fi::NVML_FI_DEV_REMAPPED_UNC,
            fi::NVML_FI_DEV_REMAPPED_FAILURE,
            fi::NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL,
        ];
        let fields =
            read!("nvmlDeviceGetFieldValues", d.field_values_for(&ids.map(FieldId))).unwrap_or_default();
        let f = |k: usize| fields.get(k).and_then(field_u64);
        let reasons = read!("nvmlDeviceGetCurrentClocksThrottleReasons", d.current_throttle_reasons())
            .unwrap_or(ThrottleReasons::empty());
        let [gr, tensor, dram, sm] = self.gpm(index, &d);
        // NVML reports PCIe throughput in KB/s.
        let pcie = |c| optional(index, "nvmlDeviceGetPcieThroughput", d.pcie_throughput(c));
        let pcie = |c| pcie(c).map(|kb| kb.map(|kb| f64::from(kb) * 1024.0));
        let ecc =
            |t| optional(index, "nvmlDeviceGetTotalEccErrors", d.total_ecc_errors(t, EccCounter::Volatile));
        Ok(GpuSample {
            index,
            gpu_util_percent: util.as_ref().map(|u| f64::from(u.gpu)),
            mem_copy_util_percent: util.as_ref().map(|u| f64::from(u.memory)),
            encoder_util_percent: read!("nvmlDeviceGetEncoderUtilization", d.encoder_utilization())
                .map(|u| f64::from(u.utilization)),
            decoder_util_percent: read!("nvmlDeviceGetDecoderUtilization", d.decoder_utilization())
                .map(|u| f64::from(u.utilization)),
            sm_clock_mhz: read!("nvmlDeviceGetClockInfo", d.clock_info(Clock::SM)),
            mem_clock_mhz: read!("nvmlDeviceGetClockInfo", d.clock_info(Clock::Memory)),
            // NVML reports milliwatts.
            power_watts: read!("nvmlDeviceGetPowerUsage", d.power_usage()).map(|mw| f64::from(mw) / 1000.0),
            energy_millijoules: read!("nvmlDeviceGetTotalEnergyConsumption", d.total_energy_consumption()),
            gpu_temp_celsius: read!("nvmlDeviceGetTemperature", d.temperature(TemperatureSensor::Gpu))
                .map(f64::from),
            memory_temp_celsius: f(0).filter(|t| *t > 0).map(|t| t as f64),
            memory_used_bytes: mem.used,
            memory_free_bytes: mem.free,
            memory_reserved_bytes: mem.reserved,
            pcie_replay_count: read!("nvmlDeviceGetPcieReplayCounter", d.pcie_replay_counter())
                .map(u64::from),
            pcie_tx_bytes_per_second: pcie(PcieUtilCounter::Send)?,
            pcie_rx_bytes_per_second: pcie(PcieUtilCounter::Receive)?,
            ecc_single_bit_volatile: ecc(MemoryError::Corrected)?,
            ecc_double_bit_volatile: ecc(MemoryError::Uncorrected)?,
            remapped_rows_correctable: f(1),
            remapped_rows_uncorrectable: f(2),
            row_remap_failure: f(3).map(|v| v != 0),
            throttle: Throttle {
                power: reasons
                    .intersects(ThrottleReasons::SW_POWER_CAP | ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN),
                thermal: reasons
                    .intersects(ThrottleReasons::SW_THERMAL_SLOWDOWN | ThrottleReasons::HW_THERMAL_SLOWDOWN),
                hardware: reasons.contains(ThrottleReasons::HW_SLOWDOWN),
            },
            gr_engine_active: gr,
            tensor_active: tensor,
            dram_active: dram,
            sm_active: sm,
            // NVML counts NVLink traffic in KiB.
            nvlink_bytes_total: f(4).map(|kib| kib * 1024),
            last_xid: self.last_xid.get(index as usize).copied().unwrap_or(0),
        })
    }

    fn processes(&mut self, _now: Duration) -> Result<Vec<ProcessUsage>, GpuError> {
        let mut out = Vec::new();
        for info in &self.inventory {
            let Ok(d) = self.nvml.device_by_index(info.index) else {
                continue;
            };
            let Ok(procs) = d.running_compute_processes() else {
                continue;
            };
            let seen = self.util_seen.get(info.index as usize).copied().unwrap_or(0);
            let util = process_utilization(d.process_utilization_stats(seen));
            if let (Some((_, newest)), Some(slot)) = (&util, self.util_seen.get_mut(info.index as usize)) {
                *slot = (*slot).max(*newest);
            }
            out.extend(procs.into_iter().map(|p| ProcessUsage {
                pid: p.pid,
                gpu_index: info.index,
                memory_used_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => b,
                    UsedGpuMemory::Unavailable => 0,
                },
                job_id: None,
                // A process without a sample since the last read ran no kernel: 0 %.
                util_percent: util.as_ref().map(|(by_pid, _)| by_pid.get(&p.pid).copied().unwrap_or(0)),
            }));
        }
        Ok(out)
    }

    fn poll_events(&mut self, now: Duration) -> Result<Vec<GpuEvent>, GpuError> {
        let Some(set) = &self.events else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        loop {
            let data = match set.wait(0) {
                Ok(d) => d,
                Err(NvmlError::Timeout) => break,
                Err(e) => return Err(GpuError::from_nvml("nvmlEventSetWait", e)),
            };
            let Ok(gpu_index) = data.device.index() else {
                continue;
            };
            let kind = if data.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                GpuEventKind::Xid(match data.event_data {
                    Some(XidError::Value(n)) => u32::try_from(n).unwrap_or(u32::MAX),
                    _ => 999,
                })
            } else if data.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR) {
                GpuEventKind::DoubleBitEcc
            } else {
                GpuEventKind::SingleBitEcc
            };
            if let (GpuEventKind::Xid(n), Some(slot)) = (kind, self.last_xid.get_mut(gpu_index as usize)) {
                *slot = n;
            }
            out.push(GpuEvent { gpu_index, at: now, kind });
        }
        Ok(out)
    }

    fn probe(&mut self, index: u32, _now: Duration) -> Result<(), GpuError> {
        let d = self.device(index)?;
        d.uuid().map(|_| ()).map_err(|e| lost_or(index, "nvmlDeviceGetUUID", e))
    }
}
