//! The working directory a job starts in a copy of: packed here, uploaded by content.
//!
//! `gantry submit`, `run` and `apply` walk the directory they are run in with the rules git
//! uses (`.gitignore` files, here and above, and `.git/info/exclude`; a `.gantryignore` in the
//! same syntax on top; `.git` itself never), outside a git repository too. What must never
//! travel is left out whatever the ignore files say: the client config (it holds the token)
//! and any Gantry data directory (a `gantry up` started here keeps its store, keys and agent
//! credential in one). Sizes are added up before a byte is read, so a directory over the
//! server's cap is refused at once with its size and what to do instead.
//!
//! Each file is named by its SHA-256. The client asks which of those the team's uploads lack
//! (`POST /v1/uploads/missing`), sends only those, then the manifest; an unchanged directory
//! submitted again sends no file at all, and the line on stderr says so (`0 B new`). The paths
//! are checked here as the server and the agent check them again ([`Manifest::check`]), so a
//! link out of the directory is refused before anything is sent.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use gantry_api::upload::{self, Entry, Manifest, MissingRequest, MissingResponse, Upload};

use super::client::{Api, block_on};

/// A packed directory: its manifest and where each digest's bytes are read from.
#[derive(Debug)]
pub struct Packed {
    /// What the job will find.
    pub manifest: Manifest,
    /// One local file per digest.
    pub sources: HashMap<String, PathBuf>,
}

/// What an upload sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Files the server did not hold yet.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// Packs `root` (module doc), refused over `limit` bytes of files. `never` are paths left out
/// whatever the ignore files say (the client config).
pub fn pack(root: &Path, never: &[PathBuf], limit: u64) -> anyhow::Result<Packed> {
    let found = walk(root, never)?;
    let total: u64 = found.iter().filter(|(_, m, _)| m.is_file()).map(|(_, m, _)| m.len()).sum();
    if total > limit {
        bail!("{}", upload::over_limit(total, limit));
    }
    let mut entries = Vec::new();
    let mut sources = HashMap::new();
    let mut outside = Vec::new();
    for (rel, meta, path) in found {
        let entry = if meta.is_dir() {
            Entry::dir(rel)
        } else if meta.file_type().is_symlink() {
            let target =
                std::fs::read_link(&path).with_context(|| format!("reading the link {}", path.display()))?;
            let target =
                target.to_str().with_context(|| format!("{}: its target is not UTF-8", path.display()))?;
            if leaves(&rel, target) {
                // A virtualenv's `python` → /usr/bin/python3: the job could not follow it on
                // its node, and refusing the whole directory for it helps nobody.
                outside.push(format!("`{rel}` is a link to `{target}`, outside the directory"));
                continue;
            }
            Entry::link(rel, target)
        } else {
            let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let sha = upload::hex_sha256(&bytes);
            sources.entry(sha.clone()).or_insert(path);
            Entry::file(rel, sha, bytes.len() as u64, meta.permissions().mode() & 0o111 != 0)
        };
        entries.push(entry);
    }
    for (i, said) in outside.iter().enumerate() {
        if i == 5 {
            eprintln!("warning: {} more links leave the directory and are left out", outside.len() - 5);
            break;
        }
        eprintln!("warning: {said}: left out of the upload (list it in .gantryignore to say so)");
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest = Manifest { entries };
    manifest.check(limit).map_err(|e| anyhow::anyhow!("{e}; the job could not use it on its node"))?;
    Ok(Packed { manifest, sources })
}

/// Whether a link at `rel` (relative to the root) pointing at `target` leads outside the root,
/// read without touching the disk: an absolute target, or more `..` than the link is deep.
fn leaves(rel: &str, target: &str) -> bool {
    use std::path::Component;
    if Path::new(target).is_absolute() {
        return true;
    }
    let mut depth: i64 = Path::new(rel).parent().map_or(0, |p| p.components().count() as i64);
    for c in Path::new(target).components() {
        match c {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Everything to pack under `root`: (relative path, metadata without following links, path).
fn walk(root: &Path, never: &[PathBuf]) -> anyhow::Result<Vec<(String, std::fs::Metadata, PathBuf)>> {
    let never: Vec<PathBuf> = never.iter().filter_map(|p| p.canonicalize().ok()).collect();
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .add_custom_ignore_filename(".gantryignore")
        .filter_entry(move |e| {
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            let data_dir = is_dir && e.path().join("gantry.db").exists();
            let left_out = e.path().canonicalize().is_ok_and(|p| never.contains(&p));
            !(e.file_name() == ".git" || data_dir || left_out)
        })
        .build();
    let mut out = Vec::new();
    for entry in walker {
        let entry = entry.with_context(|| format!("reading the working directory {}", root.display()))?;
        let Ok(rel) = entry.path().strip_prefix(root) else { continue };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let rel =
            rel.to_str().with_context(|| format!("{}: the name is not UTF-8", entry.path().display()))?;
        let meta = std::fs::symlink_metadata(entry.path())
            .with_context(|| format!("reading {}", entry.path().display()))?;
        if !(meta.is_dir() || meta.is_file() || meta.file_type().is_symlink()) {
            eprintln!(
                "note: {} is left out of the upload (not a file, directory or link)",
                entry.path().display()
            );
            continue;
        }
        out.push((rel.to_owned(), meta, entry.path().to_path_buf()));
    }
    Ok(out)
}

/// Packs the current directory and uploads what the team lacks; says what it sent on stderr
/// unless `quiet`. `None` when the directory holds nothing to send.
pub fn current_dir(api: &Api, team: Option<&str>, quiet: bool) -> anyhow::Result<Option<Upload>> {
    let root = std::env::current_dir().context("reading the current directory")?;
    let never: Vec<PathBuf> = super::client::config_path().into_iter().collect();
    let packed = pack(&root, &never, upload::LIMIT_BYTES)?;
    if packed.manifest.entries.is_empty() {
        return Ok(None);
    }
    let (done, sent) = send(api, team, &packed)?;
    if !quiet {
        eprintln!(
            "uploaded {}: {} files, {} ({}); {} new in {} files",
            root.display(),
            done.files,
            upload::human_bytes(done.bytes),
            short(&done.digest),
            upload::human_bytes(sent.bytes),
            sent.files
        );
    }
    Ok(Some(done))
}

/// Sends `packed`: the files the team lacks, then the manifest.
pub fn send(api: &Api, team: Option<&str>, packed: &Packed) -> anyhow::Result<(Upload, Sent)> {
    let query = team.map(|t| format!("?team={t}")).unwrap_or_default();
    let digests = packed.manifest.digests();
    let asked: MissingResponse =
        match block_on(api.post(&format!("/v1/uploads/missing{query}"), &MissingRequest { digests }))? {
            Err(e) if super::client::ApiStatus::of(&e) == Some(404) => bail!(
                "the server at {} takes no uploads (it is older than this client); pass --no-upload",
                api.base()
            ),
            other => other?,
        };
    let total: u64 = packed.manifest.entries.iter().map(|e| e.size).sum();
    if total > asked.limit_bytes {
        bail!("{}", upload::over_limit(total, asked.limit_bytes));
    }
    let mut sent = Sent { files: 0, bytes: 0 };
    for sha in &asked.missing {
        let path =
            packed.sources.get(sha).context("the server asked for a file this upload does not hold")?;
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        if upload::hex_sha256(&bytes) != *sha {
            bail!("{} changed while it was being uploaded; submit again", path.display());
        }
        sent.bytes += bytes.len() as u64;
        sent.files += 1;
        block_on(api.put_bytes(&format!("/v1/uploads/blobs/{sha}{query}"), bytes))??;
    }
    let done: Upload = block_on(api.put_json(&format!("/v1/uploads/manifest{query}"), &packed.manifest))??;
    Ok((done, sent))
}

/// `sha256:` and the first 12 hex digits.
pub fn short(digest: &str) -> String {
    digest.chars().take(19).collect()
}

#[cfg(test)]
mod tests;
