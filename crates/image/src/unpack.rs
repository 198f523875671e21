//! Unpacking one layer into a directory of its own, safe by construction: every entry lands
//! inside the directory, whatever the archive says.
//!
//! - A name is split into components; `..` anywhere refuses the layer, and a leading `/` or
//!   `./` is dropped (absolute names are relative to the layer's root).
//! - No entry is written through a link: every parent directory of an entry is checked to be a
//!   real directory (a symbolic link among them refuses the layer), and files are created anew
//!   (`O_EXCL`, never opening an existing name). A symbolic link's target is stored as written:
//!   it is read inside the container's root, never followed here.
//! - A hard link must name a regular file this layer already holds, by a name that passes the
//!   same checks.
//! - Device nodes and FIFOs are skipped; setuid and setgid bits are dropped; the archive's
//!   bytes and entries are capped ([`Limits`]).
//! - Whiteouts become overlayfs's own: `.wh.NAME` a character device 0/0 named `NAME`, and
//!   `.wh..wh..opq` the `trusted.overlay.opaque` attribute on its directory, so the layers stack
//!   as an overlay mount's lower directories the way the OCI image spec says they apply.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// How a layer is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// A plain tar.
    None,
    /// gzip.
    Gzip,
    /// zstd.
    Zstd,
}

impl Compression {
    /// The compression a layer's media type says.
    pub fn of(media_type: &str) -> Result<Self, UnpackError> {
        use crate::oci::media;
        match media_type {
            media::OCI_LAYER | "application/vnd.docker.image.rootfs.diff.tar" => Ok(Self::None),
            media::OCI_LAYER_GZIP | media::DOCKER_LAYER => Ok(Self::Gzip),
            media::OCI_LAYER_ZSTD => Ok(Self::Zstd),
            other => Err(UnpackError::Refused(format!("a layer of type {other} is not supported"))),
        }
    }
}

/// Caps on what one layer may unpack to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of file content at most.
    pub max_bytes: u64,
    /// Entries at most.
    pub max_entries: u64,
}

impl Default for Limits {
    /// 64 GiB and a million entries: larger than any real layer (CUDA images' largest are a few
    /// GiB), small enough that a crafted archive cannot fill a node.
    fn default() -> Self {
        Self { max_bytes: 64 << 30, max_entries: 1_000_000 }
    }
}

/// What a layer held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unpacked {
    /// Entries written (files, directories, links, whiteouts).
    pub entries: u64,
    /// Bytes of file content.
    pub bytes: u64,
    /// Entries skipped (device nodes, FIFOs, unknown kinds).
    pub skipped: u64,
}

/// Why a layer was refused or could not be written.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The layer breaks a rule (a name leaving the directory, a cap passed).
    #[error("{0}")]
    Refused(String),
    /// Reading the archive or writing the directory failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> UnpackError {
    let what = what.into();
    move |source| UnpackError::Io { what, source }
}

/// Unpacks the layer `reader` holds into `dest` (an empty directory).
pub fn unpack(
    reader: impl Read,
    compression: Compression,
    dest: &Path,
    limits: Limits,
) -> Result<Unpacked, UnpackError> {
    let reader: Box<dyn Read> = match compression {
        Compression::None => Box::new(reader),
        Compression::Gzip => Box::new(flate2::read::GzDecoder::new(reader)),
        Compression::Zstd => Box::new(Zstd::new(io::BufReader::new(reader))?),
    };
    let mut archive = tar::Archive::new(reader);
    let root = is_root();
    let mut done = Unpacked::default();
    for entry in archive.entries().map_err(io_err("reading the layer"))? {
        let mut entry = entry.map_err(io_err("reading the layer"))?;
        if done.entries + done.skipped >= limits.max_entries {
            return Err(UnpackError::Refused(format!(
                "the layer has more than {} entries",
                limits.max_entries
            )));
        }
        let raw = entry.path_bytes().into_owned();
        let Some(parts) = components(&raw)? else { continue };
        let (name, parents) = parts.split_last().expect("at least one component");
        let dir = ensure_dirs(dest, parents)?;
        let header = entry.header();
        let mode = header.mode().unwrap_or(0o644) & 0o1777; // no setuid, no setgid
        let owner = (header.uid().unwrap_or(0), header.gid().unwrap_or(0));
        let kind = header.entry_type();
        if name == ".wh..wh..opq" {
            set_opaque(&dir)?;
            done.entries += 1;
            continue;
        }
        if let Some(hidden) = name.strip_prefix(".wh.") {
            check_name(hidden, &raw)?;
            let path = dir.join(hidden);
            remove(&path)?;
            whiteout(&path)?;
            done.entries += 1;
            continue;
        }
        let path = dir.join(name);
        match kind {
            tar::EntryType::Directory => {
                match fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        remove(&path)?;
                        fs::create_dir(&path).map_err(io_err(format!("creating {}", path.display())))?;
                    }
                    Err(_) => {
                        fs::create_dir(&path).map_err(io_err(format!("creating {}", path.display())))?
                    }
                }
                fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                    .map_err(io_err(format!("setting the mode of {}", path.display())))?;
                if root {
                    chown(&path, owner)?;
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                remove(&path)?;
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(io_err(format!("creating {}", path.display())))?;
                let left = limits.max_bytes.saturating_sub(done.bytes);
                let copied = io::copy(&mut (&mut entry).take(left + 1), &mut file)
                    .map_err(io_err(format!("writing {}", path.display())))?;
                if copied > left {
                    return Err(UnpackError::Refused(format!(
                        "the layer unpacks to more than {} bytes",
                        limits.max_bytes
                    )));
                }
                done.bytes += copied;
                if root {
                    std::os::unix::fs::fchown(&file, Some(owner.0 as u32), Some(owner.1 as u32))
                        .map_err(io_err(format!("setting the owner of {}", path.display())))?;
                }
                file.set_permissions(fs::Permissions::from_mode(mode))
                    .map_err(io_err(format!("setting the mode of {}", path.display())))?;
            }
            tar::EntryType::Symlink => {
                let target = link_target(&entry, &raw)?;
                remove(&path)?;
                let target =
                    PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&target));
                std::os::unix::fs::symlink(&target, &path)
                    .map_err(io_err(format!("creating the link {}", path.display())))?;
                if root {
                    std::os::unix::fs::lchown(&path, Some(owner.0 as u32), Some(owner.1 as u32))
                        .map_err(io_err(format!("setting the owner of {}", path.display())))?;
                }
            }
            tar::EntryType::Link => {
                let target = link_target(&entry, &raw)?;
                let Some(tparts) = components(&target)? else {
                    return Err(UnpackError::Refused(format!(
                        "`{}`: a hard link to the layer's root",
                        lossy(&raw)
                    )));
                };
                let (tname, tparents) = tparts.split_last().expect("at least one component");
                let tdir = existing_dirs(dest, tparents, &target)?;
                let tpath = tdir.join(tname);
                match fs::symlink_metadata(&tpath) {
                    Ok(m) if m.is_file() => {}
                    _ => {
                        return Err(UnpackError::Refused(format!(
                            "`{}`: a hard link must name a regular file earlier in the same layer, not `{}`",
                            lossy(&raw),
                            lossy(&target)
                        )));
                    }
                }
                if tpath != path {
                    remove(&path)?;
                    fs::hard_link(&tpath, &path).map_err(io_err(format!("linking {}", path.display())))?;
                }
            }
            _ => {
                done.skipped += 1;
                continue;
            }
        }
        done.entries += 1;
    }
    Ok(done)
}

/// A zstd stream of one or more frames, decoded.
struct Zstd<R: io::BufRead> {
    frame: Option<ruzstd::decoding::StreamingDecoder<R, ruzstd::decoding::FrameDecoder>>,
}

impl<R: io::BufRead> Zstd<R> {
    fn new(source: R) -> Result<Self, UnpackError> {
        let frame = ruzstd::decoding::StreamingDecoder::new(source)
            .map_err(|e| UnpackError::Refused(format!("the layer is not zstd: {e}")))?;
        Ok(Self { frame: Some(frame) })
    }
}

impl<R: io::BufRead> Read for Zstd<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(frame) = self.frame.as_mut() else { return Ok(0) };
            let n = frame.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            // The frame ended: another may follow.
            let Some(mut source) = self.frame.take().map(ruzstd::decoding::StreamingDecoder::into_inner)
            else {
                return Ok(0);
            };
            if source.fill_buf()?.is_empty() {
                return Ok(0);
            }
            self.frame = Some(ruzstd::decoding::StreamingDecoder::new(source).map_err(io::Error::other)?);
        }
    }
}

/// A link entry's target (named `raw`), as written.
fn link_target<R: Read>(entry: &tar::Entry<'_, R>, raw: &[u8]) -> Result<Vec<u8>, UnpackError> {
    entry
        .link_name_bytes()
        .map(std::borrow::Cow::into_owned)
        .ok_or_else(|| UnpackError::Refused(format!("`{}`: a link without a target", lossy(raw))))
}

/// The components of an entry's name, `None` for the root itself; `..` refuses the layer.
fn components(raw: &[u8]) -> Result<Option<Vec<String>>, UnpackError> {
    let mut out = Vec::new();
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                return Err(UnpackError::Refused(format!("`{}` leaves the layer (`..`)", lossy(raw))));
            }
            _ => {
                let part = std::str::from_utf8(part)
                    .map_err(|_| UnpackError::Refused(format!("`{}` is not UTF-8", lossy(raw))))?;
                check_name(part, raw)?;
                out.push(part.to_owned());
            }
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

fn check_name(part: &str, raw: &[u8]) -> Result<(), UnpackError> {
    if part.is_empty() || part == "." || part == ".." || part.contains('\0') || part.len() > 255 {
        return Err(UnpackError::Refused(format!(
            "`{}` has a component that is not a file name",
            lossy(raw)
        )));
    }
    Ok(())
}

/// Makes `parents` below `dest` exist as real directories (never through a link); the last.
fn ensure_dirs(dest: &Path, parents: &[String]) -> Result<PathBuf, UnpackError> {
    let mut dir = dest.to_path_buf();
    for p in parents {
        dir.push(p);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(UnpackError::Refused(format!(
                    "`{}` goes through something that is not a directory (a link?): refused",
                    dir.strip_prefix(dest).unwrap_or(&dir).display()
                )));
            }
            Err(_) => {
                fs::create_dir(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
                    .map_err(io_err(format!("setting the mode of {}", dir.display())))?;
            }
        }
    }
    Ok(dir)
}

/// `parents` below `dest`, which must already be real directories.
fn existing_dirs(dest: &Path, parents: &[String], raw: &[u8]) -> Result<PathBuf, UnpackError> {
    let mut dir = dest.to_path_buf();
    for p in parents {
        dir.push(p);
        if !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            return Err(UnpackError::Refused(format!(
                "a hard link to `{}` goes through something that is not a directory of the layer",
                lossy(raw)
            )));
        }
    }
    Ok(dir)
}

/// Removes whatever is at `path` (a directory with what it holds), if anything.
fn remove(path: &Path) -> Result<(), UnpackError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(_) => Ok(()),
    }
    .map_err(io_err(format!("replacing {}", path.display())))
}

fn chown(path: &Path, (uid, gid): (u64, u64)) -> Result<(), UnpackError> {
    std::os::unix::fs::lchown(path, Some(uid as u32), Some(gid as u32))
        .map_err(io_err(format!("setting the owner of {}", path.display())))
}

fn lossy(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    text.chars().take(200).collect()
}

fn cstring(path: &Path) -> Result<std::ffi::CString, UnpackError> {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| UnpackError::Refused(format!("`{}` holds a NUL byte", path.display())))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    #[allow(unsafe_code)] // reason: geteuid(2) has no wrapper in std.
    let euid = unsafe { libc::geteuid() };
    euid == 0
}

/// An overlayfs whiteout: a character device 0/0 (root only).
#[allow(unsafe_code)] // reason: mknod(2) has no wrapper in std.
fn whiteout(path: &Path) -> Result<(), UnpackError> {
    let c = cstring(path)?;
    // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, libc::makedev(0, 0)) };
    if rc != 0 {
        return Err(UnpackError::Io {
            what: format!("creating the whiteout {} (whiteouts need root)", path.display()),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Marks `dir` opaque for overlayfs: the layers below show nothing of it.
#[allow(unsafe_code)] // reason: setxattr(2) has no wrapper in std.
fn set_opaque(dir: &Path) -> Result<(), UnpackError> {
    let c = cstring(dir)?;
    let name = c"trusted.overlay.opaque";
    // SAFETY: both strings are valid and NUL-terminated, the value is one readable byte.
    let rc = unsafe { libc::setxattr(c.as_ptr(), name.as_ptr(), b"y".as_ptr().cast(), 1, 0) };
    if rc != 0 {
        return Err(UnpackError::Io {
            what: format!("marking {} opaque (needs root)", dir.display()),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
