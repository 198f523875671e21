//! A job's uploaded working directory, written out before the job starts.
//!
//! The assignment names the upload by its manifest's digest. The agent fetches the manifest
//! over its own authenticated channel (`GET /v1/agent/jobs/{id}/upload`, which the server
//! answers only for a job placed on this node), checks that it is the one the assignment names
//! and that it is safe to write ([`Manifest::check`]: the server is not trusted either), then
//! fetches each file and keeps it only if its bytes have the digest and size the manifest
//! says. Everything is written as the agent into a staging directory of its own (mode 0700,
//! beside the work directories), files created new (never opened through an existing name),
//! directories first, links last, so no write can follow a link the manifest made. Only once
//! it is complete does [`super::sandbox::Sandbox::make_workdir`] rename it into place and give
//! it to the job's user; a failed fetch leaves nothing behind.

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use gantry_api::types::Assignment;
use gantry_api::upload::{self, Manifest};

use super::client::Client;
use super::error::AgentError;

/// Longest one file's download may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(600);

/// Fetches `a`'s upload into `staging` (made new); returns its bytes. On error, `staging` is
/// removed.
pub async fn fetch(client: &Client, a: &Assignment, staging: &Path) -> Result<u64, AgentError> {
    let result = fetch_into(client, a, staging).await;
    if result.is_err() {
        super::sandbox::remove_dir(staging);
    }
    result
}

async fn fetch_into(client: &Client, a: &Assignment, staging: &Path) -> Result<u64, AgentError> {
    let Some(want) = &a.upload else { return Ok(0) };
    let manifest: Manifest = client.get_json(&format!("/v1/agent/jobs/{}/upload", a.job_id)).await?;
    let summary = manifest.check(u64::MAX).map_err(AgentError::Refused)?;
    if summary.digest != want.digest {
        return Err(AgentError::Refused(format!(
            "the server sent manifest {} for upload {}",
            summary.digest, want.digest
        )));
    }
    super::sandbox::remove_dir(staging);
    std::fs::DirBuilder::new().mode(0o700).create(staging).map_err(|e| io("creating", staging, e))?;
    let mut written: HashMap<&str, PathBuf> = HashMap::new();
    for e in manifest.entries.iter().filter(|e| e.is_dir()) {
        let path = staging.join(&e.path);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&path)
            .map_err(|x| io("creating", &path, x))?;
    }
    for e in &manifest.entries {
        let Some(sha) = e.sha256.as_deref() else { continue };
        let path = staging.join(&e.path);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(|x| io("creating", parent, x))?;
        }
        let bytes = match written.get(sha) {
            Some(first) => std::fs::read(first).map_err(|x| io("reading", first, x))?.into(),
            None => {
                client.get_bytes(&format!("/v1/agent/jobs/{}/upload/{sha}", a.job_id), FILE_TIMEOUT).await?
            }
        };
        if bytes.len() as u64 != e.size || upload::hex_sha256(&bytes) != sha {
            return Err(AgentError::Refused(format!(
                "`{}`: the server sent other bytes than the upload holds",
                e.path
            )));
        }
        write_new(&path, &bytes, if e.executable { 0o755 } else { 0o644 })?;
        written.entry(sha).or_insert(path);
    }
    for e in &manifest.entries {
        if let Some(target) = &e.link {
            let path = staging.join(&e.path);
            std::os::unix::fs::symlink(target, &path).map_err(|x| io("linking", &path, x))?;
        }
    }
    Ok(summary.bytes)
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), AgentError> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| io("creating", path, e))?;
    std::io::Write::write_all(&mut file, bytes).map_err(|e| io("writing", path, e))?;
    // The umask may have taken bits away: the manifest's mode is the one the job sees.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
        .map_err(|e| io("setting the mode of", path, e))
}

fn io(what: &str, path: &Path, source: std::io::Error) -> AgentError {
    AgentError::Io { what: format!("{what} {} of the job's upload", path.display()), source }
}

/// Gives `dir` and everything in it to `uid`:`gid` (links themselves, not what they name).
pub fn chown_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    if std::fs::symlink_metadata(dir)?.is_dir() {
        for entry in std::fs::read_dir(dir)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
