//! Gantry's node daemon as a library.
//!
//! - [`exporter`]: the GPU exporter. A sampler thread reads GPUs through `gantry-gpu` on its own
//!   cadence into a snapshot, and an axum server serves that snapshot on `/metrics` in
//!   dcgm-exporter's names and labels (so NVIDIA's Grafana dashboards work unchanged), plus
//!   `gantry_*` series for health, findings and per-process memory by job.
//! - [`runner`]: the job runner. It registers the node with the control plane, reports GPU
//!   inventory, health and samples, and runs the jobs it is assigned, each in a sandbox of its
//!   own user, directory, environment and cgroup (start with [`runner::run`], then
//!   [`runner::sandbox`]), each supervised by its own shim process so that it outlives the
//!   agent ([`runner::shim`], [`runner::record`]). It is not the scheduler: it runs exactly what the server's heartbeat
//!   answer lists and stops everything else.

pub mod exporter;
pub mod runner;
