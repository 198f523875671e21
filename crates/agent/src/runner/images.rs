//! Container images on this node (issue 40): the node's image store and registry client
//! ([`gantry_image`]), and the OCI runtime that runs a job's container.
//!
//! A job with an `image` is pulled before its attempt starts (with its other preparations:
//! inputs, the uploaded working directory). Its registry is reached like a member's data
//! source: through the node's egress guard, so an image reference cannot make the root agent
//! reach the node's loopback, metadata service or private networks; a registry an admin names
//! with `--insecure-registry HOST:PORT` is spoken to over plain HTTP and may be on those
//! networks (a site's own registry, the tests' loopback one).
//!
//! The runtime is `runc` or `crun` (`--oci-runtime`; by default runc where it is installed,
//! else crun): crun 1.8 refuses hosts whose cgroup2 hierarchy holds controllers beside v1 ones,
//! which runc runs on. With crun the shim runs it with `--cgroup-manager=disabled` inside the
//! attempt's cgroup; with runc the bundle names the attempt's cgroup as `cgroupsPath`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gantry_image::Reference;
use gantry_image::registry::{Registry, RegistryConfig};
use gantry_image::store::{Image, ImageStore};

use super::egress::Egress;

/// How this node pulls and runs images (`gantry up|agent` flags).
#[derive(Debug, Clone)]
pub struct ImagesConfig {
    /// Registries (`host:port`) spoken to over plain HTTP, which may be on the node's own
    /// networks (`--insecure-registry`).
    pub insecure_registries: Vec<String>,
    /// The OCI runtime: `runc`, `crun`, a path, or `None` for the default.
    pub runtime: Option<String>,
    /// A pull that receives nothing this long fails (`--pull-stall-timeout`).
    pub stall_timeout: Duration,
}

impl Default for ImagesConfig {
    fn default() -> Self {
        Self { insecure_registries: Vec::new(), runtime: None, stall_timeout: Duration::from_secs(120) }
    }
}

/// The node's images and runtime.
#[derive(Debug)]
pub struct Images {
    store: ImageStore,
    registry: Registry,
    egress: Arc<Egress>,
    insecure: Vec<String>,
    runtime: Option<PathBuf>,
}

impl Images {
    /// The store under `<state>/images` and a registry client through `egress`.
    pub fn open(state: &Path, config: &ImagesConfig, egress: Arc<Egress>) -> Result<Self, String> {
        let store = ImageStore::open(&state.join("images")).map_err(|e| e.to_string())?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .dns_resolver(egress.resolver())
            .redirect(egress.redirects())
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(5));
        let registry_config = RegistryConfig {
            insecure: config.insecure_registries.clone(),
            stall_timeout: config.stall_timeout,
            ..RegistryConfig::default()
        };
        let registry = Registry::new(http, registry_config).map_err(|e| e.to_string())?;
        Ok(Self {
            store,
            registry,
            egress,
            insecure: config.insecure_registries.clone(),
            runtime: find_runtime(config.runtime.as_deref()),
        })
    }

    /// The node's image store.
    pub fn store(&self) -> &ImageStore {
        &self.store
    }

    /// The OCI runtime, or why there is none.
    pub fn runtime(&self) -> Result<&Path, String> {
        self.runtime.as_deref().ok_or_else(|| {
            format!(
                "node {} has no OCI runtime (install runc or crun, or name one with --oci-runtime)",
                super::hostname()
            )
        })
    }

    /// Pulls `reference`, pinned to `digest` when the job has one (what the node holds
    /// already is not fetched again).
    pub async fn pull(
        &self,
        reference: &str,
        digest: Option<&str>,
        creds: Option<&gantry_image::registry::Credentials>,
    ) -> Result<Image, String> {
        self.runtime()?;
        let mut r = Reference::parse(reference)?;
        if let Some(d) = digest {
            r = r.pinned(gantry_image::Digest::parse(d)?);
        }
        if !self.insecure.iter().any(|h| h == &r.registry) {
            // An address named in the reference is checked here; a name, when it is resolved.
            let url = reqwest::Url::parse(&format!("https://{}/", r.api_host()))
                .map_err(|e| format!("image {reference}: {e}"))?;
            self.egress.check_url(&url).map_err(|e| format!("image {reference}: {e}"))?;
        }
        self.registry
            .pull(&r, creds, &self.store)
            .await
            .map_err(|e| gantry_api::inputs::reason(&e.to_string()))
    }
}

/// The runtime to use: the one named (a name on the `PATH`'s usual directories, or a path),
/// else runc, else crun.
fn find_runtime(choice: Option<&str>) -> Option<PathBuf> {
    let find = |name: &str| {
        if name.contains('/') {
            return Some(PathBuf::from(name)).filter(|p| p.is_file());
        }
        ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    };
    match choice {
        Some(name) => find(name),
        None => find("runc").or_else(|| find("crun")),
    }
}

/// Whether `runtime` is crun (run with `--cgroup-manager=disabled`; runc is given a
/// `cgroupsPath`).
pub fn is_crun(runtime: &Path) -> bool {
    runtime.file_name().is_some_and(|n| n == "crun")
}
