//! Serving, registering and re-registering: one socket and one registration per resource.
//!
//! A generation starts when `kubelet.sock` exists: each resource's socket is (re-)created and
//! served, then registered with the kubelet (`Registration.Register`, API `v1beta1`, preferred
//! allocation available). The generation then watches, every `poll`, for what a kubelet restart
//! does: `kubelet.sock` re-created (another inode) or gone, or our sockets deleted (the kubelet
//! empties the directory when it starts). Any of these ends the generation — ListAndWatch
//! streams close, servers stop, sockets are removed — and a new one starts. Polling (twice a
//! second by default) rather than inotify keeps the plugin free of a file-watching dependency;
//! the kubelet itself takes seconds to come back.
//!
//! The kubelet refusing a registration (unsupported version, resource name taken) is fatal, as
//! the API asks; failing to reach it is retried. Shutdown (SIGTERM in the CLI) ends the current
//! generation the same way and returns.

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Endpoint, Server, Uri};

use super::api::device_plugin_server::DevicePluginServer;
use super::api::registration_client::RegistrationClient;
use super::api::{DevicePluginOptions, KUBELET_SOCKET, RegisterRequest, VERSION};
use super::devices::{Devices, Resource};
use super::service::PluginService;

/// Largest message the plugin accepts: GetPreferredAllocation for slices lists every available MiB.
const MAX_MESSAGE: usize = 256 * 1024 * 1024;

/// Where and how often.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// The kubelet's device-plugins directory (holds `kubelet.sock` and our sockets).
    pub dir: PathBuf,
    /// How often to look for a kubelet restart.
    pub poll: Duration,
}

/// Why the plugin stopped.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// A socket could not be created or removed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The kubelet answered Register with an error.
    #[error("the kubelet refused to register {resource}: {message}")]
    Refused {
        /// The resource.
        resource: &'static str,
        /// The kubelet's message.
        message: String,
    },
    /// No GPU to offer.
    #[error("no GPUs to offer: the node has none")]
    NoDevices,
}

/// Serves `devices` until `shutdown` completes, re-registering after each kubelet restart.
pub async fn run(
    cfg: PluginConfig,
    devices: Arc<Devices>,
    health: watch::Receiver<Vec<bool>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), PluginError> {
    let resources = devices.resources();
    if resources.is_empty() {
        return Err(PluginError::NoDevices);
    }
    tokio::pin!(shutdown);
    let kubelet = cfg.dir.join(KUBELET_SOCKET);
    loop {
        // Wait for the kubelet.
        while identity(&kubelet).is_none() {
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = tokio::time::sleep(cfg.poll) => {}
            }
        }
        let generation = Generation::start(&cfg.dir, &resources, &devices, &health)?;
        let registered = tokio::select! {
            _ = &mut shutdown => { generation.stop().await; return Ok(()); }
            r = register_all(&cfg.dir, &resources) => r,
        };
        let seen = match registered {
            Ok(seen) => seen,
            Err(Fatal::Refused(e)) => {
                generation.stop().await;
                return Err(e);
            }
            Err(Fatal::Unreachable(e)) => {
                tracing::warn!(error = %e, "cannot register with the kubelet yet; retrying");
                generation.stop().await;
                tokio::select! {
                    _ = &mut shutdown => return Ok(()),
                    _ = tokio::time::sleep(cfg.poll) => continue,
                }
            }
        };
        tracing::info!(dir = %cfg.dir.display(), "registered with the kubelet");
        loop {
            tokio::select! {
                _ = &mut shutdown => { generation.stop().await; return Ok(()); }
                _ = tokio::time::sleep(cfg.poll) => {}
            }
            if let Some(why) = generation.lost(&kubelet, seen) {
                tracing::info!(reason = why, "the kubelet restarted; serving and registering again");
                break;
            }
        }
        generation.stop().await;
    }
}

/// A file's identity: (device, inode).
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The servers of one registration.
struct Generation {
    stop: watch::Sender<bool>,
    servers: Vec<(PathBuf, JoinHandle<Result<(), tonic::transport::Error>>)>,
}

impl Generation {
    fn start(
        dir: &Path,
        resources: &[Resource],
        devices: &Arc<Devices>,
        health: &watch::Receiver<Vec<bool>>,
    ) -> Result<Self, PluginError> {
        let (stop, stopped) = watch::channel(false);
        let mut servers = Vec::new();
        for r in resources {
            let path = dir.join(r.socket());
            remove_socket(&path)?;
            let listener =
                UnixListener::bind(&path).map_err(|source| PluginError::Io { path: path.clone(), source })?;
            let svc = PluginService::new(*r, devices.clone(), health.clone(), stopped.clone());
            let svc = DevicePluginServer::new(svc).max_decoding_message_size(MAX_MESSAGE);
            let mut until = stopped.clone();
            let server = Server::builder().add_service(svc).serve_with_incoming_shutdown(
                UnixListenerStream::new(listener),
                async move {
                    let _ = until.wait_for(|s| *s).await;
                },
            );
            tracing::info!(resource = r.name(), socket = %path.display(), "serving");
            servers.push((path, tokio::spawn(server)));
        }
        Ok(Self { stop, servers })
    }

    /// Why this generation no longer reaches the kubelet, if it does not.
    fn lost(&self, kubelet: &Path, seen: (u64, u64)) -> Option<&'static str> {
        match identity(kubelet) {
            None => Some("kubelet.sock is gone"),
            Some(id) if id != seen => Some("kubelet.sock was re-created"),
            Some(_) if self.servers.iter().any(|(p, _)| !p.exists()) => Some("our socket was deleted"),
            Some(_) if self.servers.iter().any(|(_, h)| h.is_finished()) => Some("a server stopped"),
            Some(_) => None,
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        for (path, server) in self.servers {
            match tokio::time::timeout(Duration::from_secs(5), server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "a device plugin server failed"),
                Ok(Err(e)) => tracing::warn!(error = %e, "a device plugin server panicked"),
                Err(_) => {
                    tracing::warn!(socket = %path.display(), "a device plugin server did not stop in 5 s")
                }
            }
            if let Err(e) = remove_socket(&path) {
                tracing::warn!(error = %e, "cannot remove our socket");
            }
        }
    }
}

fn remove_socket(path: &Path) -> Result<(), PluginError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(PluginError::Io { path: path.to_path_buf(), source: e })
        }
        _ => Ok(()),
    }
}

enum Fatal {
    Refused(PluginError),
    Unreachable(String),
}

/// Registers every resource; returns the identity of the kubelet.sock it registered with.
async fn register_all(dir: &Path, resources: &[Resource]) -> Result<(u64, u64), Fatal> {
    let kubelet = dir.join(KUBELET_SOCKET);
    let seen = identity(&kubelet).ok_or_else(|| Fatal::Unreachable("kubelet.sock is gone".to_owned()))?;
    let channel = tokio::time::timeout(Duration::from_secs(10), connect(kubelet))
        .await
        .map_err(|_| Fatal::Unreachable("connecting to kubelet.sock timed out".to_owned()))?
        .map_err(|e| Fatal::Unreachable(format!("connecting to kubelet.sock: {e}")))?;
    let mut client = RegistrationClient::new(channel);
    for r in resources {
        let req = RegisterRequest {
            version: VERSION.to_owned(),
            endpoint: r.socket().to_owned(),
            resource_name: r.name().to_owned(),
            options: Some(DevicePluginOptions {
                pre_start_required: false,
                get_preferred_allocation_available: true,
            }),
        };
        match tokio::time::timeout(Duration::from_secs(10), client.register(req)).await {
            Err(_) => return Err(Fatal::Unreachable("Register timed out".to_owned())),
            Ok(Ok(_)) => tracing::info!(resource = r.name(), "registered"),
            Ok(Err(s)) if s.code() == tonic::Code::Unavailable => {
                return Err(Fatal::Unreachable(s.message().to_owned()));
            }
            Ok(Err(s)) => {
                return Err(Fatal::Refused(PluginError::Refused {
                    resource: r.name(),
                    message: s.message().to_owned(),
                }));
            }
        }
    }
    Ok(seen)
}

/// A gRPC channel over the unix socket at `path` (the URI is a placeholder; the connector decides).
pub(crate) async fn connect(path: PathBuf) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(p).await?)) }
        }))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_plugin::api::Empty;
    use crate::device_plugin::api::registration_server::{Registration, RegistrationServer};
    use gantry_gpu::{GpuInfo, MIB};
    use tokio::sync::mpsc;

    /// A kubelet's Registration service that records requests, or refuses them all.
    struct Kubelet {
        seen: mpsc::UnboundedSender<RegisterRequest>,
        refuse: bool,
    }

    #[tonic::async_trait]
    impl Registration for Kubelet {
        async fn register(
            &self,
            req: tonic::Request<RegisterRequest>,
        ) -> Result<tonic::Response<Empty>, tonic::Status> {
            if self.refuse {
                return Err(tonic::Status::already_exists("resource name already registered"));
            }
            let _ = self.seen.send(req.into_inner());
            Ok(tonic::Response::new(Empty {}))
        }
    }

    fn kubelet(dir: &Path, refuse: bool) -> (mpsc::UnboundedReceiver<RegisterRequest>, JoinHandle<()>) {
        let (seen, rx) = mpsc::unbounded_channel();
        let path = dir.join(KUBELET_SOCKET);
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).expect("bind kubelet.sock");
        let server = Server::builder()
            .add_service(RegistrationServer::new(Kubelet { seen, refuse }))
            .serve_with_incoming(UnixListenerStream::new(listener));
        (rx, tokio::spawn(async move { server.await.expect("kubelet serves") }))
    }

    fn devices() -> Arc<Devices> {
        let gpu = |index: u32| GpuInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: "T4".to_owned(),
            pci_bus_id: format!("00000000:{index:02X}:00.0"),
            memory_total_bytes: 8 * MIB,
            power_limit_watts: None,
            max_sm_clock_mhz: None,
            nvlink_peers: Vec::new(),
            mig_enabled: false,
        };
        Arc::new(Devices::new(&[gpu(0), gpu(1)], &[1]).expect("valid"))
    }

    fn config(dir: &Path) -> PluginConfig {
        PluginConfig { dir: dir.to_path_buf(), poll: Duration::from_millis(20) }
    }

    async fn next(rx: &mut mpsc::UnboundedReceiver<RegisterRequest>) -> RegisterRequest {
        tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("registered in time")
            .expect("open")
    }

    #[tokio::test]
    async fn a_refused_registration_stops_the_plugin_with_the_kubelets_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_rx, k) = kubelet(dir.path(), true);
        let (_tx, health) = watch::channel(vec![true, true]);
        let r = run(config(dir.path()), devices(), health, std::future::pending()).await;
        assert!(
            matches!(&r, Err(PluginError::Refused { message, .. }) if message.contains("already registered")),
            "{r:?}"
        );
        assert!(!dir.path().join(Resource::Gpu.socket()).exists(), "socket left behind");
        k.abort();
    }

    #[tokio::test]
    async fn without_a_kubelet_the_plugin_waits_and_shuts_down_cleanly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_tx, health) = watch::channel(vec![true, true]);
        let r =
            run(config(dir.path()), devices(), health, tokio::time::sleep(Duration::from_millis(100))).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(std::fs::read_dir(dir.path()).expect("read dir").count(), 0);
    }

    #[tokio::test]
    async fn the_plugin_registers_both_resources_and_again_when_its_sockets_are_deleted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut rx, k) = kubelet(dir.path(), false);
        let (_tx, health) = watch::channel(vec![true, true]);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let plugin = tokio::spawn(run(config(dir.path()), devices(), health, async move {
            let _ = stopped.await;
        }));
        let mut names = [next(&mut rx).await, next(&mut rx).await];
        names.sort_by(|a, b| a.resource_name.cmp(&b.resource_name));
        assert_eq!(
            names
                .iter()
                .map(|r| (r.resource_name.as_str(), r.endpoint.as_str(), r.version.as_str()))
                .collect::<Vec<_>>(),
            [
                ("gantry.dev/gpu", "gantry-gpu.sock", "v1beta1"),
                ("gantry.dev/gpu-memory", "gantry-gpu-memory.sock", "v1beta1")
            ]
        );
        std::fs::remove_file(dir.path().join(Resource::Gpu.socket())).expect("delete our socket");
        let again = next(&mut rx).await;
        assert_eq!(again.version, VERSION);
        let _ = stop.send(());
        let r =
            tokio::time::timeout(Duration::from_secs(30), plugin).await.expect("stops").expect("no panic");
        assert!(r.is_ok(), "{r:?}");
        for res in [Resource::Gpu, Resource::GpuMemory] {
            assert!(!dir.path().join(res.socket()).exists(), "{} left behind", res.socket());
        }
        k.abort();
    }
}
