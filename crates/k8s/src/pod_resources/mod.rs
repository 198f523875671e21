//! The kubelet's pod-resources API: which container holds which device on this node.
//!
//! - [`api`]: the generated v1 client and server (`PodResourcesLister`);
//! - [`client`]: one `List` over the unix socket, flattened into [`client::Assignment`]s, the
//!   GPU each device ID names ([`client::gpu_of_device`]), and a poller that hands each answer
//!   on — the exporter caches it, so no scrape ever waits on the kubelet.
//!
//! The API only reads: it reveals pod, namespace and container names and device IDs, nothing
//! from a pod's spec, environment or secrets.

pub mod api;
pub mod client;
