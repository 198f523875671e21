//! The GPU exporter: sampler → snapshot → `/metrics`.
//!
//! - [`metrics`] declares every exported metric once (name, type, help, how to read it);
//! - [`encode`] turns one [`Collection`](gantry_gpu::Collection) into Prometheus text;
//! - [`attribution`] maps a pid to a job id (the sandbox's `gantry/<scope>/<job>-<attempt>`
//!   cgroup, else `GANTRY_JOB_ID` in `/proc/<pid>/environ` of the process or an ancestor, else a
//!   `gantry-job-<id>` cgroup, else `unknown`);
//! - [`pods`] holds Kubernetes attribution published from outside (who holds each GPU, from
//!   the kubelet's pod-resources) and reads each GPU process's pod UID from its cgroup;
//! - [`sampler`] runs collections on a fixed cadence on its own thread (NVML calls block) and
//!   publishes each encoded result as the latest [`Snapshot`](sampler::Snapshot);
//! - [`server`] serves the snapshot; a scrape only clones bytes, so its cost does not depend on
//!   NVML latency or the number of GPUs;
//! - [`cache`] counts the node's dataset cache and staging (the agent's `/metrics` only);
//! - [`client`] is a tiny loopback HTTP/1.0 client for the benchmark and tests.

pub mod attribution;
pub mod cache;
pub mod client;
pub mod encode;
pub mod metrics;
pub mod pod_names;
pub mod pods;
pub mod sampler;
pub mod server;

pub use sampler::{Exporter, ExporterConfig};
