//! Fleet descriptions: a flag (`8xH100`, `2xA100-80GB,4xT4`) or a small TOML file.

use super::fault::{Fault, FaultKind};
use super::models::{ModelSpec, find_model};
use super::process::UtilProfile;
use crate::GpuError;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// A validated fleet: models in index order, a seed, processes and faults to start with.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetSpec {
    /// One entry per GPU, in index order.
    pub gpus: Vec<&'static ModelSpec>,
    /// Seed for noise and identifiers.
    pub seed: u64,
    /// Processes running from time zero.
    pub processes: Vec<ProcessSpec>,
    /// Faults to fire at their times.
    pub faults: Vec<Fault>,
}

/// A simulated process placed on a GPU.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    /// GPU index.
    pub gpu: u32,
    /// Pid.
    pub pid: u32,
    /// Job id, if the process belongs to one.
    #[serde(default)]
    pub job: Option<String>,
    /// Framebuffer it holds, MiB.
    pub memory_mib: u64,
    /// How busy it keeps the GPU.
    pub util: UtilProfile,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    #[serde(default)]
    seed: u64,
    gpus: String,
    #[serde(default, rename = "process")]
    processes: Vec<ProcessSpec>,
    #[serde(default, rename = "fault")]
    faults: Vec<RawFault>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    at_s: f64,
    gpu: u32,
    #[serde(default)]
    xid: Option<u32>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    duration_s: Option<f64>,
}

impl RawFault {
    fn kind(&self) -> Result<FaultKind, GpuError> {
        let secs = |s: Option<f64>| -> Result<Duration, GpuError> {
            let s = s.ok_or_else(|| bad("thermal_throttle needs duration_s".to_owned()))?;
            seconds(s)
        };
        match (self.xid, self.event.as_deref()) {
            (Some(n), None) => Ok(FaultKind::Xid(n)),
            (None, Some(event)) => match event {
                "single_bit_ecc" => Ok(FaultKind::SingleBitEcc),
                "double_bit_ecc" => Ok(FaultKind::DoubleBitEcc),
                "row_remap_failure" => Ok(FaultKind::RowRemapFailure),
                "thermal_throttle" => Ok(FaultKind::ThermalThrottle(secs(self.duration_s)?)),
                "fall_off_bus" => Ok(FaultKind::FallOffBus),
                "return_to_bus" => Ok(FaultKind::ReturnToBus),
                other => Err(bad(format!("unknown fault event {other:?}"))),
            },
            _ => Err(bad("a fault needs exactly one of xid or event".to_owned())),
        }
    }
}

fn seconds(s: f64) -> Result<Duration, GpuError> {
    // `try_from`: a finite but huge value (1e300) would make `from_secs_f64` panic.
    match Duration::try_from_secs_f64(s) {
        Ok(d) if s.is_finite() => Ok(d),
        _ => Err(bad(format!("{s} is not a non-negative number of seconds that fits a duration"))),
    }
}

impl FleetSpec {
    /// Parses `8xH100` or `2xA100-80GB,4xT4` (a bare model means one GPU).
    pub fn parse(flag: &str, seed: u64) -> Result<Self, GpuError> {
        let mut gpus = Vec::new();
        for part in flag.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (count, key) = match part.split_once(['x', 'X']) {
                Some((n, key)) if n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty() => {
                    let n: usize = n.parse().map_err(|_| bad(format!("bad count in {part:?}")))?;
                    (n, key)
                }
                _ => (1, part),
            };
            let model = find_model(key).ok_or_else(|| {
                let known: Vec<&str> = super::models::MODELS.iter().map(|m| m.key).collect();
                bad(format!("unknown GPU model {key:?} (known: {})", known.join(", ")))
            })?;
            gpus.extend(std::iter::repeat_n(model, count));
        }
        if gpus.is_empty() || gpus.len() > 64 {
            return Err(bad(format!("{flag:?} must describe 1 to 64 GPUs")));
        }
        Ok(Self { gpus, seed, processes: Vec::new(), faults: Vec::new() })
    }

    /// Parses the TOML form (`gpus = "8xH100"`, `[[process]]`, `[[fault]]`); see the crate docs.
    pub fn from_toml(text: &str) -> Result<Self, GpuError> {
        let raw: RawFleet = toml::from_str(text).map_err(|e| bad(e.message().to_owned()))?;
        let mut spec = Self::parse(&raw.gpus, raw.seed)?;
        spec.processes = raw.processes;
        for f in raw.faults {
            let kind = f.kind()?;
            if f.gpu as usize >= spec.gpus.len() {
                return Err(bad(format!(
                    "fault on GPU {} but the fleet has {} GPUs",
                    f.gpu,
                    spec.gpus.len()
                )));
            }
            spec.faults.push(Fault { at: seconds(f.at_s)?, gpu: f.gpu, kind });
        }
        Ok(spec)
    }

    /// Reads a flag that is either a fleet spec or the path of a `.toml` file.
    pub fn from_flag_or_file(flag: &str, seed: u64) -> Result<Self, GpuError> {
        if flag.ends_with(".toml") || Path::new(flag).is_file() {
            let text = std::fs::read_to_string(flag)
                .map_err(|source| GpuError::FleetFile { path: flag.to_owned(), source })?;
            return Self::from_toml(&text);
        }
        Self::parse(flag, seed)
    }
}

fn bad(msg: String) -> GpuError {
    GpuError::InvalidFleet(msg)
}
