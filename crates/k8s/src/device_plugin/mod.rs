//! The kubelet device plugin (API v1beta1): Gantry's GPUs as the extended resources
//! `gantry.dev/gpu` (whole GPUs) and `gantry.dev/gpu-memory` (MiB of one GPU, a slice).
//!
//! - [`api`]: the gRPC types and services, generated at build time from
//!   `proto/deviceplugin_v1beta1.proto` (protox, no `protoc`).
//! - [`devices`]: pure — how GPUs become devices, what Allocate gives a container (the
//!   environment variables below), which devices GetPreferredAllocation prefers (the core's
//!   [`gantry_core::placement::gpus`]: fewest broken whole-GPU blocks, then NVLink).
//! - [`monitor`]: the GPU layer's health state machine on a thread, one flag per GPU; devices go
//!   `Unhealthy` on a fatal XID and `Healthy` again after the GPU recovers.
//! - [`service`]: the `DevicePlugin` service of one resource.
//! - [`lifecycle`]: sockets, registration, re-registration after a kubelet restart, shutdown.
//!
//! Allocate sets `NVIDIA_VISIBLE_DEVICES` and `CUDA_VISIBLE_DEVICES` to the GPUs' UUIDs; a slice
//! also gets `GANTRY_GPU_MEMORY_LIMIT_MIB` and `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M`. The
//! memory limit is advisory unless the node runs an MPS control daemon (then MPS enforces it).
//! A slice's compute share (`gantry.dev/gpu-share` annotation) is accounted by the scheduler
//! extender; the kubelet does not tell a device plugin which pod it allocates for, so Allocate
//! cannot read the annotation and sets no compute limit.
//!
//! Start reading at [`lifecycle::run`].

pub mod api;
pub mod devices;
pub mod lifecycle;
pub mod monitor;
pub mod service;

pub use devices::{Devices, Resource};
pub use lifecycle::{PluginConfig, PluginError, run};
pub use monitor::HealthMonitor;
