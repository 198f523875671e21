//! Copying a job's output to capped, rotating files.
//!
//! A job does not hold its log files: it writes to pipes, and the agent copies them into
//! `<logs>/<job id>/stdout` and `stderr` (mode 0600, directory 0700, so other jobs cannot read
//! them). That is what makes a cap possible: a job given the file itself can write until the
//! disk is full, or seek and overwrite. The layout and rotation rule are
//! [`gantry_api::job_logs`]'s, shared with the logs endpoint.
//!
//! Each stream is copied by its own thread with a fixed 64 KiB buffer: disk writes never block
//! the agent's async runtime, memory stays bounded however fast a job writes, and a job that
//! outpaces the disk is slowed by the full pipe rather than buffered in the agent. A write
//! error (a full disk) is logged once and the rest of the stream is read and dropped, so the
//! job is never blocked by its own log.

use std::fs::File;
use std::io::{ErrorKind, PipeReader, PipeWriter, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use gantry_api::job_logs;
use tokio::sync::oneshot;

use super::error::AgentError;

/// Size of each copy thread's buffer.
const BUFFER: usize = 64 * 1024;

/// Makes `dir` (and missing parents) accessible to the agent only.
pub fn private_dir(dir: &Path) -> Result<(), AgentError> {
    let io = |source| AgentError::Io { what: format!("creating {}", dir.display()), source };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)
}

/// Starts copying a new pipe into `stream` of the job whose output directory is `dir`, keeping
/// at most `limit` bytes on disk. Returns the pipe's write end, for the job, and a receiver
/// that resolves when every copy of the write end is closed and the output is on disk.
pub fn capture(
    dir: &Path,
    stream: &'static str,
    limit: u64,
) -> Result<(PipeWriter, oneshot::Receiver<()>), AgentError> {
    let io = |what: &str| {
        let what = format!("{what} for the job's {stream}");
        move |source| AgentError::Io { what, source }
    };
    let file = job_logs::create(dir, stream).map_err(io("creating the log"))?;
    let (reader, writer) = std::io::pipe().map_err(io("creating a pipe"))?;
    let (done, finished) = oneshot::channel();
    let out = Capped {
        dir: dir.to_path_buf(),
        stream,
        file,
        start: 0,
        written: 0,
        segment: job_logs::segment_limit(limit),
        dated: None,
    };
    std::thread::Builder::new()
        .name(format!("log-{stream}"))
        .spawn(move || {
            copy(reader, out);
            let _ = done.send(());
        })
        .map_err(io("starting the log thread"))?;
    Ok((writer, finished))
}

/// How often a stream being copied looks for the server's [`job_logs::QUOTA_FULL`] mark.
const QUOTA_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

fn copy(mut reader: PipeReader, mut out: Capped) {
    let mut buf = vec![0u8; BUFFER];
    let mut failed = false;
    let mut checked = std::time::Instant::now();
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, dir = %out.dir.display(), stream = out.stream, "reading job output failed");
                return;
            }
        };
        if !failed && checked.elapsed() >= QUOTA_CHECK {
            checked = std::time::Instant::now();
            // The team's log quota is full: one line saying so, then the rest is dropped.
            if let Ok(line) = std::fs::read_to_string(out.dir.join(job_logs::QUOTA_FULL)) {
                let _ = out.write(line.as_bytes());
                tracing::info!(dir = %out.dir.display(), stream = out.stream, "the team's log quota is full: job output is dropped from here on");
                failed = true;
                continue;
            }
        }
        if !failed && let Err(e) = out.write(&buf[..n]) {
            tracing::warn!(error = %e, dir = %out.dir.display(), stream = out.stream, "job output is dropped from here on");
            failed = true;
        }
    }
}

/// One stream's current segment.
#[derive(Debug)]
struct Capped {
    dir: PathBuf,
    stream: &'static str,
    file: File,
    /// Position of the segment's first byte in the whole stream.
    start: u64,
    /// Bytes in the segment.
    written: u64,
    /// Bytes a segment may hold.
    segment: u64,
    /// When the last record of the stream's time index was written (ms since the epoch).
    dated: Option<i64>,
}

impl Capped {
    fn write(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        let now = now_ms();
        if self.dated.is_none_or(|t| now >= t + gantry_api::job_log_times::GAP_MS) {
            let at = self.start + self.written;
            self.dated = Some(gantry_api::job_log_times::note(&self.dir, self.stream, at, now, self.dated)?);
        }
        while !bytes.is_empty() {
            if self.written >= self.segment {
                self.start += self.written;
                self.file = job_logs::rotate(&self.dir, self.stream, self.start)?;
                self.written = 0;
            }
            let room = usize::try_from(self.segment - self.written).unwrap_or(usize::MAX);
            let (now, later) = bytes.split_at(room.min(bytes.len()));
            self.file.write_all(now)?;
            self.written += now.len() as u64;
            bytes = later;
        }
        Ok(())
    }
}

/// Milliseconds since the Unix epoch: when output is copied, for `gantry logs --timestamps`.
fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[tokio::test]
    async fn a_stream_far_over_its_limit_keeps_only_the_newest_output_within_it() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut writer, done) = capture(dir.path(), "stdout", 1000).expect("capture");
        let text: Vec<u8> =
            (0..10_000u32).flat_map(|i| format!("{:04}\n", i % 10_000).into_bytes()).collect();
        let writing = std::thread::spawn(move || writer.write_all(&text));
        writing.join().expect("writer thread").expect("write");
        done.await.expect("copy finished");
        let current = std::fs::read(dir.path().join("stdout")).expect("current");
        let previous = std::fs::read(dir.path().join("stdout.1")).expect("previous");
        assert_eq!(current.len() + previous.len(), 1000);
        let kept = [previous, current].concat();
        assert!(kept.ends_with(b"9998\n9999\n"), "the newest output is kept");
        let chunk = job_logs::read(dir.path(), "stdout", 0, 1 << 20).expect("read");
        assert_eq!(chunk.offset, 49_000, "a reader from the start is moved to the oldest output kept");
        assert_eq!(String::from_utf8_lossy(&chunk.bytes), String::from_utf8_lossy(&kept[..500]));
    }

    #[tokio::test]
    async fn a_stream_stops_keeping_output_with_one_line_once_the_server_marks_the_quota_full() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut writer, done) = capture(dir.path(), "stdout", 1 << 20).expect("capture");
        let marker = "\n[gantry: output truncated: team t's log quota of 1 MiB is full]\n";
        let path = dir.path().to_path_buf();
        let writing = std::thread::spawn(move || {
            writer.write_all(b"before\n")?;
            std::thread::sleep(std::time::Duration::from_millis(200));
            std::fs::write(path.join(job_logs::QUOTA_FULL), marker)?;
            // Past the check interval: the next write finds the mark.
            std::thread::sleep(QUOTA_CHECK + std::time::Duration::from_millis(200));
            for _ in 0..100 {
                writer.write_all(b"after\n")?;
            }
            Ok::<_, std::io::Error>(())
        });
        writing.join().expect("writer thread").expect("write");
        done.await.expect("copy finished");
        let kept = std::fs::read_to_string(dir.path().join("stdout")).expect("log");
        assert_eq!(kept, format!("before\n{marker}"), "one line, and nothing after it is kept");
    }

    #[tokio::test]
    async fn log_files_and_their_directory_are_private_to_the_agent() {
        let root = tempfile::tempdir().expect("dir");
        let dir = root.path().join("logs").join("7");
        private_dir(&dir).expect("dir");
        let (writer, done) = capture(&dir, "stderr", 1 << 20).expect("capture");
        drop(writer);
        done.await.expect("copy finished");
        assert_eq!(std::fs::metadata(&dir).expect("dir").mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(dir.join("stderr")).expect("log").mode() & 0o777, 0o600);
    }
}
