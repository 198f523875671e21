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
    /// Bytes the node's images may hold (`--image-cache-limit`; `None`: a fifth of the disk).
    pub cache_limit: Option<u64>,
}

impl Default for ImagesConfig {
    fn default() -> Self {
        Self {
            insecure_registries: Vec::new(),
            runtime: None,
            stall_timeout: Duration::from_secs(120),
            cache_limit: None,
        }
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
    cache_limit: u64,
    /// Where attempts' containers are (each names the image it runs in `image`).
    containers: PathBuf,
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
        let guard = Arc::clone(&egress);
        let registry_config = RegistryConfig {
            insecure: config.insecure_registries.clone(),
            stall_timeout: config.stall_timeout,
            check_url: Some(gantry_image::registry::UrlCheck(Arc::new(move |url| guard.check_url(url)))),
            ..RegistryConfig::default()
        };
        let registry = Registry::new(http, registry_config).map_err(|e| e.to_string())?;
        let cache_limit = config.cache_limit.unwrap_or_else(|| store.disk_bytes().unwrap_or(100 << 30) / 5);
        Ok(Self {
            cache_limit,
            containers: state.join("containers"),
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
        team: Option<&str>,
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
        let reason = |e: gantry_image::registry::PullError| gantry_api::inputs::reason(&e.to_string());
        let resolved = self.registry.resolve(&r, creds).await.map_err(reason)?;
        if self.store.image(&resolved.digest).is_none() {
            self.make_room(&resolved.manifest)?;
        }
        let image = self.registry.pull_resolved(&r, creds, resolved, &self.store).await.map_err(reason)?;
        if let Some(team) = team {
            let _ = self.store.add_team(&image.digest, team);
        }
        Ok(image)
    }

    /// Evicts unused images (least recently used first) so that `manifest`'s layers fit under
    /// the cache limit, and refuses at once when the disk has no room for them.
    fn make_room(&self, manifest: &gantry_image::oci::Manifest) -> Result<(), String> {
        let missing = |l: &&gantry_image::oci::Descriptor| !self.store.layer_dir(&l.digest).is_dir();
        // The compressed blob, then its unpacked files (about as large again, usually more).
        let needed: u64 = manifest.layers.iter().filter(missing).map(|l| l.size.saturating_mul(3)).sum();
        let in_use = self.in_use();
        let removed = self.store.evict(self.cache_limit.saturating_sub(needed), &in_use);
        for image in &removed {
            tracing::info!(image = %image.reference, "evicted an unused image to make room");
        }
        let free = self.store.free_bytes().unwrap_or(u64::MAX);
        if free < needed {
            return Err(format!(
                "node {}'s disk has {} free; the image needs about {} (its cache holds {}, {} of it in use)",
                super::hostname(),
                gantry_api::upload::human_bytes(free),
                gantry_api::upload::human_bytes(needed),
                gantry_api::upload::human_bytes(self.store.usage()),
                in_use.len()
            ));
        }
        Ok(())
    }

    /// What the node holds, as `gantry images` lists it.
    pub fn listing(&self) -> Vec<gantry_api::types::NodeImage> {
        let in_use = self.running();
        self.store
            .images()
            .into_iter()
            .map(|i| gantry_api::types::NodeImage {
                node: String::new(),
                bytes: self.store.image_bytes(&i),
                last_used: self.store.last_used_ms(&i.digest),
                in_use: in_use.iter().filter(|(d, _)| *d == i.digest).count() as u32,
                jobs: in_use.iter().filter(|(d, _)| *d == i.digest).filter_map(|(_, j)| *j).collect(),
                reference: i.reference,
                digest: i.digest.to_string(),
                teams: i.teams,
            })
            .collect()
    }

    /// The images running attempts' containers use.
    pub fn in_use(&self) -> std::collections::HashSet<gantry_image::Digest> {
        self.running().into_iter().map(|(digest, _)| digest).collect()
    }

    /// Each running attempt's image and job: its container directory (`gantry-<job>-<attempt>`)
    /// names the image in `image`.
    fn running(&self) -> Vec<(gantry_image::Digest, Option<i64>)> {
        let Ok(dir) = std::fs::read_dir(&self.containers) else { return Vec::new() };
        dir.flatten()
            .filter_map(|e| {
                let digest = std::fs::read_to_string(e.path().join("image")).ok()?;
                let digest = gantry_image::Digest::parse(digest.trim()).ok()?;
                let name = e.file_name().to_string_lossy().into_owned();
                let job = name.strip_prefix("gantry-").and_then(|r| r.split('-').next()?.parse().ok());
                Some((digest, job))
            })
            .collect()
    }

    /// The cache limit, bytes.
    pub fn cache_limit(&self) -> u64 {
        self.cache_limit
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

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(unsafe_code)]
    fn mount_tmpfs(dir: &Path, size: &str) -> bool {
        let c = |s: &str| std::ffi::CString::new(s).expect("cstring");
        let (src, target, fstype, data) =
            (c("tmpfs"), c(&dir.display().to_string()), c("tmpfs"), c(&format!("size={size}")));
        // SAFETY: valid NUL-terminated strings for the call's duration.
        unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, data.as_ptr().cast()) == 0 }
    }

    #[test]
    fn a_pull_the_disk_cannot_hold_is_refused_at_once_with_the_free_and_needed_sizes() {
        let dir = tempfile::tempdir().expect("temp dir");
        if !mount_tmpfs(dir.path(), "2m") {
            eprintln!("SKIPPED: mounting a small tmpfs needs root");
            return;
        }
        let images = Images::open(dir.path(), &ImagesConfig::default(), Arc::default());
        let result = images.map(|i| {
            let layer = gantry_image::oci::Descriptor {
                media_type: gantry_image::oci::media::OCI_LAYER_GZIP.into(),
                digest: gantry_image::Digest::of(b"big"),
                size: 64 << 20,
                platform: None,
            };
            let manifest = gantry_image::oci::Manifest {
                schema_version: 2,
                media_type: None,
                config: layer.clone(),
                layers: vec![layer],
            };
            i.make_room(&manifest)
        });
        // SAFETY: unmounting the tmpfs this test mounted.
        #[allow(unsafe_code)]
        unsafe {
            let c = std::ffi::CString::new(dir.path().display().to_string()).expect("cstring");
            libc::umount2(c.as_ptr(), libc::MNT_DETACH);
        }
        let err = result.expect("opened").expect_err("no room");
        assert!(err.contains("free; the image needs about 192.0 MiB"), "{err}");
    }
}
