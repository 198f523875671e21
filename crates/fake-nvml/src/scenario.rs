//! The scenario file: GPUs, their readings over time, processes, events and failures.
//!
//! Readings are in NVML's own units (milliwatts, bytes, KB/s, KiB, percent), exactly what the C
//! functions return, so that a test reading the adapter's output checks the adapter's
//! conversions rather than the fake's.

use serde::Deserialize;

/// A whole scenario: the driver and its GPUs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// What `nvmlSystemGetDriverVersion` answers.
    #[serde(default = "default_driver")]
    pub driver_version: String,
    /// What `nvmlSystemGetNVMLVersion` answers (default: derived from the driver version).
    #[serde(default)]
    pub nvml_version: Option<String>,
    /// What `nvmlSystemGetCudaDriverVersion_v2` answers (e.g. 13000 for CUDA 13.0).
    #[serde(default = "default_cuda")]
    pub cuda_driver_version: i32,
    /// Where time comes from.
    #[serde(default)]
    pub clock: Clock,
    /// Make `nvmlInit_v2` fail as a machine without a running driver would.
    #[serde(default)]
    pub init_error: Option<InitError>,
    /// Functions that answer `NVML_ERROR_NOT_SUPPORTED` on every GPU.
    #[serde(default)]
    pub not_supported: Vec<String>,
    /// GPUs in index order.
    #[serde(default, rename = "gpu")]
    pub gpus: Vec<Gpu>,
}

fn default_driver() -> String {
    "580.159.04".to_owned()
}

fn default_cuda() -> i32 {
    13000
}

/// Where the fake's time (seconds) comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// Seconds since `nvmlInit_v2`.
    #[default]
    Wall,
    /// The number in the file `fake-nvml.now` beside the scenario (0 while it is absent), so a
    /// test moves time on by writing it.
    File,
}

/// How `nvmlInit_v2` fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitError {
    /// `NVML_ERROR_DRIVER_NOT_LOADED`.
    DriverNotLoaded,
    /// `NVML_ERROR_NO_PERMISSION`.
    NoPermission,
    /// `NVML_ERROR_UNKNOWN`.
    Unknown,
}

/// One GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Product name (`nvmlDeviceGetName`).
    pub name: String,
    /// `GPU-…` UUID (default: derived from the index).
    #[serde(default)]
    pub uuid: Option<String>,
    /// PCI bus id (default: `00000000:<18 + index>:00.0`).
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    /// Installed framebuffer, bytes.
    pub memory_total_bytes: u64,
    /// Enforced power limit, milliwatts (absent: not supported).
    #[serde(default)]
    pub power_limit_mw: Option<u32>,
    /// Highest SM clock, MHz (absent: not supported).
    #[serde(default)]
    pub max_sm_clock_mhz: Option<u32>,
    /// MIG mode enabled: utilisation then answers `NOT_SUPPORTED`, as the driver does.
    #[serde(default)]
    pub mig: bool,
    /// Whether GPM (Hopper and newer) is supported.
    #[serde(default)]
    pub gpm: bool,
    /// PCI bus ids at the far end of each active NVLink (none: NVLink not supported).
    #[serde(default)]
    pub nvlink_peers: Vec<String>,
    /// Event types the GPU supports (`nvmlDeviceGetSupportedEventTypes`).
    #[serde(default = "all_event_types")]
    pub supported_events: Vec<EventType>,
    /// Functions that answer `NOT_SUPPORTED` on this GPU.
    #[serde(default)]
    pub not_supported: Vec<String>,
    /// From this time on the GPU has fallen off the bus (`NVML_ERROR_GPU_IS_LOST`).
    #[serde(default)]
    pub lost_from_s: Option<f64>,
    /// And from this time on it answers again.
    #[serde(default)]
    pub lost_until_s: Option<f64>,
    /// Readings: the first from time 0, each later one overrides the fields it sets from `at_s`.
    #[serde(default, rename = "reading")]
    pub readings: Vec<Reading>,
    /// Compute processes.
    #[serde(default, rename = "process")]
    pub processes: Vec<Process>,
    /// XID and ECC events to deliver through event sets.
    #[serde(default, rename = "event")]
    pub events: Vec<Event>,
}

fn all_event_types() -> Vec<EventType> {
    vec![EventType::Xid, EventType::SingleBitEcc, EventType::DoubleBitEcc]
}

/// Event types a GPU can report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    /// `nvmlEventTypeXidCriticalError`.
    Xid,
    /// `nvmlEventTypeSingleBitEccError`.
    SingleBitEcc,
    /// `nvmlEventTypeDoubleBitEccError`.
    DoubleBitEcc,
}

impl EventType {
    /// The `nvmlEventType*` bit.
    pub fn bit(self) -> u64 {
        use nvml_wrapper_sys::bindings as b;
        u64::from(match self {
            EventType::Xid => b::nvmlEventTypeXidCriticalError,
            EventType::SingleBitEcc => b::nvmlEventTypeSingleBitEccError,
            EventType::DoubleBitEcc => b::nvmlEventTypeDoubleBitEccError,
        })
    }
}

/// Readings in NVML's units; an absent field answers `NOT_SUPPORTED`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reading {
    /// From when (seconds); the first reading's is ignored.
    #[serde(default)]
    pub at_s: f64,
    pub gpu_util_percent: Option<u32>,
    pub mem_util_percent: Option<u32>,
    pub encoder_util_percent: Option<u32>,
    pub decoder_util_percent: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    /// Power draw, milliwatts.
    pub power_mw: Option<u32>,
    /// Energy counter, millijoules, at `at_s`; it then grows by the power drawn.
    pub energy_mj: Option<u64>,
    pub gpu_temp_c: Option<u32>,
    /// Field value `NVML_FI_DEV_MEMORY_TEMP`.
    pub memory_temp_c: Option<u32>,
    /// Framebuffer used (default: the sum of the running processes' memory).
    pub memory_used_bytes: Option<u64>,
    pub memory_reserved_bytes: Option<u64>,
    /// `nvmlDeviceGetPcieThroughput`, KB/s.
    pub pcie_tx_kb_per_s: Option<u32>,
    pub pcie_rx_kb_per_s: Option<u32>,
    pub pcie_replays: Option<u32>,
    /// Volatile corrected ECC errors (plus one per injected single-bit ECC event).
    pub ecc_corrected_volatile: Option<u64>,
    /// Volatile uncorrected ECC errors (plus one per injected double-bit ECC event).
    pub ecc_uncorrected_volatile: Option<u64>,
    /// Field values `NVML_FI_DEV_REMAPPED_COR`, `_UNC`, `_FAILURE`.
    pub remapped_rows_correctable: Option<u32>,
    pub remapped_rows_uncorrectable: Option<u32>,
    pub row_remap_failure: Option<bool>,
    /// Field value `NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL`, KiB.
    pub nvlink_total_kib: Option<u64>,
    /// Clock throttle reasons in force.
    pub throttle: Option<Vec<ThrottleReason>>,
    /// GPM metrics over the interval ending at the second sample, percent.
    pub gpm_graphics_percent: Option<f64>,
    pub gpm_tensor_percent: Option<f64>,
    pub gpm_dram_percent: Option<f64>,
}

/// Why clocks are held down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThrottleReason {
    GpuIdle,
    SwPowerCap,
    HwSlowdown,
    SyncBoost,
    SwThermalSlowdown,
    HwThermalSlowdown,
    HwPowerBrakeSlowdown,
}

impl ThrottleReason {
    /// The `nvmlClocksThrottleReason*` bit.
    pub fn bit(self) -> u64 {
        use nvml_wrapper_sys::bindings as b;
        u64::from(match self {
            ThrottleReason::GpuIdle => b::nvmlClocksThrottleReasonGpuIdle,
            ThrottleReason::SwPowerCap => b::nvmlClocksThrottleReasonSwPowerCap,
            ThrottleReason::HwSlowdown => b::nvmlClocksThrottleReasonHwSlowdown,
            ThrottleReason::SyncBoost => b::nvmlClocksThrottleReasonSyncBoost,
            ThrottleReason::SwThermalSlowdown => b::nvmlClocksThrottleReasonSwThermalSlowdown,
            ThrottleReason::HwThermalSlowdown => b::nvmlClocksThrottleReasonHwThermalSlowdown,
            ThrottleReason::HwPowerBrakeSlowdown => b::nvmlClocksThrottleReasonHwPowerBrakeSlowdown,
        })
    }
}

/// A compute process on a GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    pub pid: u32,
    /// Framebuffer it holds (absent: `NVML_VALUE_NOT_AVAILABLE`, as under some containers).
    #[serde(default)]
    pub used_memory_bytes: Option<u64>,
    /// Its SM utilisation, percent, as `nvmlDeviceGetProcessUtilization` samples it (absent: the
    /// process ran no kernels, so the driver has no sample of it).
    #[serde(default)]
    pub sm_util_percent: Option<u32>,
    #[serde(default)]
    pub from_s: f64,
    #[serde(default)]
    pub until_s: Option<f64>,
}

/// An event: an XID or an ECC error.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub at_s: f64,
    /// XID number (a critical-XID event).
    #[serde(default)]
    pub xid: Option<u64>,
    /// Or an ECC error event.
    #[serde(default)]
    pub ecc: Option<Ecc>,
}

/// Which ECC error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ecc {
    SingleBit,
    DoubleBit,
}

impl Event {
    /// The event type bit and its data (the XID number, 0 for ECC).
    pub fn kind(&self) -> (EventType, u64) {
        match (self.xid, self.ecc) {
            (Some(x), _) => (EventType::Xid, x),
            (None, Some(Ecc::SingleBit)) => (EventType::SingleBitEcc, 0),
            (None, _) => (EventType::DoubleBitEcc, 0),
        }
    }
}

impl Scenario {
    /// Parses and checks a scenario; `functions` are the names the library exports.
    pub fn parse(text: &str, functions: &[&str]) -> Result<Self, String> {
        let mut s: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
        let known = |names: &[String]| -> Result<(), String> {
            match names.iter().find(|n| !functions.contains(&n.as_str())) {
                Some(n) => Err(format!("not_supported names {n:?}, which this library does not export")),
                None => Ok(()),
            }
        };
        known(&s.not_supported)?;
        for (i, g) in s.gpus.iter_mut().enumerate() {
            known(&g.not_supported)?;
            if let Some(e) = g.events.iter().find(|e| e.xid.is_some() == e.ecc.is_some()) {
                return Err(format!("gpu {i}: an event at {} s needs exactly one of xid or ecc", e.at_s));
            }
            g.readings.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
            if let Some(first) = g.readings.first_mut() {
                first.at_s = 0.0;
            }
        }
        Ok(s)
    }
}

macro_rules! overlay {
    ($dst:ident, $src:ident; $($f:ident),* $(,)?) => {
        $( if $src.$f.is_some() { $dst.$f = $src.$f.clone(); } )*
    };
}

impl Gpu {
    /// The readings in force at `t`.
    pub fn reading_at(&self, t: f64) -> Reading {
        let mut r = Reading::default();
        for s in self.readings.iter().filter(|s| s.at_s <= t) {
            overlay!(r, s; gpu_util_percent, mem_util_percent, encoder_util_percent, decoder_util_percent,
                sm_clock_mhz, mem_clock_mhz, power_mw, energy_mj, gpu_temp_c, memory_temp_c,
                memory_used_bytes, memory_reserved_bytes, pcie_tx_kb_per_s, pcie_rx_kb_per_s, pcie_replays,
                ecc_corrected_volatile, ecc_uncorrected_volatile, remapped_rows_correctable,
                remapped_rows_uncorrectable, row_remap_failure, nvlink_total_kib, throttle,
                gpm_graphics_percent, gpm_tensor_percent, gpm_dram_percent);
        }
        if r.memory_used_bytes.is_none() {
            r.memory_used_bytes = Some(self.processes_at(t).filter_map(|p| p.used_memory_bytes).sum());
        }
        r.energy_mj = self.energy_mj(t);
        let (sbe, dbe) = self.ecc_events_until(t);
        r.ecc_corrected_volatile = r.ecc_corrected_volatile.map(|c| c + sbe);
        r.ecc_uncorrected_volatile = r.ecc_uncorrected_volatile.map(|c| c + dbe);
        r
    }

    /// The energy counter at `t`: the last scripted value plus the power drawn since, in mJ
    /// (mW × s). `None` when neither energy nor power was ever scripted.
    fn energy_mj(&self, t: f64) -> Option<u64> {
        let (mut energy, mut power, mut since, mut known) = (0.0_f64, 0.0_f64, 0.0_f64, false);
        for s in self.readings.iter().filter(|s| s.at_s <= t) {
            energy += power * (s.at_s - since);
            since = s.at_s;
            if let Some(e) = s.energy_mj {
                energy = e as f64;
                known = true;
            }
            if let Some(p) = s.power_mw {
                power = f64::from(p);
                known = true;
            }
        }
        known.then_some((energy + power * (t - since)) as u64)
    }

    fn ecc_events_until(&self, t: f64) -> (u64, u64) {
        let count = |k| self.events.iter().filter(|e| e.at_s <= t && e.kind().0 == k).count() as u64;
        (count(EventType::SingleBitEcc), count(EventType::DoubleBitEcc))
    }

    /// Processes alive at `t`.
    pub fn processes_at(&self, t: f64) -> impl Iterator<Item = &Process> {
        self.processes.iter().filter(move |p| p.from_s <= t && p.until_s.is_none_or(|u| t < u))
    }

    /// Whether the GPU is off the bus at `t`.
    pub fn lost_at(&self, t: f64) -> bool {
        self.lost_from_s.is_some_and(|f| f <= t) && self.lost_until_s.is_none_or(|u| t < u)
    }

    /// The supported event types as a bit mask.
    pub fn event_mask(&self) -> u64 {
        self.supported_events.iter().fold(0, |m, e| m | e.bit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, String> {
        Scenario::parse(text, crate::signatures::EXPORTED)
    }

    const ONE: &str = "[[gpu]]\nname = \"x\"\nmemory_total_bytes = 100\n";

    #[test]
    fn the_built_in_scenario_is_two_h200s_with_the_busy_one_first() {
        let s = parse(crate::DEFAULT_SCENARIO).expect("the built-in scenario parses");
        assert_eq!(s.gpus.len(), 2);
        let r = s.gpus[0].reading_at(0.0);
        assert_eq!(
            (r.gpu_util_percent, r.power_mw, r.memory_used_bytes),
            (Some(97), Some(689_000), Some(1_022_361_600))
        );
    }

    #[test]
    fn later_readings_override_what_they_set_from_their_time_and_used_memory_follows_processes() {
        let s = parse(&format!(
            "{ONE}[[gpu.reading]]\nat_s = 5\ngpu_util_percent = 10\n[[gpu.reading]]\ngpu_util_percent = 1\nsm_clock_mhz = 9\n\
             [[gpu.process]]\npid = 1\nused_memory_bytes = 7\nuntil_s = 3"
        ))
        .expect("parses");
        let g = &s.gpus[0];
        let (early, late) = (g.reading_at(1.0), g.reading_at(6.0));
        assert_eq!(
            (early.gpu_util_percent, early.sm_clock_mhz, early.memory_used_bytes),
            (Some(1), Some(9), Some(7))
        );
        assert_eq!(
            (late.gpu_util_percent, late.sm_clock_mhz, late.memory_used_bytes),
            (Some(10), Some(9), Some(0))
        );
        assert_eq!(early.power_mw, None, "unscripted stays absent");
    }

    #[test]
    fn energy_grows_by_the_power_drawn_and_restarts_from_a_scripted_value() {
        let s = parse(&format!(
            "{ONE}[[gpu.reading]]\npower_mw = 1000\n[[gpu.reading]]\nat_s = 10\npower_mw = 3000\n\
             [[gpu.reading]]\nat_s = 20\nenergy_mj = 5"
        ))
        .expect("parses");
        let e = |t| s.gpus[0].reading_at(t).energy_mj;
        assert_eq!(
            (e(0.0), e(10.0), e(15.0), e(20.0), e(21.0)),
            (Some(0), Some(10_000), Some(25_000), Some(5), Some(3005))
        );
    }

    #[test]
    fn an_unknown_function_or_an_event_that_is_neither_xid_nor_ecc_is_refused() {
        let err = parse(&format!("not_supported = [\"nvmlDeviceGetPowerUsge\"]\n{ONE}")).expect_err("typo");
        assert!(err.contains("nvmlDeviceGetPowerUsge"), "{err}");
        assert!(parse(&format!("{ONE}[[gpu.event]]\nat_s = 1")).is_err());
        assert!(parse(&format!("{ONE}[[gpu.event]]\nat_s = 1\nxid = 79\necc = \"double_bit\"")).is_err());
        assert!(parse(&format!("{ONE}bogus = 1")).is_err(), "unknown keys are refused");
    }
}
