//! A job's working directory as it travels: a [`Manifest`] of its files by content, and the
//! rule that decides which manifests are safe to write out on a node ([`Manifest::check`]).
//!
//! `gantry submit`, `run` and `apply` pack the directory they are run in. Each file is named by
//! the SHA-256 of its bytes, so the client first asks which of those digests the server holds
//! already for the team and uploads only the others: an unchanged directory submitted again
//! costs one small request and no bytes. The manifest itself (paths, digests, sizes, the
//! executable bit, links) is then posted; its own digest (of its canonical JSON, [`Manifest::digest`])
//! is what a job refers to, with the files and bytes it holds ([`Upload`]).
//!
//! The same check runs on three machines, because none may trust the one before it: the client
//! (to refuse early, with the path in the sentence), the server (a client can send anything)
//! and the agent (which writes the files as root before handing them to the job's user). A
//! manifest is safe when every path stays inside the directory it is written into:
//! - paths are relative, with no empty, `.` or `..` part and no control character;
//! - no path lies under a file or a link of the same manifest, so writing one never follows a
//!   link the manifest made;
//! - a link's target is relative and, read from the link's directory, never climbs above the
//!   root and passes through no other link (so its lexical reading is the one the kernel makes:
//!   every directory it crosses is a real one this manifest made).
//!
//! It is bounded too: [`MAX_ENTRIES`] entries, and the sum of file sizes under the cap the caller
//! passes (the server's, [`LIMIT_BYTES`] by default).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The default cap on a working directory's bytes: 100 MiB. Larger data belongs in an input.
pub const LIMIT_BYTES: u64 = 100 << 20;

/// Most entries (files, directories, links) in one manifest.
pub const MAX_ENTRIES: usize = 100_000;

/// Longest path or link target, bytes.
const MAX_PATH: usize = 4096;

/// A packed working directory: its entries, sorted by path, each path once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Files, directories and links, sorted by path.
    pub entries: Vec<Entry>,
}

/// One entry of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Relative path, `/`-separated.
    pub path: String,
    /// A regular file: the hex SHA-256 of its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A regular file's size, bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub size: u64,
    /// A regular file that is executable (written mode 0755, else 0644).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub executable: bool,
    /// A symbolic link: its target (relative, inside the directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a job was given of its working directory: the manifest's digest, files and bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Upload {
    /// `sha256:` and the hex SHA-256 of the manifest's canonical JSON.
    pub digest: String,
    /// Regular files in it.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Which of these file digests does the server not hold for the team yet?
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MissingRequest {
    /// Hex SHA-256 digests (at most [`MAX_ENTRIES`]).
    pub digests: Vec<String>,
}

/// The digests to upload, and the server's cap on a working directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MissingResponse {
    /// Those of the request the server does not hold for the team.
    pub missing: Vec<String>,
    /// Most bytes a manifest's files may add up to.
    pub limit_bytes: u64,
}

impl Entry {
    /// A regular file.
    pub fn file(path: impl Into<String>, sha256: impl Into<String>, size: u64, executable: bool) -> Self {
        Self { path: path.into(), sha256: Some(sha256.into()), size, executable, link: None }
    }

    /// A directory (written even when empty).
    pub fn dir(path: impl Into<String>) -> Self {
        Self { path: path.into(), sha256: None, size: 0, executable: false, link: None }
    }

    /// A symbolic link to `target`.
    pub fn link(path: impl Into<String>, target: impl Into<String>) -> Self {
        Self { path: path.into(), sha256: None, size: 0, executable: false, link: Some(target.into()) }
    }

    /// Whether it is a directory (neither a file nor a link).
    pub fn is_dir(&self) -> bool {
        self.sha256.is_none() && self.link.is_none()
    }
}

impl Manifest {
    /// The digest a job refers to: `sha256:` and the SHA-256 of the compact JSON.
    pub fn digest(&self) -> String {
        let json = serde_json::to_vec(self).expect("a manifest always serialises");
        format!("sha256:{}", hex_sha256(&json))
    }

    /// The regular files' digests, each once.
    pub fn digests(&self) -> Vec<String> {
        let mut out: Vec<String> = self.entries.iter().filter_map(|e| e.sha256.clone()).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Checks the manifest as the module doc says (with `limit` bytes of files at most) and
    /// returns what a job records of it. The error is a sentence naming the entry.
    pub fn check(&self, limit: u64) -> Result<Upload, String> {
        if self.entries.len() > MAX_ENTRIES {
            return Err(format!(
                "the working directory has {} entries, more than {MAX_ENTRIES}",
                self.entries.len()
            ));
        }
        let mut kinds: BTreeMap<&str, Kind> = BTreeMap::new();
        let (mut files, mut bytes) = (0u64, 0u64);
        for pair in self.entries.windows(2) {
            if pair[0].path >= pair[1].path {
                return Err(format!("`{}`: entries must be sorted by path, each once", pair[1].path));
            }
        }
        for e in &self.entries {
            check_path(&e.path)?;
            let kind = match (&e.sha256, &e.link) {
                (Some(_), Some(_)) => {
                    return Err(format!("`{}`: an entry is a file or a link, not both", e.path));
                }
                (Some(d), None) if !is_hex_sha256(d) => {
                    return Err(format!("`{}`: sha256 must be 64 lowercase hex digits", e.path));
                }
                (Some(_), None) => Kind::File,
                (None, Some(_)) => Kind::Link,
                (None, None) => Kind::Dir,
            };
            if kind != Kind::File && (e.size != 0 || e.executable) {
                return Err(format!("`{}`: only a file has a size or an executable bit", e.path));
            }
            if kind == Kind::File {
                files += 1;
                bytes = bytes.saturating_add(e.size);
            }
            kinds.insert(&e.path, kind);
        }
        if bytes > limit {
            return Err(over_limit(bytes, limit));
        }
        for e in &self.entries {
            under_file_or_link(&e.path, &kinds)?;
            if let Some(target) = &e.link {
                check_link(&e.path, target, &kinds)?;
            }
        }
        Ok(Upload { digest: self.digest(), files, bytes })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Link,
}

/// The sentence for a working directory over the cap: its size, the cap, what to do instead.
pub fn over_limit(bytes: u64, limit: u64) -> String {
    format!(
        "the working directory is {}, over the upload cap of {}; declare large files as inputs \
         (--input NAME=URL), leave them out with .gantryignore, or pass --no-upload",
        human_bytes(bytes),
        human_bytes(limit)
    )
}

/// Bytes in binary units for people: `1.5 MiB`, `312 B`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// Hex SHA-256 of `bytes`.
pub fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `text` is 64 lowercase hex digits.
pub fn is_hex_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A manifest digest (`sha256:` and 64 hex digits) as its hex part.
pub fn manifest_hex(digest: &str) -> Option<&str> {
    digest.strip_prefix("sha256:").filter(|h| is_hex_sha256(h))
}

fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_PATH {
        return Err(format!("a path must be 1 to {MAX_PATH} bytes, not {}", path.len()));
    }
    if path.starts_with('/') {
        return Err(format!("`{path}` is an absolute path; the working directory holds relative ones only"));
    }
    for part in path.split('/') {
        match part {
            "" | "." => return Err(format!("`{path}` has an empty or `.` part")),
            ".." => return Err(format!("`{path}` climbs out of the working directory with `..`")),
            p if p.chars().any(char::is_control) => {
                return Err(format!("{path:?} holds a control character"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Refuses a path one of whose parents is a file or a link of the manifest.
fn under_file_or_link(path: &str, kinds: &BTreeMap<&str, Kind>) -> Result<(), String> {
    let mut end = 0;
    while let Some(i) = path[end..].find('/') {
        let parent = &path[..end + i];
        if matches!(kinds.get(parent), Some(Kind::File | Kind::Link)) {
            return Err(format!("`{path}` lies under `{parent}`, which is not a directory"));
        }
        end += i + 1;
    }
    Ok(())
}

/// Refuses a link whose target, read from its directory, leaves the root or crosses a link.
fn check_link(path: &str, target: &str, kinds: &BTreeMap<&str, Kind>) -> Result<(), String> {
    let outside = || format!("`{path}` is a link to `{target}`, outside the working directory");
    if target.is_empty() || target.len() > MAX_PATH || target.starts_with('/') {
        return Err(outside());
    }
    if target.chars().any(char::is_control) {
        return Err(format!("`{path}`: its link target holds a control character"));
    }
    let mut at: Vec<&str> = path.split('/').collect();
    at.pop();
    let parts: Vec<&str> = target.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    for (i, part) in parts.iter().enumerate() {
        if *part == ".." {
            at.pop().ok_or_else(outside)?;
            continue;
        }
        at.push(part);
        let last = i + 1 == parts.len();
        if !last && kinds.get(at.join("/").as_str()) == Some(&Kind::Link) {
            return Err(format!("`{path}` is a link to `{target}`, which passes through another link"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
