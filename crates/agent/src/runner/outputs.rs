//! Declared outputs (stage-out, issue 22): each attempt's output directories, and their upload
//! once the attempt has ended.
//!
//! **The directories.** Before an attempt starts, [`make`] gives it `<work>/<job>-<attempt>.out`
//! (root's, mode 0711: the job can enter it, not list or rename what is in it) and in it one
//! empty directory per output, mode 0700 and owned by the job's user, named to the job by
//! `GANTRY_OUTPUT_<NAME>`. They are outside the work directory, which the shim removes as the
//! attempt ends, and are bound back into the job's mount namespace when the work root lies
//! under `/tmp`.
//!
//! **Reading as root, safely.** The agent runs as root and the directory's content is the
//! job's, so nothing is read through it that the job's user could not read: [`walk`] never
//! follows a symbolic link. It opens each directory `O_NOFOLLOW | O_DIRECTORY` and each entry
//! below an open directory through that directory's descriptor (`/proc/self/fd/N/<name>`, the
//! path-free `openat` std offers), so that no entry renamed or replaced meanwhile can lead
//! elsewhere; a file is opened `O_NOFOLLOW | O_NONBLOCK` and kept only when `fstat` of the open
//! file says it is a regular file owned by the job's user. Links, devices, pipes, sockets and
//! other users' files (a hard link to `/etc/shadow` is root's) are skipped and counted.
//!
//! **The upload** ([`upload_attempt`]) runs in a task of its own once the attempt's end is
//! recorded, so the exit (which releases its GPUs) is reported meanwhile. It reports each
//! output `uploading` (answered with the upload secret), walks it once to count (more than
//! [`MAX_BYTES`] or [`MAX_FILES`] is refused with a sentence and nothing is uploaded), walks it
//! again to upload each file to `prefix/<relative path>` (each tried [`TRIES`] times with
//! exponential back-off), removes the directories and reports each output's result.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use gantry_api::outputs::{MAX_BYTES, MAX_FILES, Output, OutputAnswer, OutputReport, OutputState};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::io::AsyncReadExt;

use super::error::AgentError;
use super::users::Identity;

/// Tries per file (the first and 5 retries), and per report to the server.
pub const TRIES: u32 = 6;

/// The first retry's wait; each next one doubles it.
const BACKOFF: Duration = Duration::from_millis(500);

/// Deepest directory nesting walked.
const MAX_DEPTH: usize = 128;

/// Files up to this size are put in one request; larger ones in parts of this size.
const PART: usize = 16 << 20;

/// An attempt's output directories: each declared output and where it is, and whose files
/// are uploaded.
#[derive(Debug, Clone)]
pub struct Dirs {
    /// `<work>/<job>-<attempt>.out`.
    pub root: PathBuf,
    /// Each output and its directory.
    pub outputs: Vec<(Output, PathBuf)>,
    /// The job's user: only its files are uploaded.
    pub uid: u32,
}

impl Dirs {
    /// The variables naming the directories, for the job's environment.
    pub fn env(&self) -> Vec<(String, String)> {
        self.outputs.iter().map(|(o, dir)| (o.env_name(), dir.display().to_string())).collect()
    }
}

/// Makes the attempt's output directories under `root` (`chown`: give them to `user`, which
/// a root agent does). None when it declares no output.
pub fn make(
    root: &Path,
    outputs: &[Output],
    user: &Identity,
    chown: bool,
) -> Result<Option<Dirs>, AgentError> {
    if outputs.is_empty() {
        return Ok(None);
    }
    let io = |what: &Path| {
        let what = format!("creating the output directory {}", what.display());
        move |source| AgentError::Io { what, source }
    };
    super::sandbox::remove_dir(root);
    std::fs::DirBuilder::new().mode(0o711).create(root).map_err(io(root))?;
    let mut dirs = Vec::new();
    for o in outputs {
        gantry_api::outputs::check(std::slice::from_ref(o)).map_err(AgentError::Refused)?;
        let dir = root.join(&o.name);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(io(&dir))?;
        if chown {
            std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).map_err(io(&dir))?;
        }
        dirs.push((o.declared(), dir));
    }
    Ok(Some(Dirs { root: root.to_owned(), outputs: dirs, uid: user.uid }))
}

/// The output directories [`make`] made for an attempt a previous run of the agent started
/// (adopted after a restart), when they are there.
pub fn existing(root: &Path, outputs: &[Output], uid: u32) -> Option<Dirs> {
    let dirs: Vec<(Output, PathBuf)> = outputs.iter().map(|o| (o.declared(), root.join(&o.name))).collect();
    let there = std::fs::symlink_metadata(root).is_ok_and(|m| m.is_dir());
    (there && !dirs.is_empty()).then(|| Dirs { root: root.to_owned(), outputs: dirs, uid })
}

/// The most an output may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Bytes.
    pub bytes: u64,
    /// Files.
    pub files: u64,
}

impl Default for Caps {
    fn default() -> Self {
        Self { bytes: MAX_BYTES, files: MAX_FILES }
    }
}

/// What a walk found: regular files of the user and their bytes, and entries skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Links, other kinds of entry and other users' files.
    pub skipped: u64,
}

/// Walks `dir` (a directory `uid` owns) without following links and hands each regular file
/// `uid` owns to `visit` (its path relative to `dir`, the open file, its size), refusing with
/// a sentence once more than `caps` is found. Blocks.
pub fn walk(
    dir: &Path,
    uid: u32,
    caps: Caps,
    visit: &mut dyn FnMut(String, File, u64) -> Result<(), String>,
) -> Result<Tally, String> {
    let root = open(dir, libc::O_DIRECTORY).map_err(|e| format!("opening {}: {e}", dir.display()))?;
    let meta = root.metadata().map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(format!("{} is not the job's directory any more", dir.display()));
    }
    let mut tally = Tally::default();
    walk_dir(&root, "", 0, uid, caps, &mut tally, visit)?;
    Ok(tally)
}

fn walk_dir(
    dir: &File,
    prefix: &str,
    depth: usize,
    uid: u32,
    caps: Caps,
    tally: &mut Tally,
    visit: &mut dyn FnMut(String, File, u64) -> Result<(), String>,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("`{prefix}` is nested deeper than {MAX_DEPTH} directories"));
    }
    let here = fd_path(dir);
    let mut names: Vec<(OsString, std::fs::FileType)> = Vec::new();
    for entry in std::fs::read_dir(&here).map_err(|e| format!("listing `{prefix}`: {e}"))? {
        let entry = entry.map_err(|e| format!("listing `{prefix}`: {e}"))?;
        let kind = entry.file_type().map_err(|e| format!("listing `{prefix}`: {e}"))?;
        names.push((entry.file_name(), kind));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in names {
        let Some(text) = name.to_str() else {
            tally.skipped += 1;
            continue;
        };
        let rel = if prefix.is_empty() { text.to_owned() } else { format!("{prefix}/{text}") };
        let path = here.join(&name);
        if kind.is_dir() {
            match open(&path, libc::O_DIRECTORY) {
                Ok(sub) if sub.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid) => {
                    walk_dir(&sub, &rel, depth + 1, uid, caps, tally, visit)?;
                }
                _ => tally.skipped += 1,
            }
            continue;
        }
        if !kind.is_file() {
            tally.skipped += 1;
            continue;
        }
        let Ok(file) = open(&path, libc::O_NONBLOCK) else {
            tally.skipped += 1;
            continue;
        };
        let meta = file.metadata().map_err(|e| format!("`{rel}`: {e}"))?;
        if !meta.is_file() || meta.uid() != uid {
            tally.skipped += 1;
            continue;
        }
        tally.files += 1;
        tally.bytes += meta.len();
        if tally.files > caps.files {
            return Err(format!("it holds more than {} files, the most one output uploads", caps.files));
        }
        if tally.bytes > caps.bytes {
            return Err(format!(
                "it holds more than {}, the most one output uploads",
                human_bytes(caps.bytes)
            ));
        }
        visit(rel, file, meta.len())?;
    }
    Ok(())
}

/// Opens `path` for reading, never following a link at its last part.
fn open(path: &Path, flags: i32) -> std::io::Result<File> {
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | flags).open(path)
}

/// The path of an open directory's descriptor: names below it are looked up in that very
/// directory, whatever its path names now.
fn fd_path(dir: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()))
}

/// `10 GiB`, `512 MiB`, or bytes.
fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}

/// Where the agent reports outputs: the server connection and the node's current epoch.
#[derive(Debug)]
pub struct Reporter {
    client: super::Client,
    node: String,
    epoch: Mutex<u64>,
    egress: Arc<super::egress::Egress>,
}

impl Reporter {
    /// Reports for `node` over `client`; the epoch is set at each registration.
    pub fn new(client: super::Client, node: String) -> Self {
        Self { client, node, epoch: Mutex::new(0), egress: Arc::default() }
    }

    /// Uploads go only where `egress` allows (the default: no address of the node or its
    /// networks).
    pub fn with_egress(mut self, egress: Arc<super::egress::Egress>) -> Self {
        self.egress = egress;
        self
    }

    /// The node registered again under `epoch`.
    pub fn set_epoch(&self, epoch: u64) {
        *self.epoch.lock().unwrap_or_else(PoisonError::into_inner) = epoch;
    }

    async fn report(
        &self,
        job_id: i64,
        attempt: u32,
        outputs: Vec<Output>,
    ) -> Result<OutputAnswer, AgentError> {
        let epoch = *self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        let req = OutputReport { node_id: self.node.clone(), epoch, job_id, attempt, outputs };
        self.client.outputs(&req).await
    }

    /// Reports, retried with back-off: a failure of the server must not lose an upload's result.
    async fn report_retried(
        &self,
        job_id: i64,
        attempt: u32,
        outputs: &[Output],
    ) -> Result<OutputAnswer, String> {
        let mut last = String::new();
        for n in 0..TRIES {
            match self.report(job_id, attempt, outputs.to_vec()).await {
                Ok(a) => return Ok(a),
                Err(AgentError::Status { status, body }) if (400..500).contains(&status) && status != 409 => {
                    return Err(format!("the server refused the report ({status}): {body}"));
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(BACKOFF * 2u32.pow(n)).await;
        }
        Err(last)
    }
}

/// Uploads an ended attempt's outputs, reports each one's result and removes the directories.
pub async fn upload_attempt(reporter: Arc<Reporter>, job_id: i64, attempt: u32, dirs: Dirs) {
    let declared: Vec<Output> = dirs.outputs.iter().map(|(o, _)| o.clone()).collect();
    let uploading: Vec<Output> =
        declared.iter().map(|o| Output { state: OutputState::Uploading, ..o.clone() }).collect();
    let results = match reporter.report_retried(job_id, attempt, &uploading).await {
        Ok(answer) => {
            let mut results = Vec::new();
            for (o, dir) in &dirs.outputs {
                let (secret, egress) = (&answer.secret, &reporter.egress);
                results.push(upload_one(o, dir, dirs.uid, secret, egress, Caps::default(), BACKOFF).await);
            }
            results
        }
        Err(e) => {
            tracing::warn!(job = job_id, attempt, error = %e, "could not start uploading the job's outputs");
            declared.iter().map(|o| failed(o, &e)).collect()
        }
    };
    let root = dirs.root.clone();
    let _ = tokio::task::spawn_blocking(move || super::sandbox::remove_dir(&root)).await;
    for r in &results {
        tracing::info!(job = job_id, attempt, output = %r.name, state = r.state.as_str(), files = ?r.files,
            bytes = ?r.bytes, skipped = ?r.skipped, error = ?r.error, "output stage-out ended");
    }
    if let Err(e) = reporter.report_retried(job_id, attempt, &results).await {
        tracing::warn!(job = job_id, attempt, error = %e, "could not report the job's output uploads");
    }
}

fn failed(o: &Output, error: &str) -> Output {
    Output { state: OutputState::Failed, error: Some(super::sources::reason(error)), ..o.declared() }
}

/// Counts `dir`, then uploads it to `o`'s prefix, signed with the team secret's keys (never
/// the node's: without keys nothing is uploaded): the output with its result.
pub async fn upload_one(
    o: &Output,
    dir: &Path,
    uid: u32,
    secret: &super::sources::Secret,
    egress: &Arc<super::egress::Egress>,
    caps: Caps,
    backoff: Duration,
) -> Output {
    if !super::sources::has_keys(secret) {
        return failed(
            o,
            "outputs are written only with a team secret holding AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY (--output-secret); nothing was uploaded",
        );
    }
    // Never a public source's node credentials: outputs write.
    let access = super::sources::Access { secret, public: false, egress };
    let started = Instant::now();
    let (bucket, prefix) = match o.target() {
        Ok(t) => t,
        Err(e) => return failed(o, &e),
    };
    let counted = {
        let dir = dir.to_owned();
        tokio::task::spawn_blocking(move || walk(&dir, uid, caps, &mut |_, _, _| Ok(())))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r)
    };
    if let Err(e) = counted {
        return failed(o, &format!("output `{}`: {e}; nothing was uploaded", o.name));
    }
    let store = match super::sources::s3(&bucket, access) {
        Ok(s) => s,
        Err(e) => return failed(o, &e),
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(String, File, u64)>(4);
    let walker = {
        let dir = dir.to_owned();
        tokio::task::spawn_blocking(move || {
            walk(&dir, uid, caps, &mut |rel, file, size| {
                tx.blocking_send((rel, file, size)).map_err(|_| "the upload stopped".to_owned())
            })
        })
    };
    let mut sent = (0u64, 0u64);
    let mut error = None;
    while let Some((rel, file, size)) = rx.recv().await {
        let key = if prefix.is_empty() { rel.clone() } else { format!("{prefix}/{rel}") };
        match put_retried(&*store, &key, file, size, backoff).await {
            Ok(n) => sent = (sent.0 + 1, sent.1 + n),
            Err(e) => {
                error = Some(format!("uploading `{rel}` to s3://{bucket}/{key}: {e}"));
                break;
            }
        }
    }
    drop(rx);
    let walked = walker.await.map_err(|e| e.to_string()).and_then(|r| r);
    let elapsed = started.elapsed().as_secs_f64();
    match (error, walked) {
        (Some(e), _) | (None, Err(e)) => failed(o, &e),
        (None, Ok(tally)) => Output {
            state: OutputState::Uploaded,
            files: Some(sent.0),
            bytes: Some(sent.1),
            skipped: Some(tally.skipped),
            uploaded_s: Some(elapsed),
            ..o.declared()
        },
    }
}

/// Puts one file, tried [`TRIES`] times with back-off doubling from `backoff`; its bytes.
async fn put_retried(
    store: &dyn ObjectStore,
    key: &str,
    file: File,
    size: u64,
    backoff: Duration,
) -> Result<u64, String> {
    let mut file = tokio::fs::File::from_std(file);
    let mut last = String::new();
    for n in 0..TRIES {
        if n > 0 {
            tokio::time::sleep(backoff * 2u32.pow(n - 1)).await;
        }
        match put(store, key, &mut file, size).await {
            Ok(b) => return Ok(b),
            Err(e) => last = e,
        }
    }
    Err(format!("{last} (tried {TRIES} times)"))
}

/// Puts the file's first `size` bytes (what it held when it was counted) at `key`.
async fn put(
    store: &dyn ObjectStore,
    key: &str,
    file: &mut tokio::fs::File,
    size: u64,
) -> Result<u64, String> {
    use tokio::io::AsyncSeekExt;
    file.seek(std::io::SeekFrom::Start(0)).await.map_err(|e| e.to_string())?;
    let path = object_store::path::Path::from(key);
    let s3 = super::sources::s3_error;
    let mut left = size;
    if size as usize <= PART {
        let mut buf = vec![0u8; size as usize];
        file.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
        store.put(&path, PutPayload::from(buf)).await.map_err(s3)?;
        return Ok(size);
    }
    let mut upload = WriteMultipart::new_with_chunk_size(store.put_multipart(&path).await.map_err(s3)?, PART);
    let mut buf = vec![0u8; PART];
    while left > 0 {
        let want = usize::try_from(left).unwrap_or(PART).min(PART);
        let n = file.read(&mut buf[..want]).await.map_err(|e| e.to_string())?;
        if n == 0 {
            let _ = upload.abort().await;
            return Err("the file ended before the size it was counted at".into());
        }
        upload.wait_for_capacity(4).await.map_err(s3)?;
        upload.write(&buf[..n]);
        left -= n as u64;
    }
    upload.finish().await.map_err(s3)?;
    Ok(size)
}

#[cfg(test)]
mod tests;
