//! Uploaded working directories, kept per team under `<data>/uploads/<team>/`: `blobs/<sha256>`
//! (one file's bytes, named by their digest) and `manifests/<sha256>.json` (a
//! [`Manifest`], named by the digest of its canonical JSON).
//!
//! Storage is per team on purpose: a digest is a question anyone can ask ("do you hold the
//! file with this hash?"), so a shared store would tell one team what another uploaded. Here a
//! team's questions reach its own directory only, and another team's token finds nothing
//! (404), the same answer as for a digest never uploaded.
//!
//! Nothing is trusted from the client: a blob is hashed as it is written and refused unless it
//! has the digest it claims; a manifest is checked ([`Manifest::check`]: paths inside, links
//! inside, under the cap) and refused unless the team holds every blob it names, with the size
//! it says. Writes go to a temporary name and are renamed into place, so a reader never sees
//! half a file.
//!
//! [`Uploads::sweep`] (every minute, with the output sweep) deletes what no kept job needs: a
//! manifest is kept while a job refers to it whose output is kept (not ended, or ended within
//! the retention window), or for [`GRACE`] after it was last written or confirmed (a client
//! between posting it and submitting); a blob is kept while a kept manifest names it, or for
//! [`GRACE`] after it was written (a client still uploading the rest).

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use gantry_api::upload::{self, Manifest, Upload};
use gantry_store::Store;

/// How long an upload no job refers to is kept.
pub const GRACE: Duration = Duration::from_secs(3600);

/// Why an upload was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The request is wrong (a bad digest, an unsafe manifest, a blob that is not what it says).
    #[error("{0}")]
    Refused(String),
    /// The team holds no such upload.
    #[error("{0}")]
    NotFound(String),
    /// A blob passes the cap on a working directory (413).
    #[error("{0}")]
    TooLarge(String),
    /// The team's uploads would pass its quota (507).
    #[error("{0}")]
    QuotaFull(String),
    /// Reading or writing the upload directory failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Bytes of files one team's uploads may hold by default: 4 GiB.
pub const DEFAULT_TEAM_QUOTA: u64 = 4 << 30;

/// The uploads directory.
#[derive(Debug)]
pub struct Uploads {
    root: PathBuf,
    limit: u64,
    /// Most bytes of files one team's uploads may hold on the server's disk.
    team_quota: u64,
    /// The bytes of each team's files as last counted and since added (counted again after a
    /// sweep).
    held: std::sync::Mutex<HashMap<String, u64>>,
    /// Room each team's uploads in progress have taken (their declared length, else the cap),
    /// shared with each [`BlobWriter`] and given back when it ends.
    reserved: std::sync::Arc<std::sync::Mutex<HashMap<String, u64>>>,
    /// The file digests of recently read manifests, by team and manifest digest: an agent
    /// fetching an upload's files asks for each one, and reading the manifest per file would
    /// make a large upload quadratic.
    names: std::sync::Mutex<HashMap<(String, String), Names>>,
}

/// The file digests one manifest names.
type Names = std::sync::Arc<HashSet<String>>;

/// Manifests whose file digests are kept in memory at most.
const NAMES_KEPT: usize = 64;

impl Uploads {
    /// Uploads under `root` (`<data>/uploads`), manifests of at most `limit` bytes of files.
    pub fn new(root: PathBuf, limit: u64) -> Self {
        Self {
            root,
            limit,
            team_quota: DEFAULT_TEAM_QUOTA,
            held: Default::default(),
            reserved: Default::default(),
            names: Default::default(),
        }
    }

    /// The same, each team holding at most `bytes` of files (`--upload-team-quota`).
    pub fn with_team_quota(mut self, bytes: u64) -> Self {
        self.team_quota = bytes;
        self
    }

    /// The bytes of the team's files now (counted once, then kept up to date).
    fn held_by(&self, team: &str) -> Result<u64, UploadError> {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = held.get(team) {
            return Ok(*n);
        }
        let dir = self.team_dir(team)?.join("blobs");
        let n = listing(&dir).iter().filter_map(|(p, _)| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
        held.insert(team.to_owned(), n);
        Ok(n)
    }

    /// Whether the team's manifest `digest` names the file `sha256`.
    pub fn names(&self, team: &str, digest: &str, sha256: &str) -> Result<bool, UploadError> {
        let key = (team.to_owned(), digest.to_owned());
        let cached = self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).cloned();
        let names = match cached {
            Some(names) => names,
            None => {
                let names = std::sync::Arc::new(self.manifest(team, digest)?.digests().into_iter().collect());
                let mut kept = self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if kept.len() >= NAMES_KEPT {
                    kept.clear();
                }
                kept.insert(key, std::sync::Arc::clone(&names));
                names
            }
        };
        Ok(names.contains(sha256))
    }

    /// Most bytes a manifest's files may add up to.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    fn team_dir(&self, team: &str) -> Result<PathBuf, UploadError> {
        let safe = !team.is_empty()
            && !team.starts_with('.')
            && team.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !safe {
            return Err(UploadError::Refused(format!("team: `{team}` is not a team name")));
        }
        Ok(self.root.join(team))
    }

    fn blob_path(&self, team: &str, sha256: &str) -> Result<PathBuf, UploadError> {
        if !upload::is_hex_sha256(sha256) {
            return Err(UploadError::Refused(format!(
                "`{sha256}` is not a SHA-256 digest (64 lowercase hex digits)"
            )));
        }
        Ok(self.team_dir(team)?.join("blobs").join(sha256))
    }

    fn manifest_path(&self, team: &str, digest: &str) -> Result<PathBuf, UploadError> {
        let hex = upload::manifest_hex(digest).ok_or_else(|| {
            UploadError::Refused(format!("`{digest}` is not a manifest digest (`sha256:` and 64 hex digits)"))
        })?;
        Ok(self.team_dir(team)?.join("manifests").join(format!("{hex}.json")))
    }

    /// The digests of `digests` the team does not hold; those it holds count as used now (so
    /// the sweep keeps them for the client about to refer to them).
    pub fn missing(&self, team: &str, digests: &[String]) -> Result<Vec<String>, UploadError> {
        self.team_dir(team)?;
        let mut out = Vec::new();
        for d in digests {
            let path = self.blob_path(team, d)?;
            if !touch(&path) {
                out.push(d.clone());
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Keeps `bytes` as the team's blob `sha256`, refused unless they hash to it.
    pub fn put_blob(&self, team: &str, sha256: &str, bytes: &[u8]) -> Result<(), UploadError> {
        let mut writer = self.blob_writer(team, sha256, Some(bytes.len() as u64))?;
        writer.write(bytes)?;
        self.finish_blob(writer)
    }

    /// Starts receiving the team's blob `sha256` of `declared` bytes (`None`: not said; the cap
    /// is reserved) into a temporary file: refused at once when the declared size passes the
    /// cap or the team's quota (counting the room its other uploads in progress took).
    pub fn blob_writer(
        &self,
        team: &str,
        sha256: &str,
        declared: Option<u64>,
    ) -> Result<BlobWriter, UploadError> {
        let path = self.blob_path(team, sha256)?;
        if let Some(n) = declared
            && n > self.limit
        {
            return Err(UploadError::TooLarge(upload::over_limit(n, self.limit)));
        }
        let room = declared.unwrap_or(self.limit);
        let held = self.held_by(team)?;
        {
            let mut reserved = self.reserved.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let taken = reserved.entry(team.to_owned()).or_default();
            if !path.exists() && held + *taken + room > self.team_quota {
                return Err(self.quota_full(team, held + *taken, room));
            }
            *taken += room;
        }
        let reservation =
            Reservation { of: std::sync::Arc::clone(&self.reserved), team: team.to_owned(), room };
        let dir = path.parent().expect("a blob path has a directory");
        std::fs::create_dir_all(dir).map_err(|e| io(&format!("creating {}", dir.display()), e))?;
        let tmp = dir.join(format!(".tmp-{}-{}", std::process::id(), unique()));
        let file =
            std::fs::File::create_new(&tmp).map_err(|e| io(&format!("creating {}", tmp.display()), e))?;
        Ok(BlobWriter {
            file,
            tmp,
            path,
            team: team.to_owned(),
            sha256: sha256.to_owned(),
            hasher: <sha2::Sha256 as sha2::Digest>::new(),
            written: 0,
            limit: self.limit,
            _reservation: reservation,
        })
    }

    /// Keeps what `writer` received as its blob, refused unless it hashes to the digest it
    /// names and fits the team's quota.
    pub fn finish_blob(&self, mut writer: BlobWriter) -> Result<(), UploadError> {
        let digest = sha2::Digest::finalize_reset(&mut writer.hasher);
        let got: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        if got != writer.sha256 {
            return Err(UploadError::Refused(format!("the body's SHA-256 is {got}, not {}", writer.sha256)));
        }
        writer.file.sync_all().map_err(|e| io(&format!("writing {}", writer.tmp.display()), e))?;
        if writer.path.exists() {
            // Held already: the same bytes again take no more room.
            return writer.rename();
        }
        let (team, adding) = (writer.team.clone(), writer.written);
        let held = self.held_by(&team)?;
        let others = {
            let reserved = self.reserved.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            reserved.get(&team).copied().unwrap_or(0).saturating_sub(writer._reservation.room)
        };
        if held + others + adding > self.team_quota {
            return Err(self.quota_full(&team, held + others, adding));
        }
        writer.rename()?;
        *self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(team).or_default() +=
            adding;
        Ok(())
    }

    fn quota_full(&self, team: &str, held: u64, adding: u64) -> UploadError {
        UploadError::QuotaFull(format!(
            "team {team}'s uploads hold {} of its {}; this file adds {}: files no job uses are removed an hour after they were sent",
            upload::human_bytes(held),
            upload::human_bytes(self.team_quota),
            upload::human_bytes(adding)
        ))
    }

    /// Checks `manifest` and that the team holds each of its files with the size it says, then
    /// keeps it; returns what a job records of it.
    pub fn put_manifest(&self, team: &str, manifest: &Manifest) -> Result<Upload, UploadError> {
        let summary = manifest.check(self.limit).map_err(UploadError::Refused)?;
        for e in &manifest.entries {
            let Some(d) = &e.sha256 else { continue };
            let path = self.blob_path(team, d)?;
            match std::fs::metadata(&path) {
                Ok(m) if m.len() == e.size => {}
                Ok(m) => {
                    return Err(UploadError::Refused(format!(
                        "`{}`: the manifest says {} bytes, the uploaded file has {}",
                        e.path,
                        e.size,
                        m.len()
                    )));
                }
                Err(_) => {
                    return Err(UploadError::Refused(format!("`{}`: its file {d} was not uploaded", e.path)));
                }
            }
        }
        let path = self.manifest_path(team, &summary.digest)?;
        let json = serde_json::to_vec(manifest).map_err(|e| io("encoding the manifest", e.into()))?;
        write_atomically(&path, &json)?;
        Ok(summary)
    }

    /// The team's manifest `digest`.
    pub fn manifest(&self, team: &str, digest: &str) -> Result<Manifest, UploadError> {
        let path = self.manifest_path(team, digest)?;
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(UploadError::NotFound(format!(
                    "upload {digest} not found (an upload of your team)"
                )));
            }
            Err(e) => return Err(io(&format!("reading {}", path.display()), e)),
        };
        let manifest: Manifest = serde_json::from_slice(&text)
            .map_err(|e| io(&format!("reading {}", path.display()), std::io::Error::other(e)))?;
        touch(&path);
        Ok(manifest)
    }

    /// Checks that `upload` is what the team's manifest of that digest holds.
    pub fn confirm(&self, team: &str, upload: &Upload) -> Result<(), UploadError> {
        let manifest = self.manifest(team, &upload.digest)?;
        let summary = manifest.check(u64::MAX).map_err(UploadError::Refused)?;
        if (summary.files, summary.bytes) != (upload.files, upload.bytes) {
            return Err(UploadError::Refused(format!(
                "upload: {} holds {} files and {} bytes, not {} and {}",
                upload.digest, summary.files, summary.bytes, upload.files, upload.bytes
            )));
        }
        Ok(())
    }

    /// The team's blob `sha256`, for an agent to fetch.
    pub fn blob(&self, team: &str, sha256: &str) -> Result<std::fs::File, UploadError> {
        let path = self.blob_path(team, sha256)?;
        std::fs::File::open(&path).map_err(|_| UploadError::NotFound(format!("file {sha256} not found")))
    }

    /// Deletes what no kept job needs (module doc); returns the files deleted.
    pub fn sweep(&self, store: &dyn Store, now_ms: i64, retention: Duration) -> usize {
        let Ok(jobs) = store.jobs(&gantry_store::JobFilter::default()) else { return 0 };
        let cutoff = now_ms.saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        let mut kept: HashMap<String, HashSet<String>> = HashMap::new();
        for j in jobs {
            let expired = j.state.is_terminal() && j.finished_at.is_some_and(|t| t < cutoff);
            if let (Some(u), false) = (j.upload, expired)
                && let Some(hex) = upload::manifest_hex(&u.digest)
            {
                kept.entry(j.team).or_default().insert(hex.to_owned());
            }
        }
        // A service's directory is kept while the service is (its next replica starts in it).
        let Ok(services) = store.services(None) else { return 0 };
        for svc in services {
            if let Some(hex) = svc.spec.upload.as_ref().and_then(|u| upload::manifest_hex(&u.digest)) {
                kept.entry(svc.team).or_default().insert(hex.to_owned());
            }
        }
        // Counted again from the disk after what the sweep removes.
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        let Ok(teams) = std::fs::read_dir(&self.root) else { return 0 };
        let mut removed = 0;
        for team in teams.flatten() {
            let name = team.file_name().to_string_lossy().into_owned();
            removed += self.sweep_team(&team.path(), kept.get(&name).cloned().unwrap_or_default());
        }
        removed
    }

    fn sweep_team(&self, dir: &Path, referenced: HashSet<String>) -> usize {
        let mut removed = 0;
        let mut needed: HashSet<String> = HashSet::new();
        for (path, name) in listing(&dir.join("manifests")) {
            let hex = name.trim_end_matches(".json").to_owned();
            if referenced.contains(&hex) || young(&path) {
                let manifest =
                    std::fs::read(&path).ok().and_then(|t| serde_json::from_slice::<Manifest>(&t).ok());
                needed.extend(manifest.map(|m| m.digests()).unwrap_or_default());
            } else if std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
        for (path, name) in listing(&dir.join("blobs")) {
            if !needed.contains(&name) && !young(&path) && std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// A blob being received: written to a temporary file beside its place and hashed as it
/// arrives, so a body never has to fit in memory. Dropped unfinished, the file goes.
#[derive(Debug)]
pub struct BlobWriter {
    file: std::fs::File,
    tmp: PathBuf,
    path: PathBuf,
    team: String,
    sha256: String,
    hasher: sha2::Sha256,
    written: u64,
    limit: u64,
    _reservation: Reservation,
}

impl BlobWriter {
    /// Appends `bytes`; refused once the blob passes the cap.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), UploadError> {
        self.written += bytes.len() as u64;
        if self.written > self.limit {
            return Err(UploadError::TooLarge(upload::over_limit(self.written, self.limit)));
        }
        sha2::Digest::update(&mut self.hasher, bytes);
        self.file.write_all(bytes).map_err(|e| io(&format!("writing {}", self.tmp.display()), e))
    }

    /// Bytes received so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    fn rename(self) -> Result<(), UploadError> {
        std::fs::rename(&self.tmp, &self.path).map_err(|e| io(&format!("writing {}", self.path.display()), e))
        // `drop` then finds no temporary file to remove.
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// Room an upload in progress holds of its team's quota, given back when dropped.
#[derive(Debug)]
struct Reservation {
    of: std::sync::Arc<std::sync::Mutex<HashMap<String, u64>>>,
    team: String,
    room: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut reserved = self.of.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = reserved.get_mut(&self.team) {
            *n = n.saturating_sub(self.room);
            if *n == 0 {
                reserved.remove(&self.team);
            }
        }
    }
}

fn io(what: &str, source: std::io::Error) -> UploadError {
    UploadError::Io { what: what.to_owned(), source }
}

/// Writes `bytes` to a temporary file beside `path`, then renames it there.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), UploadError> {
    let dir = path.parent().expect("an upload path has a directory");
    std::fs::create_dir_all(dir).map_err(|e| io(&format!("creating {}", dir.display()), e))?;
    let tmp = dir.join(format!(".tmp-{}-{}", std::process::id(), unique()));
    let written = std::fs::File::create_new(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    let result = written.and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(&format!("writing {}", path.display()), e));
    }
    Ok(())
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Sets the file's modification time to now; false when it does not exist.
// reason: a file's mtime is the file system's wall clock, compared with the same clock by the
// sweep (`SystemTime` of the file's metadata), not a scheduling time.
#[allow(clippy::disallowed_methods)]
fn touch(path: &Path) -> bool {
    std::fs::File::options().append(true).open(path).and_then(|f| f.set_modified(SystemTime::now())).is_ok()
}

/// Whether the file was written or confirmed within [`GRACE`].
fn young(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < GRACE)
}

/// The plain files of `dir` (temporary ones too once they are old), with their names.
fn listing(dir: &Path) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| (e.path(), e.file_name().to_string_lossy().into_owned()))
        .collect()
}

#[cfg(test)]
mod tests;
