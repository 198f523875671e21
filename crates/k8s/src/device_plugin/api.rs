//! The kubelet device plugin API v1beta1, generated at build time from
//! `proto/deviceplugin_v1beta1.proto` (client and server for both services).

#![allow(missing_docs, missing_debug_implementations, clippy::all)] // reason: generated code.

tonic::include_proto!("v1beta1");

/// The API version this plugin speaks.
pub const VERSION: &str = "v1beta1";
/// A device that can be given out.
pub const HEALTHY: &str = "Healthy";
/// A device that must not be given out.
pub const UNHEALTHY: &str = "Unhealthy";
/// The kubelet's registration socket, inside the device-plugins directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// Where the kubelet looks for device plugin sockets.
pub const DEFAULT_DIR: &str = "/var/lib/kubelet/device-plugins";
