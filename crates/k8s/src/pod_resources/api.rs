//! The kubelet pod-resources API v1, generated at build time from
//! `proto/podresources_v1.proto` (client and server).

#![allow(missing_docs, missing_debug_implementations, clippy::all)] // reason: generated code.

tonic::include_proto!("v1");

/// Where the kubelet serves the API.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
