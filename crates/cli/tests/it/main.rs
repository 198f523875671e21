//! Tests of the `gantry` binary (one test binary, one module per subcommand or scenario):
//! the exporter and local `gpus`, the device plugin against a fake kubelet, and end to end `gantry up` with the client commands, crashes
//! and agent loss.

mod access;
mod agent_loss;
mod bench;
mod browser;
mod budgets;
mod containers;
mod crash;
mod dashboard;
mod dashboard_load;
mod db_migrate;
mod device_plugin;
mod elastic;
mod exporter;
mod extender;
mod failover;
#[path = "../../../fake-nvml/testing.rs"]
mod fake_nvml;
mod gang;
mod gpus;
mod harness;
mod idle;
mod inputs;
mod interrupt;
mod job_events;
mod lend;
mod local_socket;
mod moto;
mod network;
mod outputs;
#[path = "../../../store/tests/postgres/harness.rs"]
mod pg_harness;
mod pools;
mod postgres;
mod preemption;
mod restart;
mod sandbox;
mod services;
mod services_ha;
mod services_preempt;
mod sharing;
mod sim;
mod slurm_habits;
mod source_isolation;
mod squatting;
mod stalls;
mod top;
mod transport;
mod usage;
mod walkthrough;
mod whatif;
mod workdir;
mod workflow;

use std::process::{Command, Output};

/// Runs `gantry` with `args`, away from any server a developer may have configured (without
/// `--backend`, `gantry gpus` would otherwise show that cluster).
pub fn gantry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("GANTRY_SERVER")
        .env("GANTRY_CONFIG", "/nonexistent/gantry/config.toml")
        .output()
        .expect("gantry runs")
}

/// Whether NVML can be loaded here (decides what `--backend nvml` must do).
pub fn nvml_present() -> bool {
    gantry_gpu::NvmlBackend::open().is_ok()
}
