//! The kube-scheduler extender: wire types, node model, HTTP router.
//!
//! kube-scheduler runs its in-tree filters, then POSTs the pod and the surviving node names
//! (`nodeCacheCapable: true`) to `/filter`; we answer which nodes can hold the pod's
//! `gantry.dev/gpu` (whole GPUs) or `gantry.dev/gpu-memory` (MiB of one GPU, a slice) request and
//! why the others cannot. `/prioritize` ranks the survivors with the core's policy, scaled to
//! kube-scheduler's 0..=10. `/bind` records the decision in the model.
//!
//! Bind in this slice does **not** create the `Binding` subresource through the API server; it
//! only records the allocation and returns an error string when the pod no longer fits. A real
//! bind (POST `pods/{name}/binding`, relying on the API's optimistic concurrency) comes with the
//! kube-rs watcher.

pub mod bench;
pub mod model;
pub mod pod;
pub mod router;
pub mod wire;

pub use model::{Model, ModelError};
pub use router::router;
