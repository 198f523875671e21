//! A job's output on disk: the layout the agent writes and the logs endpoint reads.
//!
//! Output is kept per attempt, so that a job requeued after a node failure still shows what its
//! earlier attempts printed (`gantry logs --previous`): attempt N of a job writes to
//! `<logs>/<job id>/<N>/` ([`attempt_dir`]); the [`KEPT_ATTEMPTS`] newest attempts are kept.
//! Logs written before this layout, directly in `<logs>/<job id>/`, read as the job's latest
//! attempt ([`read_dir_for`]).
//!
//! Output is capped so that a job printing in a loop cannot fill the node's disk. Each stream
//! (`stdout`, `stderr`) of an attempt lives in its directory as two segments:
//!
//! - `<stream>`: the current segment, appended to by the agent;
//! - `<stream>.1`: the segment before it, complete;
//! - `<stream>.start`: the position of the current segment's first byte in the whole stream
//!   (absent: 0).
//!
//! When the current segment reaches half the limit it becomes `<stream>.1` (replacing the older
//! one) and a new segment starts, so at most the limit is on disk and at least half of it, the
//! newest output, is always readable.
//!
//! Readers address the stream by its position since the job started, not by a position in one
//! file: a follower (`gantry logs --follow`) keeps its offset across rotations and sees nothing
//! change. A reader that asks for output already rotated away gets the oldest output still kept
//! and the position it starts at ([`Chunk::offset`]), so it can say how much was lost. Rotation
//! renames files that a reader may be opening; an exclusive `flock` on the job's log directory
//! during rotation and a shared one while a reader opens the files keep both in step.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The cap on one stream when none is configured: 64 MiB.
pub const DEFAULT_LIMIT: u64 = 64 << 20;

/// The response header that carries [`Chunk::offset`].
pub const OFFSET_HEADER: &str = "x-gantry-log-offset";

/// How many attempts' output a job keeps (the newest): each is capped by the log limit.
pub const KEPT_ATTEMPTS: u32 = 5;

/// A file the server puts in a running attempt's output directory when the attempt's team is
/// past its log quota: the agent copying the attempt's output (into the server's own logs
/// directory, as `gantry up`'s does) writes the file's one line into each stream and keeps
/// nothing more.
pub const QUOTA_FULL: &str = ".quota-full";

/// The directory of a job's output: `<logs>/<job id>`.
pub fn dir(logs: &Path, job_id: i64) -> PathBuf {
    logs.join(job_id.to_string())
}

/// Where attempt `attempt` of a job writes its output: `<logs>/<job id>/<attempt>`.
pub fn attempt_dir(logs: &Path, job_id: i64, attempt: u32) -> PathBuf {
    dir(logs, job_id).join(attempt.to_string())
}

/// The directory to read attempt `attempt` from, where `latest` is the job's current attempt:
/// its own, or for the latest attempt of a job whose output predates per-attempt directories,
/// the job's directory itself.
pub fn read_dir_for(logs: &Path, job_id: i64, attempt: u32, latest: u32) -> PathBuf {
    let own = attempt_dir(logs, job_id, attempt);
    let legacy = dir(logs, job_id);
    if attempt == latest && !own.exists() && legacy.join("stdout").exists() { legacy } else { own }
}

/// Removes the output of attempts older than the [`KEPT_ATTEMPTS`] newest, when attempt
/// `current` starts in `dir` (a job's directory).
pub fn prune(dir: &Path, current: u32) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let old = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok());
        if old.is_some_and(|n| n + KEPT_ATTEMPTS <= current) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// How large the current segment may grow before it is rotated, for a per-stream `limit`.
pub fn segment_limit(limit: u64) -> u64 {
    (limit / 2).max(1)
}

/// Part of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Position of the first byte in the whole stream: the requested offset, or later when the
    /// output there was rotated away.
    pub offset: u64,
    /// At most the requested number of bytes (none at the end of the stream).
    pub bytes: Vec<u8>,
}

/// Reads up to `max` bytes of `stream` from position `offset` of the whole stream. A job with
/// no output yet reads as empty.
pub fn read(dir: &Path, stream: &str, offset: u64, max: u64) -> std::io::Result<Chunk> {
    let empty = Chunk { offset, bytes: Vec::new() };
    let Some(guard) = lock(dir, false)? else {
        return Ok(empty);
    };
    let start = read_start(dir, stream)?;
    let current = open_if_present(&dir.join(stream))?;
    let previous = open_if_present(&rotated(dir, stream))?;
    drop(guard);
    let previous_len = previous.as_ref().map_or(Ok(0), |f| f.metadata().map(|m| m.len()))?;
    let previous_start = start.saturating_sub(previous_len);
    let (file, at) = match (current, previous) {
        (Some(current), _) if offset >= start => (current, offset),
        (_, Some(previous)) => (previous, offset.max(previous_start)),
        (Some(current), None) => (current, start),
        (None, None) => return Ok(empty),
    };
    let from = if at >= start { at - start } else { at - previous_start };
    // Past the end there is nothing yet; a seek that far may fail (beyond what the file system
    // allows), and a reader's bad offset must not be an I/O error.
    if from >= file.metadata()?.len() {
        return Ok(Chunk { offset: at, bytes: Vec::new() });
    }
    let mut bytes = Vec::new();
    let mut file = file;
    file.seek(SeekFrom::Start(from))?;
    file.take(max).read_to_end(&mut bytes)?;
    Ok(Chunk { offset: at, bytes })
}

/// Starts `stream` afresh (a new attempt): removes older segments, returns the empty current
/// segment (mode 0600) for appending.
pub fn create(dir: &Path, stream: &str) -> std::io::Result<File> {
    let _guard = lock(dir, true)?;
    remove_if_present(&rotated(dir, stream))?;
    remove_if_present(&start_file(dir, stream))?;
    crate::job_log_times::reset(dir, stream)?;
    open_new(&dir.join(stream))
}

/// Rotates `stream`: the current segment becomes `<stream>.1`, and a new one, whose first byte
/// is at position `start` of the whole stream, is returned.
pub fn rotate(dir: &Path, stream: &str, start: u64) -> std::io::Result<File> {
    let _guard = lock(dir, true)?;
    // The segment that becomes `.1` starts where the current one did: older output is gone.
    crate::job_log_times::prune_below(dir, stream, read_start(dir, stream)?)?;
    std::fs::rename(dir.join(stream), rotated(dir, stream))?;
    let mut file = open_new(&start_file(dir, stream))?;
    std::io::Write::write_all(&mut file, start.to_string().as_bytes())?;
    open_new(&dir.join(stream))
}

/// Appends output an agent shipped (its bytes at position `offset` of attempt `attempt`'s
/// stream) to the server's copy in `dir`, keeping at most `limit` on disk like the agent does.
/// A new attempt starts the stream afresh; bytes the copy already has are skipped (a heartbeat
/// sent again); a gap (output the agent rotated away before shipping it) starts a new segment
/// at `offset`, so readers see where output is missing. New bytes are dated `now_ms`.
pub fn append_at(
    dir: &Path,
    stream: &str,
    attempt: u32,
    offset: u64,
    bytes: &[u8],
    limit: u64,
    now_ms: i64,
) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let marker = dir.join(format!("{stream}.attempt"));
    let current = std::fs::read_to_string(&marker).ok().and_then(|t| t.trim().parse::<u32>().ok());
    if current != Some(attempt) {
        drop(create(dir, stream)?);
        std::fs::write(&marker, attempt.to_string())?;
    }
    let start = read_start(dir, stream)?;
    let len = std::fs::metadata(dir.join(stream)).map_or(0, |m| m.len());
    let end = start + len;
    let skip = end.saturating_sub(offset);
    if skip >= bytes.len() as u64 {
        return Ok(());
    }
    let (mut at, mut rest) = (offset.max(end), &bytes[usize::try_from(skip).unwrap_or(usize::MAX)..]);
    crate::job_log_times::note(dir, stream, at, now_ms, None)?;
    let segment = segment_limit(limit);
    let mut written = len;
    let mut file = if at > end {
        written = 0;
        rotate(dir, stream, at)?
    } else {
        std::fs::OpenOptions::new().append(true).open(dir.join(stream))?
    };
    while !rest.is_empty() {
        if written >= segment {
            file = rotate(dir, stream, at)?;
            written = 0;
        }
        let room = usize::try_from(segment - written).unwrap_or(usize::MAX);
        let (now, later) = rest.split_at(room.min(rest.len()));
        file.write_all(now)?;
        written += now.len() as u64;
        at += now.len() as u64;
        rest = later;
    }
    Ok(())
}

/// Bytes of `stream` on disk in `dir` (both segments).
pub fn stream_bytes(dir: &Path, stream: &str) -> u64 {
    let len = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    len(dir.join(stream)) + len(rotated(dir, stream))
}

/// The position just past the last byte of `stream` kept in `dir` (0 with no output yet).
pub fn stream_end(dir: &Path, stream: &str) -> u64 {
    let len = std::fs::metadata(dir.join(stream)).map_or(0, |m| m.len());
    read_start(dir, stream).unwrap_or(0) + len
}

fn rotated(dir: &Path, stream: &str) -> PathBuf {
    dir.join(format!("{stream}.1"))
}

fn start_file(dir: &Path, stream: &str) -> PathBuf {
    dir.join(format!("{stream}.start"))
}

fn read_start(dir: &Path, stream: &str) -> std::io::Result<u64> {
    match std::fs::read_to_string(start_file(dir, stream)) {
        Ok(text) => Ok(text.trim().parse().unwrap_or(0)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

/// Holds `flock` on the directory until dropped; `None` when the directory does not exist.
fn lock(dir: &Path, exclusive: bool) -> std::io::Result<Option<File>> {
    let file = match File::open(dir) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if exclusive {
        file.lock()?
    } else {
        file.lock_shared()?
    }
    Ok(Some(file))
}

fn open_if_present(path: &Path) -> std::io::Result<Option<File>> {
    match File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn open_new(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)
}

fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// Writes `text` into a stream rotated every `segment` bytes, as the agent does.
    fn write_rotating(dir: &Path, text: &[u8], segment: usize) {
        let mut file = create(dir, "stdout").expect("create");
        for (i, part) in text.chunks(segment).enumerate() {
            if i > 0 {
                file = rotate(dir, "stdout", (i * segment) as u64).expect("rotate");
            }
            file.write_all(part).expect("write");
        }
    }

    fn all_from(dir: &Path, offset: u64) -> Chunk {
        let mut chunk = read(dir, "stdout", offset, 1 << 20).expect("read");
        let mut at = chunk.offset + chunk.bytes.len() as u64;
        loop {
            let next = read(dir, "stdout", at, 1 << 20).expect("read");
            if next.bytes.is_empty() {
                return chunk;
            }
            assert_eq!(next.offset, at, "a reader that keeps up loses nothing");
            at += next.bytes.len() as u64;
            chunk.bytes.extend(next.bytes);
        }
    }

    #[test]
    fn an_unrotated_stream_reads_like_a_file() {
        let dir = tempfile::tempdir().expect("dir");
        write_rotating(dir.path(), b"hello world", 100);
        assert_eq!(read(dir.path(), "stdout", 6, 100).expect("read").bytes, b"world");
        assert_eq!(all_from(dir.path(), 0).bytes, b"hello world");
    }

    #[test]
    fn positions_survive_rotation_and_only_the_last_two_segments_are_kept() {
        let dir = tempfile::tempdir().expect("dir");
        write_rotating(dir.path(), b"aaaabbbbccccdd", 4);
        let on_disk: u64 = ["stdout", "stdout.1"]
            .iter()
            .map(|f| std::fs::metadata(dir.path().join(f)).expect("segment").len())
            .sum();
        assert_eq!(on_disk, 6);
        assert_eq!(all_from(dir.path(), 9).bytes, b"cccdd");
        assert_eq!(
            read(dir.path(), "stdout", 12, 100).expect("read"),
            Chunk { offset: 12, bytes: b"dd".to_vec() }
        );
    }

    #[test]
    fn a_reader_behind_the_oldest_kept_output_is_moved_forward_and_told_where_it_is() {
        let dir = tempfile::tempdir().expect("dir");
        write_rotating(dir.path(), b"aaaabbbbccccdd", 4);
        let chunk = all_from(dir.path(), 0);
        assert_eq!(chunk.offset, 8);
        assert_eq!(chunk.bytes, b"ccccdd");
    }

    #[test]
    fn an_offset_past_the_end_reads_as_nothing_yet_however_far() {
        // Before, an offset past what the file system can seek to was an I/O error: a 500.
        let dir = tempfile::tempdir().expect("dir");
        write_rotating(dir.path(), b"hello", 100);
        for offset in [5, 6, 1 << 40, i64::MAX as u64] {
            assert_eq!(
                read(dir.path(), "stdout", offset, 10).expect("read"),
                Chunk { offset, bytes: Vec::new() }
            );
        }
    }

    #[test]
    fn a_job_without_output_reads_as_empty() {
        let dir = tempfile::tempdir().expect("dir");
        let missing = dir.path().join("7");
        assert_eq!(read(&missing, "stdout", 0, 10).expect("read"), Chunk { offset: 0, bytes: Vec::new() });
    }

    #[test]
    fn a_new_attempt_starts_the_stream_afresh() {
        let dir = tempfile::tempdir().expect("dir");
        write_rotating(dir.path(), b"aaaabbbbcc", 4);
        write_rotating(dir.path(), b"new", 4);
        assert!(!dir.path().join("stdout.1").exists());
        assert_eq!(all_from(dir.path(), 0), Chunk { offset: 0, bytes: b"new".to_vec() });
    }
}
