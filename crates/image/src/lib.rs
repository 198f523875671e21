//! OCI images on a node (issue 40): what a job's `image` names ([`reference`]), the image's
//! manifest and configuration ([`oci`]), fetching them from a registry over the distribution API
//! ([`registry`]), keeping them content-addressed on the node ([`store`]), unpacking layers so
//! that no entry reaches outside its directory ([`unpack`]), and the OCI runtime bundle a
//! container runs from ([`bundle`]).
//!
//! Nothing here knows about jobs: the agent decides what to pull and runs the bundle; this crate
//! is the image half, in a crate of its own so that a change here rebuilds only what uses it.

pub mod bundle;
pub mod digest;
pub mod driver;
pub mod oci;
pub mod reference;
pub mod registry;
pub mod store;
pub mod unpack;

pub use digest::Digest;
pub use reference::Reference;
