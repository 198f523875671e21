//! The node-local dataset cache: declared inputs, content-addressed per team (issue 22).
//!
//! An entry is keyed by its team, its source URL and the source's version (an S3 listing's
//! ETags, an HTTP ETag, or the SHA-256 of a file's bytes): a changed source is a new entry, an
//! unchanged one is found again, so a second job reading the same dataset starts with no copy.
//! On disk, under the agent's work root:
//!
//! ```text
//! <work>/<scope>.cache/            0711 root
//!   <team hash>/                   0750 root:<team's group>  (another team cannot enter)
//!     <key>/ or <key>              the data, read-only (dirs 0555, files 0444, owned by root)
//!     <key>.json                   url, version, bytes, last use, hits
//!     .tmp-<key>-<n>               a copy in progress
//! ```
//!
//! A copy is written under a temporary name and renamed into place only once complete and made
//! read-only, so a failed or interrupted copy is never visible as cached (and the next start
//! of the agent removes what one left). Room is reserved before a copy starts, for the size
//! the source declares: under the node's `--cache-size` and the team's quota, evicting the
//! least recently used entries that no running job uses; a source that declares more than
//! either limit is refused before a byte is copied, and the copier stops a source that sends
//! more than it declared (see `super::stage`). Teams never share an entry of a private source:
//! a digest names no other team's data. The sources an admin marked public are cached once per
//! node in one more scope, [`PUBLIC_SCOPE`], whose directory every team's user may enter
//! (0755); its entries count against that scope's quota, not a team's.

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use gantry_api::inputs::{CacheEntry, PUBLIC_SCOPE};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The cache's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Most bytes the node's cache holds (`--cache-size`).
    pub size_bytes: u64,
    /// Most bytes one team's entries hold (`--cache-team-quota`).
    pub team_quota_bytes: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self { size_bytes: 100 << 30, team_quota_bytes: 50 << 30 }
    }
}

/// Why the cache could not take an entry.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// It does not fit even with everything unused evicted.
    #[error("{0}")]
    Full(String),
    /// The disk refused.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    team: String,
    url: String,
    version: String,
    bytes: u64,
    last_used_ms: i64,
    hits: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<(String, String), Meta>,
    in_use: HashMap<(String, String), u32>,
    /// Bytes reserved by copies in progress, per team.
    reserved: HashMap<String, u64>,
    tmp_seq: u64,
}

/// The cache (see the module documentation).
#[derive(Debug)]
pub struct Cache {
    root: PathBuf,
    config: CacheConfig,
    inner: Mutex<Inner>,
}

/// Room reserved for one copy; given back when dropped.
#[derive(Debug)]
pub struct Reservation<'c> {
    cache: &'c Cache,
    team: String,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut inner = self.cache.lock();
        if let Some(r) = inner.reserved.get_mut(&self.team) {
            *r = r.saturating_sub(self.bytes);
        }
    }
}

/// An entry's key: the hex SHA-256 of its source and version.
pub fn key(url: &str, version: &str) -> String {
    let digest = Sha256::digest(format!("{url}\n{version}").as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

fn team_dir_name(team: &str) -> String {
    Sha256::digest(team.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> CacheError {
    move |source| CacheError::Io { what, source }
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

impl Cache {
    /// Opens the cache at `root` (made when missing): reads the entries a previous run left and
    /// removes copies it did not finish.
    pub fn open(root: &Path, config: CacheConfig) -> Result<Self, CacheError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(root)
            .map_err(io(format!("creating {}", root.display())))?;
        let mut inner = Inner::default();
        for team_dir in std::fs::read_dir(root).map_err(io(format!("reading {}", root.display())))?.flatten()
        {
            for f in std::fs::read_dir(team_dir.path()).into_iter().flatten().flatten() {
                let (path, name) = (f.path(), f.file_name().to_string_lossy().into_owned());
                if name.starts_with(".tmp-") {
                    remove_any(&path);
                    continue;
                }
                let Some(key) = name.strip_suffix(".json") else { continue };
                let meta = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Meta>(&b).ok());
                match meta {
                    Some(m) if team_dir.path().join(key).exists() => {
                        inner.entries.insert((m.team.clone(), key.to_owned()), m);
                    }
                    _ => remove_any(&path),
                }
            }
        }
        Ok(Self { root: root.to_owned(), config, inner: Mutex::new(inner) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The limits.
    pub fn config(&self) -> CacheConfig {
        self.config
    }

    /// `team`'s directory, made when missing, readable by `gid` (the team's jobs) only; the
    /// public scope's ([`PUBLIC_SCOPE`]) by everyone.
    pub fn team_dir(&self, team: &str, gid: Option<u32>) -> Result<PathBuf, CacheError> {
        let dir = self.root.join(team_dir_name(team));
        let what = || format!("creating {}", dir.display());
        let public = team == PUBLIC_SCOPE;
        let mode = if public { 0o755 } else { 0o750 };
        // Two stagings of one team may make it at once: the one that loses finds it made.
        match std::fs::DirBuilder::new().mode(mode).create(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io(what())(e)),
            _ => {}
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).map_err(io(what()))?;
        if let Some(gid) = gid.filter(|_| !public) {
            std::os::unix::fs::chown(&dir, None, Some(gid)).map_err(io(what()))?;
        }
        Ok(dir)
    }

    /// The data of `team`'s entry for `url` at `version`, counted as a hit, if cached.
    pub fn lookup(&self, team: &str, url: &str, version: &str) -> Option<(PathBuf, u64)> {
        let k = key(url, version);
        let mut inner = self.lock();
        let meta = inner.entries.get_mut(&(team.to_owned(), k.clone()))?;
        meta.hits += 1;
        meta.last_used_ms = now_ms();
        let meta = meta.clone();
        drop(inner);
        let dir = self.root.join(team_dir_name(team));
        self.write_meta(&dir, &k, &meta);
        Some((dir.join(&k), meta.bytes))
    }

    /// Reserves `bytes` for a copy of `team`'s, evicting unused entries, least recently used
    /// first, until both limits hold; refused when they cannot.
    pub fn reserve(&self, team: &str, bytes: u64) -> Result<Reservation<'_>, CacheError> {
        let c = self.config;
        if bytes > c.team_quota_bytes || bytes > c.size_bytes {
            return Err(CacheError::Full(format!(
                "{} declared, over the cache's limits (team quota {}, node cache {})",
                human(bytes),
                human(c.team_quota_bytes),
                human(c.size_bytes)
            )));
        }
        let mut inner = self.lock();
        loop {
            let (total, team_total) = inner.totals(team);
            let node_over = total + bytes > c.size_bytes;
            let team_over = team_total + bytes > c.team_quota_bytes;
            if !node_over && !team_over {
                break;
            }
            let victim = inner
                .entries
                .iter()
                .filter(|(k, _)| !inner.in_use.contains_key(*k))
                .filter(|(k, _)| node_over || k.0 == team)
                .min_by_key(|(_, m)| m.last_used_ms)
                .map(|(k, _)| k.clone());
            let Some(victim) = victim else {
                return Err(CacheError::Full(format!(
                    "{} does not fit: the cache's entries in use hold the room (team quota {}, node cache {})",
                    human(bytes),
                    human(c.team_quota_bytes),
                    human(c.size_bytes)
                )));
            };
            inner.entries.remove(&victim);
            let dir = self.root.join(team_dir_name(&victim.0));
            tracing::info!(team = %victim.0, key = %victim.1, "evicted a dataset from the cache");
            remove_any(&dir.join(format!("{}.json", victim.1)));
            remove_any(&dir.join(&victim.1));
        }
        *inner.reserved.entry(team.to_owned()).or_default() += bytes;
        Ok(Reservation { cache: self, team: team.to_owned(), bytes })
    }

    /// A new temporary path in `dir` for a copy of `url` at `version`.
    pub fn tmp_path(&self, dir: &Path, url: &str, version: &str) -> PathBuf {
        let mut inner = self.lock();
        inner.tmp_seq += 1;
        dir.join(format!(".tmp-{}-{}-{}", key(url, version), std::process::id(), inner.tmp_seq))
    }

    /// Makes the complete copy at `tmp` read-only and renames it into place as `team`'s entry.
    pub fn commit(
        &self,
        _room: Reservation<'_>,
        team: &str,
        url: &str,
        version: &str,
        tmp: &Path,
        bytes: u64,
    ) -> Result<PathBuf, CacheError> {
        let k = key(url, version);
        let dir = tmp.parent().map_or_else(|| self.root.clone(), Path::to_owned);
        make_read_only(tmp).map_err(io(format!("sealing {}", tmp.display())))?;
        let data = dir.join(&k);
        remove_any(&data);
        std::fs::rename(tmp, &data).map_err(io(format!("renaming {} into place", tmp.display())))?;
        let meta = Meta {
            team: team.to_owned(),
            url: url.to_owned(),
            version: version.to_owned(),
            bytes,
            last_used_ms: now_ms(),
            hits: 0,
        };
        self.write_meta(&dir, &k, &meta);
        self.lock().entries.insert((team.to_owned(), k), meta);
        Ok(data)
    }

    fn write_meta(&self, dir: &Path, key: &str, meta: &Meta) {
        let path = dir.join(format!("{key}.json"));
        let tmp = dir.join(format!(".tmp-{key}.json"));
        let ok = serde_json::to_vec(meta)
            .ok()
            .is_some_and(|b| std::fs::write(&tmp, b).is_ok() && std::fs::rename(&tmp, &path).is_ok());
        if !ok {
            tracing::warn!(path = %path.display(), "could not write a cache entry's record");
        }
    }

    /// A job uses `team`'s entry for `url` at `version`: it is not evicted until released.
    pub fn pin(&self, team: &str, url: &str, version: &str) {
        *self.lock().in_use.entry((team.to_owned(), key(url, version))).or_default() += 1;
    }

    /// A job no longer uses the entry.
    pub fn unpin(&self, team: &str, url: &str, version: &str) {
        let mut inner = self.lock();
        let k = (team.to_owned(), key(url, version));
        if let Some(n) = inner.in_use.get_mut(&k) {
            *n -= 1;
            if *n == 0 {
                inner.in_use.remove(&k);
            }
        }
    }

    /// Every entry, by team and URL (`gantry cache`).
    pub fn entries(&self) -> Vec<CacheEntry> {
        let inner = self.lock();
        let mut out: Vec<CacheEntry> = inner
            .entries
            .iter()
            .map(|(k, m)| CacheEntry {
                node: String::new(),
                team: m.team.clone(),
                url: m.url.clone(),
                version: m.version.clone(),
                bytes: m.bytes,
                last_used_ms: m.last_used_ms,
                hits: m.hits,
                in_use: inner.in_use.get(k).copied().unwrap_or(0),
            })
            .collect();
        out.sort_by(|a, b| (&a.team, &a.url).cmp(&(&b.team, &b.url)));
        out
    }
}

impl Inner {
    /// Bytes held and reserved on the node, and by `team`.
    fn totals(&self, team: &str) -> (u64, u64) {
        let held: u64 = self.entries.values().map(|m| m.bytes).sum();
        let team_held: u64 = self.entries.values().filter(|m| m.team == team).map(|m| m.bytes).sum();
        let reserved: u64 = self.reserved.values().sum();
        (held + reserved, team_held + self.reserved.get(team).copied().unwrap_or(0))
    }
}

/// `bytes` in the largest binary unit below it, one decimal.
pub fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{bytes} B") } else { format!("{v:.1} {}", units[u]) }
}

/// Directories 0555 and files 0444, below and including `path` (links untouched).
fn make_read_only(path: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            make_read_only(&entry?.path())?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o555))
    } else if meta.is_file() {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444))
    } else {
        Ok(())
    }
}

/// Removes a file or a directory tree, read-only ones too.
pub fn remove_any(path: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return };
    if meta.is_dir() {
        let _ = make_writable(path);
        let _ = std::fs::remove_dir_all(path);
    } else {
        let _ = std::fs::remove_file(path);
    }
}

fn make_writable(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path)?.is_dir() {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
        for entry in std::fs::read_dir(path)? {
            make_writable(&entry?.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
