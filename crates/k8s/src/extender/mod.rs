//! The kube-scheduler extender: wire types, node model, gangs, binds, API-server watchers, HTTP.
//!
//! kube-scheduler runs its in-tree filters, then POSTs the pod and the surviving node names
//! (`nodeCacheCapable: true`) to `/filter`; we answer which nodes can hold the pod's
//! `gantry.dev/gpu` (whole GPUs) or `gantry.dev/gpu-memory` (MiB of one GPU, a slice) request and
//! why the others cannot. `/prioritize` ranks the survivors with the core's policy, scaled to
//! kube-scheduler's 0..=10. `/bind` reserves the pod's GPUs in the model and creates the pod's
//! `Binding` through the API server, holding gang members until their gang is complete.
//!
//! The model is kept from the API server: [`watch`] lists and watches nodes (capacity from their
//! allocatable `gantry.dev/gpu` / `gantry.dev/gpu-memory`) and bound pods (their GPU requests,
//! whoever bound them; deleted and finished pods free their GPUs) and applies the events to the
//! pure [`Model`]. Without an API server (`gantry extender --no-kube`) the model holds the
//! `--nodes` list and this extender's own binds, and `/bind` creates no `Binding`.
//!
//! The listener is mutual TLS ([`tls`]): only a client holding a certificate from the
//! `--client-ca` (kube-scheduler) may filter or bind.
//!
//! Start at [`wire`] (the JSON), then [`model`] (decisions), [`bind`] (binds and gangs),
//! [`watch`] (the API server's view) and [`router`] (HTTP).

pub mod bench;
pub mod bind;
pub mod binder;
pub mod gang;
pub mod model;
pub mod pod;
pub mod router;
pub mod tls;
pub mod watch;
pub mod wire;

pub use bind::{DEFAULT_GANG_TIMEOUT, Extender, SharedModel};
pub use binder::Binder;
pub use model::{Model, ModelError};
pub use router::{router, routes};
