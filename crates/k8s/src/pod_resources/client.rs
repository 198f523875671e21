//! Listing the kubelet's device assignments.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::api::ListPodResourcesRequest;
use super::api::pod_resources_lister_client::PodResourcesListerClient;
use crate::device_plugin::lifecycle::connect;

/// How long one `List` may take (dcgm-exporter's timeout).
pub const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// One device given to one container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Assignment {
    /// Namespace of the pod.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// Extended resource (`nvidia.com/gpu`, `gantry.dev/gpu`, …).
    pub resource: String,
    /// Device ID as the device plugin advertised it.
    pub device_id: String,
}

/// A GPU named by a device ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuId {
    /// By UUID (`GPU-…`).
    Uuid(String),
    /// By index.
    Index(u32),
}

/// Why a `List` failed.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// The socket could not be reached.
    #[error("cannot connect to the kubelet pod-resources socket {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The cause.
        source: tonic::transport::Error,
    },
    /// The kubelet answered with an error.
    #[error("the kubelet pod-resources List failed: {0}")]
    Status(#[from] tonic::Status),
    /// No answer in time.
    #[error("the kubelet pod-resources List took longer than {0:?}")]
    Timeout(Duration),
}

/// Every device assignment the kubelet reports, sorted. Pods without devices are listed by the
/// kubelet too but hold nothing, so they add no assignment.
pub async fn list(socket: &Path, timeout: Duration) -> Result<Vec<Assignment>, PodResourcesError> {
    let call = async {
        let channel = connect(socket.to_owned())
            .await
            .map_err(|source| PodResourcesError::Connect { path: socket.to_owned(), source })?;
        let answer = PodResourcesListerClient::new(channel).list(ListPodResourcesRequest {}).await?;
        Ok::<_, PodResourcesError>(answer.into_inner())
    };
    let answer =
        tokio::time::timeout(timeout, call).await.map_err(|_| PodResourcesError::Timeout(timeout))??;
    let mut out = Vec::new();
    for pod in answer.pod_resources {
        for container in pod.containers {
            for devices in container.devices {
                for id in devices.device_ids {
                    out.push(Assignment {
                        namespace: pod.namespace.clone(),
                        pod: pod.name.clone(),
                        container: container.name.clone(),
                        resource: devices.resource_name.clone(),
                        device_id: id,
                    });
                }
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The GPU a device ID of `resource` names, for the GPU resources the exporter knows:
/// - `nvidia.com/gpu`: the GPU's UUID, or `<uuid>::<n>` for a time-slicing replica (NVIDIA's
///   plugin), or `nvidia<N>`;
/// - `gantry.dev/gpu`: the UUID; `gantry.dev/gpu-memory`: `<index>-<MiB unit>`.
///
/// Anything else (other resources, MIG devices, which name a MIG instance and not a GPU) is `None`.
pub fn gpu_of_device(resource: &str, id: &str) -> Option<GpuId> {
    let index =
        |s: &str| (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten();
    match resource {
        "nvidia.com/gpu" => {
            let id = id.split_once("::").map_or(id, |(uuid, _)| uuid);
            if let Some(n) = id.strip_prefix("nvidia").and_then(index) {
                return Some(GpuId::Index(n));
            }
            id.starts_with("GPU-").then(|| GpuId::Uuid(id.to_owned()))
        }
        crate::device_plugin::devices::GPU => id.starts_with("GPU-").then(|| GpuId::Uuid(id.to_owned())),
        crate::device_plugin::devices::GPU_MEMORY => {
            let (gpu, unit) = id.split_once('-')?;
            index(unit)?;
            index(gpu).map(GpuId::Index)
        }
        _ => None,
    }
}

/// Lists every `every` until `stop` resolves, handing each answer to `publish`; a failed
/// `List` is logged and the previous answer stays in force (the pods are still running).
pub async fn poll(
    socket: PathBuf,
    every: Duration,
    mut publish: impl FnMut(&[Assignment]),
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        match list(&socket, LIST_TIMEOUT.min(every.max(Duration::from_secs(1)))).await {
            Ok(assignments) => publish(&assignments),
            Err(e) => tracing::warn!(error = %e, "pod attribution not refreshed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_name_gpus_by_uuid_replica_or_index() {
        let uuid = "GPU-8a1c5f0e-3b2d-4c6a-9e1f-0123456789ab";
        assert_eq!(gpu_of_device("nvidia.com/gpu", uuid), Some(GpuId::Uuid(uuid.into())));
        assert_eq!(gpu_of_device("nvidia.com/gpu", &format!("{uuid}::3")), Some(GpuId::Uuid(uuid.into())));
        assert_eq!(gpu_of_device("nvidia.com/gpu", "nvidia2"), Some(GpuId::Index(2)));
        assert_eq!(gpu_of_device("gantry.dev/gpu", uuid), Some(GpuId::Uuid(uuid.into())));
        assert_eq!(gpu_of_device("gantry.dev/gpu-memory", "1-4095"), Some(GpuId::Index(1)));
        for (resource, id) in [
            ("nvidia.com/mig-1g.10gb", "MIG-1234"),
            ("nvidia.com/gpu", "nvidiax"),
            ("nvidia.com/gpu", "something"),
            ("gantry.dev/gpu-memory", "1"),
            ("gantry.dev/gpu-memory", "a-1"),
            ("gantry.dev/gpu-memory", "1-"),
            ("example.com/fpga", uuid),
        ] {
            assert_eq!(gpu_of_device(resource, id), None, "{resource} {id}");
        }
    }
}
