//! A node's image store, content-addressed under one directory:
//!
//! - `blobs/sha256/<hex>`: manifests, configurations and compressed layers, each verified
//!   against its digest before it is renamed into place (a reader never sees a partial blob);
//! - `layers/<hex>/`: a layer unpacked ([`crate::unpack`]) into a directory of its own, named by
//!   the compressed layer's digest and renamed into place once whole, shared by every image
//!   (and every team) that has the layer;
//! - `images/<hex>.json`: an image as pulled: its reference, manifest digest, configuration and
//!   layers ([`Image`]);
//! - `tmp/`: what is being written.
//!
//! An attempt's root file system is an overlay of the image's layers (read-only, shared) with
//! a private upper directory ([`ImageStore::mount_rootfs`]), removed when the attempt ends.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::digest::Digest;
use crate::oci::{Descriptor, ImageConfig};
use crate::unpack::{self, Compression, Limits};

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Content is not what it claims (a digest or size mismatch) or breaks a rule.
    #[error("{0}")]
    Refused(String),
    /// A layer could not be unpacked.
    #[error(transparent)]
    Unpack(#[from] unpack::UnpackError),
    /// Reading or writing the store failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
    let what = what.into();
    move |source| StoreError::Io { what, source }
}

/// An image as pulled onto the node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Image {
    /// The reference it was pulled by, pinned (`registry/repo[:tag]@sha256:…`).
    pub reference: String,
    /// The manifest's digest: what identifies the image.
    pub digest: Digest,
    /// Its configuration.
    pub config: ImageConfig,
    /// Its layers, bottom first.
    pub layers: Vec<Descriptor>,
    /// Its configuration blob's digest.
    #[serde(default)]
    pub config_blob: Option<Digest>,
    /// The teams whose jobs pulled it (who `gantry images` shows it to).
    #[serde(default)]
    pub teams: Vec<String>,
}

impl Image {
    /// Bytes of its compressed layers.
    pub fn size(&self) -> u64 {
        self.layers.iter().map(|l| l.size).sum()
    }

    /// The digest of its configuration blob.
    pub fn config_digest(&self) -> Digest {
        self.config_blob.clone().unwrap_or_else(|| Digest::of(b""))
    }
}

/// The store.
#[derive(Debug, Clone)]
pub struct ImageStore {
    root: PathBuf,
    limits: Limits,
}

impl ImageStore {
    /// The store under `root`, made if missing (mode 0700: only the agent reads it whole).
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        for dir in ["blobs/sha256", "layers", "images", "tmp"] {
            let d = root.join(dir);
            fs::create_dir_all(&d).map_err(io_err(format!("creating {}", d.display())))?;
        }
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(root, fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("setting the mode of {}", root.display())))?;
        Ok(Self { root: root.to_owned(), limits: Limits::default() })
    }

    /// The same, with other caps on each layer.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Where a blob is kept.
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(digest.hex())
    }

    /// Whether the blob is held.
    pub fn has_blob(&self, digest: &Digest) -> bool {
        self.blob_path(digest).is_file()
    }

    /// Starts writing a blob that must turn out to be `digest`, `size` bytes.
    pub fn blob_writer(&self, digest: &Digest, size: u64) -> Result<BlobWriter, StoreError> {
        let tmp = self.root.join("tmp").join(format!("blob-{}-{}", digest.hex(), unique()));
        let file = fs::File::create_new(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
        Ok(BlobWriter {
            file,
            tmp,
            dest: self.blob_path(digest),
            digest: digest.clone(),
            size,
            written: 0,
            hasher: sha2::Sha256::new(),
        })
    }

    /// Keeps `bytes` as the blob `digest` (refused unless they hash to it).
    pub fn put_blob(&self, digest: &Digest, bytes: &[u8]) -> Result<(), StoreError> {
        let mut w = self.blob_writer(digest, bytes.len() as u64)?;
        w.write(bytes)?;
        w.finish()
    }

    /// A held blob's bytes (small ones: manifests and configurations).
    pub fn read_blob(&self, digest: &Digest) -> Result<Vec<u8>, StoreError> {
        let path = self.blob_path(digest);
        fs::read(&path).map_err(io_err(format!("reading {}", path.display())))
    }

    /// The directory a layer unpacks to.
    pub fn layer_dir(&self, layer: &Digest) -> PathBuf {
        self.root.join("layers").join(layer.hex())
    }

    /// Unpacks the held layer `desc` (once: an unpacked layer is reused); its directory.
    pub fn unpack_layer(&self, desc: &Descriptor) -> Result<PathBuf, StoreError> {
        let dir = self.layer_dir(&desc.digest);
        if dir.is_dir() {
            return Ok(dir);
        }
        let compression = Compression::of(&desc.media_type)?;
        let tmp = self.root.join("tmp").join(format!("layer-{}-{}", desc.digest.hex(), unique()));
        fs::create_dir(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
        let blob = fs::File::open(self.blob_path(&desc.digest))
            .map_err(io_err(format!("opening layer {}", desc.digest)))?;
        let unpacked = unpack::unpack(std::io::BufReader::new(blob), compression, &tmp, self.limits);
        if let Err(e) = unpacked {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e.into());
        }
        // The compressed blob has served: the unpacked layer is what is kept.
        let _ = fs::remove_file(self.blob_path(&desc.digest));
        let bytes = unpacked.as_ref().map_or(0, |u| u.bytes);
        let _ = fs::write(
            self.root.join("layers").join(format!("{}.bytes", desc.digest.hex())),
            bytes.to_string(),
        );
        match fs::rename(&tmp, &dir) {
            Ok(()) => Ok(dir),
            // Another pull unpacked it meanwhile: theirs is as good.
            Err(_) if dir.is_dir() => {
                let _ = fs::remove_dir_all(&tmp);
                Ok(dir)
            }
            Err(e) => Err(io_err(format!("keeping layer {}", desc.digest))(e)),
        }
    }

    /// Records a pulled image.
    pub fn record(&self, image: &Image) -> Result<(), StoreError> {
        let path = self.root.join("images").join(format!("{}.json", image.digest.hex()));
        let json = serde_json::to_vec_pretty(image).map_err(|e| StoreError::Refused(e.to_string()))?;
        let tmp = self.root.join("tmp").join(format!("image-{}", unique()));
        fs::write(&tmp, json).map_err(io_err(format!("writing {}", tmp.display())))?;
        fs::rename(&tmp, &path).map_err(io_err(format!("writing {}", path.display())))
    }

    /// A pulled image by its manifest digest, if the node holds it whole.
    pub fn image(&self, digest: &Digest) -> Option<Image> {
        let path = self.root.join("images").join(format!("{}.json", digest.hex()));
        let image: Image = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
        image.layers.iter().all(|l| self.layer_dir(&l.digest).is_dir()).then_some(image)
    }

    /// Marks an image used now (eviction takes the least recently used first).
    pub fn touch(&self, digest: &Digest) {
        let path = self.root.join("images").join(format!("{}.json", digest.hex()));
        if let Ok(f) = fs::File::options().append(true).open(path) {
            // reason: a file's mtime is the file system's clock, compared with the same clock.
            #[allow(clippy::disallowed_methods)]
            let now = std::time::SystemTime::now();
            let _ = f.set_modified(now);
        }
    }

    /// Bytes of an image's unpacked layers.
    pub fn image_bytes(&self, image: &Image) -> u64 {
        let layers = self.root.join("layers");
        image
            .layers
            .iter()
            .filter_map(|l| fs::read_to_string(layers.join(format!("{}.bytes", l.digest.hex()))).ok())
            .filter_map(|t| t.trim().parse::<u64>().ok())
            .sum()
    }

    /// When an image was last used, ms since the Unix epoch.
    pub fn last_used_ms(&self, digest: &Digest) -> i64 {
        let path = self.root.join("images").join(format!("{}.json", digest.hex()));
        fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// Adds `team` to those that pulled the held image `digest` (keeping when it was used).
    pub fn add_team(&self, digest: &Digest, team: &str) -> Result<(), StoreError> {
        let path = self.root.join("images").join(format!("{}.json", digest.hex()));
        let Ok(text) = fs::read(&path) else { return Ok(()) };
        let Ok(mut image) = serde_json::from_slice::<Image>(&text) else { return Ok(()) };
        if image.teams.iter().any(|t| t == team) {
            return Ok(());
        }
        image.teams.push(team.to_owned());
        image.teams.sort();
        let used = fs::metadata(&path).and_then(|m| m.modified()).ok();
        self.record(&image)?;
        if let (Some(t), Ok(f)) = (used, fs::File::options().append(true).open(&path)) {
            let _ = f.set_modified(t);
        }
        Ok(())
    }

    /// Bytes the store holds: blobs, and each unpacked layer's files.
    pub fn usage(&self) -> u64 {
        let blobs: u64 = fs::read_dir(self.root.join("blobs/sha256"))
            .map(|d| d.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
            .unwrap_or(0);
        let layers: u64 = fs::read_dir(self.root.join("layers"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".bytes"))
                    .filter_map(|e| fs::read_to_string(e.path()).ok()?.trim().parse::<u64>().ok())
                    .sum()
            })
            .unwrap_or(0);
        blobs + layers
    }

    /// Bytes free on the store's file system for an unprivileged writer.
    pub fn free_bytes(&self) -> Option<u64> {
        statvfs(&self.root).map(|(free, _)| free)
    }

    /// Bytes of the store's whole file system.
    pub fn disk_bytes(&self) -> Option<u64> {
        statvfs(&self.root).map(|(_, total)| total)
    }

    /// Removes images, least recently used first, none of `keep`, until the store holds at most
    /// `target` bytes; then every layer and blob no remaining image names. The images removed.
    pub fn evict(&self, target: u64, keep: &std::collections::HashSet<Digest>) -> Vec<Image> {
        let mut removed = Vec::new();
        if self.usage() > target {
            let mut candidates: Vec<(std::time::SystemTime, Image)> = self
                .images()
                .into_iter()
                .filter(|i| !keep.contains(&i.digest))
                .map(|i| {
                    let path = self.root.join("images").join(format!("{}.json", i.digest.hex()));
                    let used = fs::metadata(path).and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
                    (used, i)
                })
                .collect();
            candidates.sort_by_key(|(used, _)| *used);
            for (_, image) in candidates {
                if self.usage() <= target {
                    break;
                }
                let _ =
                    fs::remove_file(self.root.join("images").join(format!("{}.json", image.digest.hex())));
                self.collect_garbage();
                removed.push(image);
            }
        }
        removed
    }

    /// Removes the layers and blobs no recorded image names.
    fn collect_garbage(&self) {
        let mut named: std::collections::HashSet<String> = std::collections::HashSet::new();
        for image in self.images() {
            named.extend(image.layers.iter().map(|l| l.digest.hex().to_owned()));
            named.insert(image.config_digest().hex().to_owned());
        }
        if let Ok(dir) = fs::read_dir(self.root.join("layers")) {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let hex = name.trim_end_matches(".bytes");
                if hex.len() == 64 && !named.contains(hex) {
                    let p = e.path();
                    let _ = if p.is_dir() { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
                }
            }
        }
        if let Ok(dir) = fs::read_dir(self.root.join("blobs/sha256")) {
            for e in dir.flatten() {
                if !named.contains(&*e.file_name().to_string_lossy()) {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
    }

    /// Every image the node holds.
    pub fn images(&self) -> Vec<Image> {
        let Ok(dir) = fs::read_dir(self.root.join("images")) else { return Vec::new() };
        let mut out: Vec<Image> = dir
            .flatten()
            .filter_map(|e| serde_json::from_slice::<Image>(&fs::read(e.path()).ok()?).ok())
            .collect();
        out.sort_by(|a, b| a.reference.cmp(&b.reference));
        out
    }

    /// Mounts `image` as an overlay at `<dir>/rootfs`: its layers read-only below, a private
    /// upper directory (`<dir>/upper`, `<dir>/work`) above. Root only.
    pub fn mount_rootfs(&self, image: &Image, dir: &Path) -> Result<Rootfs, StoreError> {
        let (target, upper, work) = (dir.join("rootfs"), dir.join("upper"), dir.join("work"));
        for d in [&target, &upper, &work] {
            fs::create_dir_all(d).map_err(io_err(format!("creating {}", d.display())))?;
        }
        let mut lower: Vec<String> = Vec::new();
        for layer in image.layers.iter().rev() {
            let d = self.layer_dir(&layer.digest);
            let text = d.display().to_string();
            if text.contains([',', ':']) {
                return Err(StoreError::Refused(format!(
                    "{text}: a layer path may hold neither `,` nor `:`"
                )));
            }
            lower.push(text);
        }
        if lower.is_empty() {
            // An image of no layers is an empty root: one empty lower directory.
            let empty = self.root.join("layers/empty");
            fs::create_dir_all(&empty).map_err(io_err(format!("creating {}", empty.display())))?;
            lower.push(empty.display().to_string());
        }
        let options =
            format!("lowerdir={},upperdir={},workdir={}", lower.join(":"), upper.display(), work.display());
        mount_overlay(&target, &options)?;
        Ok(Rootfs { path: target, dir: dir.to_owned() })
    }
}

/// A mounted root file system; [`Rootfs::remove`] unmounts it and removes its upper layer.
#[derive(Debug)]
pub struct Rootfs {
    /// The mount point.
    pub path: PathBuf,
    dir: PathBuf,
}

impl Rootfs {
    /// The root file system mounted at `dir/rootfs` by an earlier [`ImageStore::mount_rootfs`].
    pub fn at(dir: &Path) -> Self {
        Self { path: dir.join("rootfs"), dir: dir.to_owned() }
    }

    /// Unmounts it (lazily: a process still inside keeps it until it goes) and removes the
    /// attempt's upper and work directories.
    pub fn remove(&self) {
        unmount(&self.path);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A blob being written: hashed as it arrives, renamed into place by [`BlobWriter::finish`]
/// only when its digest and size match. Dropped unfinished, the file goes.
#[derive(Debug)]
pub struct BlobWriter {
    file: fs::File,
    tmp: PathBuf,
    dest: PathBuf,
    digest: Digest,
    size: u64,
    written: u64,
    hasher: sha2::Sha256,
}

impl BlobWriter {
    /// Appends `bytes`; refused past the declared size.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.written += bytes.len() as u64;
        if self.written > self.size {
            return Err(StoreError::Refused(format!(
                "blob {} is larger than the {} bytes its descriptor says",
                self.digest, self.size
            )));
        }
        self.hasher.update(bytes);
        self.file.write_all(bytes).map_err(io_err(format!("writing {}", self.tmp.display())))
    }

    /// Bytes written so far (where a resumed download starts).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Starts over (a server that ignored a range request sends the whole blob again).
    pub fn restart(&mut self) -> Result<(), StoreError> {
        self.file.set_len(0).map_err(io_err(format!("truncating {}", self.tmp.display())))?;
        std::io::Seek::rewind(&mut self.file)
            .map_err(io_err(format!("truncating {}", self.tmp.display())))?;
        self.written = 0;
        self.hasher = sha2::Sha256::new();
        Ok(())
    }

    /// Checks the digest and size, then keeps the blob.
    pub fn finish(self) -> Result<(), StoreError> {
        if self.written != self.size {
            return Err(StoreError::Refused(format!(
                "blob {} is {} bytes, not the {} its descriptor says",
                self.digest, self.written, self.size
            )));
        }
        let got = Digest::from_hasher(self.hasher.clone());
        if got != self.digest {
            return Err(StoreError::Refused(format!("a blob said to be {} hashes to {got}", self.digest)));
        }
        self.file.sync_all().map_err(io_err(format!("writing {}", self.tmp.display())))?;
        fs::rename(&self.tmp, &self.dest).map_err(io_err(format!("keeping {}", self.dest.display())))
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.tmp);
    }
}

/// (free bytes for an unprivileged writer, total bytes) of the file system holding `path`.
#[allow(unsafe_code)] // reason: statvfs(3) has no wrapper in std.
fn statvfs(path: &Path) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a zeroed statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid path and `st` a writable statvfs for the call's duration.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let unit = st.f_frsize as u64;
    Some((st.f_bavail as u64 * unit, st.f_blocks as u64 * unit))
}

fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

#[allow(unsafe_code)] // reason: mount(2) has no wrapper in std.
fn mount_overlay(target: &Path, options: &str) -> Result<(), StoreError> {
    let c = |s: &str| {
        std::ffi::CString::new(s).map_err(|_| StoreError::Refused(format!("`{s}` holds a NUL byte")))
    };
    let (source, fstype) = (c("overlay")?, c("overlay")?);
    let (target_c, data) = (c(&target.display().to_string())?, c(options)?);
    // SAFETY: every pointer is a valid NUL-terminated string for the call's duration.
    let rc = unsafe {
        libc::mount(source.as_ptr(), target_c.as_ptr(), fstype.as_ptr(), libc::MS_NODEV, data.as_ptr().cast())
    };
    if rc != 0 {
        return Err(StoreError::Io {
            what: format!("mounting the image's overlay at {} (root only)", target.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[allow(unsafe_code)] // reason: umount2(2) has no wrapper in std.
fn unmount(target: &Path) {
    let Ok(c) = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()) else { return };
    // SAFETY: `c` is a valid NUL-terminated path.
    unsafe {
        libc::umount2(c.as_ptr(), libc::MNT_DETACH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::media;

    /// A one-file gzip layer of `size` bytes, held and unpacked; its descriptor.
    fn layer(store: &ImageStore, name: &str, size: usize) -> Descriptor {
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(size as u64);
        h.set_mode(0o644);
        tar.append_data(&mut h, name, &vec![7u8; size][..]).expect("tar");
        let raw = tar.into_inner().expect("tar");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).expect("gzip");
        let bytes = gz.finish().expect("gzip");
        let desc = Descriptor {
            media_type: media::OCI_LAYER_GZIP.into(),
            digest: Digest::of(&bytes),
            size: bytes.len() as u64,
            platform: None,
        };
        store.put_blob(&desc.digest, &bytes).expect("blob");
        store.unpack_layer(&desc).expect("unpacked");
        desc
    }

    fn image(store: &ImageStore, name: &str, layers: Vec<Descriptor>) -> Image {
        let image = Image {
            reference: format!("r/{name}"),
            digest: Digest::of(name.as_bytes()),
            config: ImageConfig::default(),
            layers,
            config_blob: None,
            teams: Vec::new(),
        };
        store.record(&image).expect("recorded");
        image
    }

    #[test]
    fn eviction_removes_the_least_recently_used_unused_images_and_keeps_shared_layers() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ImageStore::open(dir.path()).expect("store");
        let base = layer(&store, "base", 4000);
        let (a_top, b_top, c_top) =
            (layer(&store, "a", 3000), layer(&store, "b", 3000), layer(&store, "c", 3000));
        let a = image(&store, "a", vec![base.clone(), a_top.clone()]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let _b = image(&store, "b", vec![base.clone(), b_top.clone()]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let c = image(&store, "c", vec![base.clone(), c_top.clone()]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        store.touch(&a.digest); // a used last: b is now the least recently used
        assert_eq!(store.usage(), 13_000, "unpacked bytes; the compressed blobs went once unpacked");
        let keep: std::collections::HashSet<Digest> = [c.digest.clone()].into();
        let removed = store.evict(8_000, &keep);
        let names: Vec<&str> = removed.iter().map(|i| i.reference.as_str()).collect();
        assert_eq!(names, ["r/b", "r/a"], "least recently used first, the image in use kept");
        assert!(store.image(&c.digest).is_some());
        assert!(store.layer_dir(&base.digest).is_dir(), "a layer a kept image shares stays");
        assert!(!store.layer_dir(&b_top.digest).exists() && !store.layer_dir(&a_top.digest).exists());
        assert_eq!(store.usage(), 7_000);
        assert!(store.evict(0, &keep).is_empty(), "nothing in use is ever removed");
    }
}
