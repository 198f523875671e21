//! Tests of the `gantry` binary (one test binary, one module per subcommand).

mod exporter;
mod gpus;

use std::process::{Command, Output};

/// Runs `gantry` with `args`.
pub fn gantry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("gantry runs")
}

/// Whether NVML can be loaded here (decides what `--backend nvml` must do).
pub fn nvml_present() -> bool {
    gantry_gpu::NvmlBackend::open().is_ok()
}
