//! The `DevicePlugin` gRPC service for one resource, as the kubelet calls it.
//!
//! Who may call: whoever can open the plugin's socket in the kubelet's device-plugins directory
//! (root on the node, by the directory's permissions). What it reveals: GPU UUIDs and health.
//! A bad request (unknown device, a slice across GPUs, a device of an unhealthy GPU) gets
//! `INVALID_ARGUMENT` or `FAILED_PRECONDITION` with a sentence, which the kubelet reports on the pod.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::api::device_plugin_server::DevicePlugin;
use super::api::{
    AllocateRequest, AllocateResponse, ContainerPreferredAllocationResponse, DevicePluginOptions, Empty,
    ListAndWatchResponse, PreStartContainerRequest, PreStartContainerResponse, PreferredAllocationRequest,
    PreferredAllocationResponse,
};
use super::devices::{DeviceError, Devices, Resource};

/// The service for one resource of one registration (a kubelet restart makes a new one).
#[derive(Debug, Clone)]
pub struct PluginService {
    resource: Resource,
    devices: Arc<Devices>,
    health: watch::Receiver<Vec<bool>>,
    stop: watch::Receiver<bool>,
}

impl PluginService {
    /// Serves `resource` of `devices` with `health`; ListAndWatch streams end when `stop` turns true.
    pub fn new(
        resource: Resource,
        devices: Arc<Devices>,
        health: watch::Receiver<Vec<bool>>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Self { resource, devices, health, stop }
    }
}

fn status(e: DeviceError) -> Status {
    match e {
        DeviceError::Unhealthy(_) => Status::failed_precondition(e.to_string()),
        _ => Status::invalid_argument(e.to_string()),
    }
}

#[tonic::async_trait]
impl DevicePlugin for PluginService {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream = ReceiverStream<Result<ListAndWatchResponse, Status>>;

    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let (r, devices) = (self.resource, self.devices.clone());
        let (mut health, mut stop) = (self.health.clone(), self.stop.clone());
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let flags = health.borrow_and_update().clone();
                let list = devices.list(r, &flags);
                if last.as_ref() != Some(&list) {
                    let unhealthy = list.iter().filter(|d| d.health != super::api::HEALTHY).count();
                    tracing::info!(
                        resource = r.name(),
                        devices = list.len(),
                        unhealthy,
                        "ListAndWatch sends the device list"
                    );
                    if tx.send(Ok(ListAndWatchResponse { devices: list.clone() })).await.is_err() {
                        break;
                    }
                    last = Some(list);
                }
                if *stop.borrow_and_update() {
                    break;
                }
                tokio::select! {
                    changed = health.changed() => if changed.is_err() { break },
                    _ = stop.changed() => {}
                    _ = tx.closed() => break,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let mut out = PreferredAllocationResponse::default();
        for c in req.into_inner().container_requests {
            let size = usize::try_from(c.allocation_size).map_err(|_| {
                Status::invalid_argument(format!("allocation_size {} is negative", c.allocation_size))
            })?;
            let ids = self
                .devices
                .preferred(self.resource, &c.available_device_i_ds, &c.must_include_device_i_ds, size)
                .map_err(status)?;
            out.container_responses.push(ContainerPreferredAllocationResponse { device_i_ds: ids });
        }
        Ok(Response::new(out))
    }

    async fn allocate(&self, req: Request<AllocateRequest>) -> Result<Response<AllocateResponse>, Status> {
        let health = self.health.borrow().clone();
        let mut out = AllocateResponse::default();
        for c in req.into_inner().container_requests {
            let resp = self.devices.allocate(self.resource, &c.devices_ids, &health).map_err(|e| {
                tracing::warn!(resource = self.resource.name(), error = %e, "Allocate refused");
                status(e)
            })?;
            tracing::info!(resource = self.resource.name(), devices = c.devices_ids.len(), "Allocate");
            out.container_responses.push(resp);
        }
        Ok(Response::new(out))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
