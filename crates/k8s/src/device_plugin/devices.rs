//! The node's GPUs as the kubelet sees them: device lists, Allocate answers and preferred
//! allocations for `gantry.dev/gpu` and `gantry.dev/gpu-memory`. Pure: no I/O, no clock; health
//! comes in as one flag per GPU.
//!
//! Each GPU is offered one way. A whole GPU (`gantry.dev/gpu`) is one device whose ID is the GPU's
//! UUID. A GPU listed in `--slice-gpus` is offered as memory (`gantry.dev/gpu-memory`): one
//! device per MiB, ID `<gpu index>-<MiB number>` (short on purpose: the list goes to the kubelet
//! in one message). A GPU is never in both, so the kubelet, which does not know that the two
//! resources share hardware, can never give a whole GPU and a slice of it to two pods.

use std::collections::BTreeMap;

use gantry_core::placement::gpus::{ChoiceError, NodeTopology, choose_gpus, choose_slice_gpu};
use gantry_gpu::{GpuInfo, MIB};

use super::api::{ContainerAllocateResponse, Device, HEALTHY, UNHEALTHY};

/// `gantry.dev/gpu`: whole GPUs.
pub const GPU: &str = "gantry.dev/gpu";
/// `gantry.dev/gpu-memory`: MiB of one GPU (a slice).
pub const GPU_MEMORY: &str = "gantry.dev/gpu-memory";

/// Which GPUs a container may use: UUIDs, comma-separated (read by the NVIDIA container runtime).
pub const ENV_NVIDIA_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// Which GPUs CUDA enumerates: the same UUIDs (CUDA accepts `GPU-…` names), so the right GPUs
/// are used whether or not the runtime hides the others.
pub const ENV_CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
/// A slice's memory limit in MiB, for the workload and its framework to respect.
pub const ENV_MEMORY_LIMIT_MIB: &str = "GANTRY_GPU_MEMORY_LIMIT_MIB";
/// The same limit for CUDA MPS clients (`0=<MiB>M`): enforced when the node runs an MPS daemon.
pub const ENV_MPS_MEMORY_LIMIT: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";

/// The largest message the kubelet's gRPC client accepts (gRPC's default receive limit).
pub const KUBELET_MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// The two resources the plugin advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// Whole GPUs.
    Gpu,
    /// MiB of one GPU.
    GpuMemory,
}

impl Resource {
    /// The extended resource name.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Gpu => GPU,
            Resource::GpuMemory => GPU_MEMORY,
        }
    }

    /// The plugin's socket name inside the device-plugins directory.
    pub fn socket(self) -> &'static str {
        match self {
            Resource::Gpu => "gantry-gpu.sock",
            Resource::GpuMemory => "gantry-gpu-memory.sock",
        }
    }
}

/// Why a request about devices was refused. Messages go back to the kubelet as gRPC statuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// `--slice-gpus` names a GPU the node does not have.
    #[error("--slice-gpus names GPU {0}, which this node does not have")]
    UnknownSliceGpu(u32),
    /// A device ID this plugin never advertised for the resource.
    #[error("unknown {resource} device `{id}`")]
    UnknownDevice {
        /// Resource name.
        resource: &'static str,
        /// The ID.
        id: String,
    },
    /// A device of an unhealthy GPU.
    #[error("device `{0}` is on an unhealthy GPU")]
    Unhealthy(String),
    /// A slice whose MiB units lie on more than one GPU.
    #[error("a {GPU_MEMORY} slice must lie on one GPU, these devices are on GPUs {0:?}")]
    SliceSpansGpus(Vec<u32>),
    /// No device asked for.
    #[error("no devices asked for")]
    Empty,
    /// No single GPU has that much memory available.
    #[error("no GPU has {0} MiB available for one slice")]
    NoGpuHolds(usize),
    /// The slice device list would not fit in one kubelet message.
    #[error(
        "offering GPUs {gpus:?} as slices lists {devices} MiB devices ({bytes} bytes), over the kubelet's \
         {limit}-byte gRPC message limit; slice fewer GPUs"
    )]
    TooManySliceDevices {
        /// The sliced GPUs.
        gpus: Vec<u32>,
        /// Devices listed.
        devices: usize,
        /// Encoded size of the list.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The whole-GPU choice failed.
    #[error(transparent)]
    Choice(#[from] ChoiceError),
}

#[derive(Debug, Clone)]
struct Gpu {
    index: u32,
    uuid: String,
    memory_mib: u64,
    sliced: bool,
}

/// The node's GPUs and how each is offered.
#[derive(Debug, Clone)]
pub struct Devices {
    gpus: Vec<Gpu>,
    topology: NodeTopology,
}

impl Devices {
    /// The GPUs of `inventory`; those whose index is in `slice` are offered as memory.
    pub fn new(inventory: &[GpuInfo], slice: &[u32]) -> Result<Self, DeviceError> {
        if let Some(i) = slice.iter().find(|i| !inventory.iter().any(|g| g.index == **i)) {
            return Err(DeviceError::UnknownSliceGpu(*i));
        }
        let gpus: Vec<Gpu> = inventory
            .iter()
            .map(|g| Gpu {
                index: g.index,
                uuid: g.uuid.clone(),
                memory_mib: g.memory_total_bytes / MIB,
                sliced: slice.contains(&g.index),
            })
            .collect();
        let n = inventory.iter().map(|g| g.index + 1).max().unwrap_or(0);
        let mut topology = NodeTopology::new(n);
        for g in inventory {
            for peer in inventory.iter().filter(|p| p.index != g.index) {
                let links = g.nvlink_peers.iter().filter(|b| **b == peer.pci_bus_id).count();
                if links > 0 {
                    topology.link(g.index, peer.index, links as u32);
                }
            }
        }
        Ok(Self { gpus, topology })
    }

    /// Refuses a `gantry.dev/gpu-memory` list the kubelet could not receive (its gRPC client
    /// keeps the default 4 MiB message limit; the list is about 20 bytes per MiB).
    pub fn check_message_size(&self) -> Result<(), DeviceError> {
        use prost::Message;
        let list = super::api::ListAndWatchResponse { devices: self.list(Resource::GpuMemory, &[]) };
        let bytes = list.encoded_len();
        if bytes <= KUBELET_MAX_MESSAGE {
            return Ok(());
        }
        let gpus = self.offered(Resource::GpuMemory).map(|g| g.index).collect();
        Err(DeviceError::TooManySliceDevices {
            gpus,
            devices: list.devices.len(),
            bytes,
            limit: KUBELET_MAX_MESSAGE,
        })
    }

    /// The resources with at least one GPU behind them.
    pub fn resources(&self) -> Vec<Resource> {
        let mut out = Vec::new();
        if self.gpus.iter().any(|g| !g.sliced) {
            out.push(Resource::Gpu);
        }
        if self.gpus.iter().any(|g| g.sliced) {
            out.push(Resource::GpuMemory);
        }
        out
    }

    fn offered(&self, r: Resource) -> impl Iterator<Item = &Gpu> {
        self.gpus.iter().filter(move |g| g.sliced == (r == Resource::GpuMemory))
    }

    /// The full device list for `r`; `healthy[i]` is GPU `i`'s health (missing: unhealthy).
    pub fn list(&self, r: Resource, healthy: &[bool]) -> Vec<Device> {
        let health = |g: &Gpu| {
            let ok = healthy.get(g.index as usize).copied().unwrap_or(false);
            (if ok { HEALTHY } else { UNHEALTHY }).to_owned()
        };
        let mut out = Vec::new();
        for g in self.offered(r) {
            match r {
                Resource::Gpu => out.push(Device { id: g.uuid.clone(), health: health(g), topology: None }),
                Resource::GpuMemory => {
                    let h = health(g);
                    out.extend((0..g.memory_mib).map(|u| Device {
                        id: format!("{}-{u}", g.index),
                        health: h.clone(),
                        topology: None,
                    }));
                }
            }
        }
        out
    }

    /// The GPU index behind a device ID of `r`.
    fn gpu_of(&self, r: Resource, id: &str) -> Result<u32, DeviceError> {
        let unknown = || DeviceError::UnknownDevice { resource: r.name(), id: id.to_owned() };
        match r {
            Resource::Gpu => self.offered(r).find(|g| g.uuid == id).map(|g| g.index).ok_or_else(unknown),
            Resource::GpuMemory => {
                let (gpu, unit) = id.split_once('-').ok_or_else(unknown)?;
                let (gpu, unit): (u32, u64) =
                    (gpu.parse().map_err(|_| unknown())?, unit.parse().map_err(|_| unknown())?);
                self.offered(r)
                    .find(|g| g.index == gpu && unit < g.memory_mib)
                    .map(|g| g.index)
                    .ok_or_else(unknown)
            }
        }
    }

    fn uuid(&self, index: u32) -> &str {
        self.gpus.iter().find(|g| g.index == index).map_or("", |g| g.uuid.as_str())
    }

    /// What one container gets for `ids`: the visible GPUs and, for a slice, its memory limit.
    /// Unknown devices, devices of unhealthy GPUs and slices spanning GPUs are refused.
    pub fn allocate(
        &self,
        r: Resource,
        ids: &[String],
        healthy: &[bool],
    ) -> Result<ContainerAllocateResponse, DeviceError> {
        if ids.is_empty() {
            return Err(DeviceError::Empty);
        }
        let mut per_gpu: BTreeMap<u32, u64> = BTreeMap::new();
        for id in ids {
            let gpu = self.gpu_of(r, id)?;
            if !healthy.get(gpu as usize).copied().unwrap_or(false) {
                return Err(DeviceError::Unhealthy(id.clone()));
            }
            *per_gpu.entry(gpu).or_default() += 1;
        }
        let uuids: Vec<&str> = per_gpu.keys().map(|g| self.uuid(*g)).collect();
        let mut resp = ContainerAllocateResponse::default();
        resp.envs.insert(ENV_NVIDIA_VISIBLE_DEVICES.to_owned(), uuids.join(","));
        resp.envs.insert(ENV_CUDA_VISIBLE_DEVICES.to_owned(), uuids.join(","));
        if r == Resource::GpuMemory {
            if per_gpu.len() > 1 {
                return Err(DeviceError::SliceSpansGpus(per_gpu.into_keys().collect()));
            }
            let mib = ids.len();
            resp.envs.insert(ENV_MEMORY_LIMIT_MIB.to_owned(), mib.to_string());
            resp.envs.insert(ENV_MPS_MEMORY_LIMIT.to_owned(), format!("0={mib}M"));
        }
        Ok(resp)
    }

    /// The devices the plugin would rather give: for whole GPUs the core's choice (fewest broken
    /// blocks, then NVLink); for a slice, units of the best-fitting GPU that holds all of it.
    pub fn preferred(
        &self,
        r: Resource,
        available: &[String],
        must: &[String],
        size: usize,
    ) -> Result<Vec<String>, DeviceError> {
        match r {
            Resource::Gpu => {
                let to_index = |ids: &[String]| -> Result<Vec<u32>, DeviceError> {
                    ids.iter().map(|id| self.gpu_of(r, id)).collect()
                };
                let chosen = choose_gpus(&self.topology, &to_index(available)?, &to_index(must)?, size)?;
                Ok(chosen.into_iter().map(|g| self.uuid(g).to_owned()).collect())
            }
            Resource::GpuMemory => self.preferred_slice(available, must, size),
        }
    }

    fn preferred_slice(
        &self,
        available: &[String],
        must: &[String],
        size: usize,
    ) -> Result<Vec<String>, DeviceError> {
        let r = Resource::GpuMemory;
        let mut per_gpu: BTreeMap<u32, Vec<&String>> = BTreeMap::new();
        for id in available {
            per_gpu.entry(self.gpu_of(r, id)?).or_default().push(id);
        }
        let must_gpus: Vec<u32> = must.iter().map(|id| self.gpu_of(r, id)).collect::<Result<_, _>>()?;
        let free: Vec<(u32, u64)> = per_gpu
            .iter()
            .filter(|(g, _)| must_gpus.iter().all(|m| m == *g))
            .map(|(g, ids)| (*g, ids.len() as u64))
            .collect();
        let gpu = choose_slice_gpu(&free, size as u64).ok_or(DeviceError::NoGpuHolds(size))?;
        let must_set: std::collections::HashSet<&String> = must.iter().collect();
        let mut out: Vec<String> = must.to_vec();
        for id in per_gpu.get(&gpu).map(Vec::as_slice).unwrap_or_default() {
            if out.len() >= size {
                break;
            }
            if !must_set.contains(id) {
                out.push((*id).clone());
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
