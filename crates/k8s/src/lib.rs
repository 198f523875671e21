//! Gantry as Kubernetes components, on Kubernetes' own state.
//!
//! - [`device_plugin`]: the kubelet device plugin (gRPC over a unix socket) advertising
//!   `gantry.dev/gpu` and `gantry.dev/gpu-memory` from the GPU layer, with its health state
//!   machine (devices turn `Unhealthy` on a fatal XID and `Healthy` again after recovery) and
//!   the core's choice of GPUs for GetPreferredAllocation. Start at
//!   [`device_plugin::lifecycle::run`].
//! - [`extender`]: the kube-scheduler extender: the wire types kube-scheduler sends and
//!   expects, a model of nodes and the GPU pods on them kept from the API server by kube-rs
//!   watchers, and an axum router answering `POST /filter`, `/prioritize` and `/bind` with the
//!   scheduling core's `gantry` policy — the same [`gantry_core::Policy`] that `gantry sim` runs.
//!   `/bind` creates the pod's `Binding` and binds gangs all-or-nothing. Start at
//!   [`extender::wire`] (the JSON), then [`extender::model`] (decisions), [`extender::bind`],
//!   [`extender::watch`] and [`extender::router`] (HTTP).
//! - [`pod_resources`]: a client of the kubelet's pod-resources API (which container holds
//!   which device), for the exporter's pod labels.

pub mod device_plugin;
pub mod extender;
pub mod pod_resources;
