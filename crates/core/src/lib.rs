//! Gantry's resource model and scheduling core.
//!
//! Pure and deterministic: no I/O, no async, no clock, no global randomness. Everything that
//! varies (time, randomness) is passed in. The server, the simulator and the Kubernetes
//! extender all call the same entry point, [`placement::Policy::place`], on a [`Cluster`].
//!
//! Where to start reading:
//! - [`resources`]: what a node offers and what a request asks for;
//! - [`cluster`]: the allocation ledger, which never over-commits a node or a GPU;
//! - [`frag`]: FGD's fragmentation measure over the typical-pod distribution;
//! - [`placement`]: filter → score → pick, with the published policies and Gantry's own;
//! - [`idle`]: which idle allocated job to warn, requeue or cancel, from its utilisation;
//! - [`autoscale`]: how many replicas a service should have (HPA, KPA, Ray Serve, Gantry's own).

pub mod autoscale;
pub mod cluster;
pub mod frag;
pub mod idle;
pub mod placement;
pub mod queue;
pub mod resources;
pub mod rng;
pub mod sched;

pub use cluster::{AllocationId, Cluster, LedgerError, Node, NodeId};
pub use placement::{Placement, Policy, PolicyKind};
pub use resources::{ModelSet, NodeSet, NodeSpec, Preference, Request, RequestError};
pub use rng::{RandomSource, SplitMix64};
