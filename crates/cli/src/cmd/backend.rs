//! `--backend nvml|simulated|auto` and `--simulated-gpus`, shared by `gpus` and `exporter`.

use anyhow::bail;
use gantry_gpu::{FleetHandle, FleetSpec, GpuBackend, NvmlBackend, SimulatedBackend};

/// Where GPU facts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// The NVIDIA driver through NVML.
    Nvml,
    /// A simulated fleet (needs --simulated-gpus).
    Simulated,
    /// NVML when it initialises, else the simulated fleet if --simulated-gpus is given.
    Auto,
}

/// Backend flags.
#[derive(Debug, Clone, clap::Args)]
pub struct BackendArgs {
    /// Where GPU facts come from (default `auto`). `gantry gpus` without it and without
    /// `--simulated-gpus` shows the cluster view when a server is configured.
    #[arg(long, value_enum)]
    pub backend: Option<BackendKind>,
    /// Simulated fleet: `8xH100`, `2xA100-80GB,4xT4`, or a fleet TOML file.
    #[arg(long, value_name = "SPEC")]
    pub simulated_gpus: Option<String>,
    /// Seed of the simulated fleet (noise and UUIDs); a TOML file's own seed wins.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// An opened backend, with the fleet handle when it is simulated.
pub struct Opened {
    pub backend: Box<dyn GpuBackend>,
    pub fleet: Option<FleetHandle>,
}

impl BackendArgs {
    /// Validates the flags, then opens the backend.
    pub fn open(&self) -> anyhow::Result<Opened> {
        let spec = match &self.simulated_gpus {
            Some(flag) => Some(FleetSpec::from_flag_or_file(flag, self.seed)?),
            None => None,
        };
        match (self.backend.unwrap_or(BackendKind::Auto), spec) {
            (BackendKind::Nvml, Some(_)) => {
                bail!("--simulated-gpus cannot be used with --backend nvml")
            }
            (BackendKind::Nvml, None) => Ok(nvml(NvmlBackend::open()?)),
            (BackendKind::Simulated, None) => {
                bail!("--backend simulated needs --simulated-gpus, for example --simulated-gpus 8xH100")
            }
            (BackendKind::Simulated, Some(spec)) => simulated(&spec),
            (BackendKind::Auto, spec) => match (NvmlBackend::open(), spec) {
                (Ok(b), _) => Ok(nvml(b)),
                (Err(e), Some(spec)) => {
                    tracing::info!("NVML is not available ({e}); using the simulated fleet");
                    simulated(&spec)
                }
                (Err(e), None) => {
                    bail!("{e}; pass --simulated-gpus to use a simulated fleet instead")
                }
            },
        }
    }
}

fn nvml(b: NvmlBackend) -> Opened {
    Opened { backend: Box::new(b), fleet: None }
}

fn simulated(spec: &FleetSpec) -> anyhow::Result<Opened> {
    let b = SimulatedBackend::new(spec)?;
    Ok(Opened { fleet: Some(b.handle()), backend: Box::new(b) })
}
