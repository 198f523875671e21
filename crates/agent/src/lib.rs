//! Gantry's node daemon as a library.
//!
//! Today it holds the GPU exporter ([`exporter`]): a sampler thread reads GPUs through
//! `gantry-gpu` on its own cadence into a snapshot, and an axum server serves that snapshot on
//! `/metrics` in dcgm-exporter's names and labels (so NVIDIA's Grafana dashboards work
//! unchanged), plus `gantry_*` series for health, findings and per-process memory by job.
//! Job launching will live beside it. Start reading at [`exporter`].

pub mod exporter;
