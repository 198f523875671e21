//! When a job's output was written: a small index beside each stream, for `gantry logs
//! --timestamps` and `--since` (kubectl's flags).
//!
//! `<stream>.times` holds records of 16 bytes, `(position in the whole stream, ms since the
//! epoch)` little-endian, in order: a writer notes the position and time of new output when at
//! least [`GAP_MS`] passed since its last record, so a line's time is that of the last record at
//! or before its first byte, never more than [`GAP_MS`] early. The agent notes the time it copies
//! output from the job's pipe; the server, for output an agent ships, the time it receives it (a
//! heartbeat later). The index follows the stream's rotation ([`prune_below`] drops records of
//! output rotated away), so it is bounded by the output kept: at most one record per
//! [`GAP_MS`] and per byte. Nothing here is trusted for order by readers beyond "sorted": a
//! record out of order (a clock stepped back) is skipped when written.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Least time between two records of one stream.
pub const GAP_MS: i64 = 100;
/// Bytes of one record.
const RECORD: usize = 16;

/// One record: output from `offset` on was written at `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Written {
    /// Position in the whole stream.
    pub offset: u64,
    /// Milliseconds since the epoch.
    pub at_ms: i64,
}

fn path(dir: &Path, stream: &str) -> PathBuf {
    dir.join(format!("{stream}.times"))
}

/// Notes that output from `offset` on is written at `now_ms`, unless the last record (`last`:
/// the writer's memory of it; `None` reads it from the file) is less than [`GAP_MS`] older.
/// Returns the time of the last record after the call.
pub fn note(dir: &Path, stream: &str, offset: u64, now_ms: i64, last: Option<i64>) -> std::io::Result<i64> {
    let last = match last {
        Some(t) => Some(t),
        None => last_record(dir, stream)?.map(|w| w.at_ms),
    };
    if last.is_some_and(|t| now_ms < t + GAP_MS) {
        return Ok(last.unwrap_or(now_ms));
    }
    let mut file =
        std::fs::OpenOptions::new().append(true).create(true).mode(0o600).open(path(dir, stream))?;
    let mut record = [0u8; RECORD];
    record[..8].copy_from_slice(&offset.to_le_bytes());
    record[8..].copy_from_slice(&now_ms.to_le_bytes());
    file.write_all(&record)?;
    Ok(now_ms)
}

/// Forgets every record (a new attempt starts the stream afresh).
pub fn reset(dir: &Path, stream: &str) -> std::io::Result<()> {
    match std::fs::remove_file(path(dir, stream)) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Drops the records of output before `offset` (rotated away), keeping the last one before it,
/// which dates the output at `offset`. Called under the directory's exclusive lock.
pub fn prune_below(dir: &Path, stream: &str, offset: u64) -> std::io::Result<()> {
    let all = read_all(dir, stream)?;
    let first = all.partition_point(|w| w.offset <= offset).saturating_sub(1);
    if first == 0 {
        return Ok(());
    }
    let kept: Vec<u8> = all[first..].iter().flat_map(encode).collect();
    let tmp = dir.join(format!("{stream}.times.new"));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?
        .write_all(&kept)?;
    std::fs::rename(tmp, path(dir, stream))
}

/// The records that date output from `offset` on: the last one at or before it, then every
/// later one, at most `max`.
pub fn from(dir: &Path, stream: &str, offset: u64, max: usize) -> std::io::Result<Vec<Written>> {
    let all = read_all(dir, stream)?;
    let first = all.partition_point(|w| w.offset <= offset).saturating_sub(1);
    Ok(all.into_iter().skip(first).take(max).collect())
}

/// The first position whose output was written at or after `since_ms` (None: none was).
pub fn first_since(records: &[Written], since_ms: i64) -> Option<u64> {
    records.iter().find(|w| w.at_ms >= since_ms).map(|w| w.offset)
}

/// The time of the output at `offset`, by `records` (sorted): that of the last record at or
/// before it.
pub fn time_of(records: &[Written], offset: u64) -> Option<i64> {
    let k = records.partition_point(|w| w.offset <= offset);
    k.checked_sub(1).map(|k| records[k].at_ms)
}

fn encode(w: &Written) -> [u8; RECORD] {
    let mut record = [0u8; RECORD];
    record[..8].copy_from_slice(&w.offset.to_le_bytes());
    record[8..].copy_from_slice(&w.at_ms.to_le_bytes());
    record
}

fn decode(record: &[u8]) -> Written {
    let mut offset = [0u8; 8];
    let mut at = [0u8; 8];
    offset.copy_from_slice(&record[..8]);
    at.copy_from_slice(&record[8..RECORD]);
    Written { offset: u64::from_le_bytes(offset), at_ms: i64::from_le_bytes(at) }
}

/// Every whole record, sorted by offset and time (a record out of order is skipped).
fn read_all(dir: &Path, stream: &str) -> std::io::Result<Vec<Written>> {
    let mut bytes = Vec::new();
    match File::open(path(dir, stream)) {
        Ok(mut f) => f.read_to_end(&mut bytes)?,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out: Vec<Written> = Vec::with_capacity(bytes.len() / RECORD);
    for w in bytes.chunks_exact(RECORD).map(decode) {
        if out.last().is_none_or(|l| w.offset >= l.offset && w.at_ms >= l.at_ms) {
            out.push(w);
        }
    }
    Ok(out)
}

fn last_record(dir: &Path, stream: &str) -> std::io::Result<Option<Written>> {
    let mut file = match File::open(path(dir, stream)) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let whole = len - len % RECORD as u64;
    if whole == 0 {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(whole - RECORD as u64))?;
    let mut record = [0u8; RECORD];
    file.read_exact(&mut record)?;
    Ok(Some(decode(&record)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_at_least_a_gap_apart_and_date_each_position() {
        let dir = tempfile::tempdir().expect("dir");
        let d = dir.path();
        assert_eq!(note(d, "stdout", 0, 1_000, None).expect("note"), 1_000);
        // Within the gap: no record; the file's last record is remembered without the caller.
        assert_eq!(note(d, "stdout", 10, 1_050, None).expect("note"), 1_000);
        note(d, "stdout", 20, 1_200, Some(1_000)).expect("note");
        note(d, "stdout", 30, 5_000, None).expect("note");
        let all = from(d, "stdout", 0, 100).expect("read");
        assert_eq!(
            all.iter().map(|w| (w.offset, w.at_ms)).collect::<Vec<_>>(),
            [(0, 1_000), (20, 1_200), (30, 5_000)]
        );
        assert_eq!(time_of(&all, 15), Some(1_000));
        assert_eq!(time_of(&all, 20), Some(1_200));
        assert_eq!(time_of(&all, 99), Some(5_000));
        assert_eq!(first_since(&all, 1_100), Some(20));
        assert_eq!(first_since(&all, 9_000), None);
        // From a position: the record that dates it, then the later ones.
        assert_eq!(from(d, "stdout", 25, 100).expect("read")[0].offset, 20);
    }

    #[test]
    fn pruning_keeps_the_record_that_dates_the_first_kept_byte_and_reset_forgets_all() {
        let dir = tempfile::tempdir().expect("dir");
        let d = dir.path();
        for (i, at) in [(0u64, 0i64), (100, 1_000), (200, 2_000), (300, 3_000)] {
            note(d, "stderr", i, at, None).expect("note");
        }
        prune_below(d, "stderr", 250).expect("prune");
        let kept = from(d, "stderr", 0, 100).expect("read");
        assert_eq!(kept.iter().map(|w| w.offset).collect::<Vec<_>>(), [200, 300]);
        reset(d, "stderr").expect("reset");
        assert!(from(d, "stderr", 0, 100).expect("read").is_empty());
    }

    #[test]
    fn a_record_out_of_order_is_skipped_when_read() {
        let dir = tempfile::tempdir().expect("dir");
        let d = dir.path();
        note(d, "stdout", 0, 5_000, None).expect("note");
        note(d, "stdout", 10, 9_000, None).expect("note");
        // A clock stepped back: the writer passes its memory, so the file gets the record.
        std::fs::OpenOptions::new()
            .append(true)
            .open(d.join("stdout.times"))
            .and_then(|mut f| f.write_all(&encode(&Written { offset: 20, at_ms: 1_000 })))
            .expect("append");
        let all = from(d, "stdout", 0, 100).expect("read");
        assert_eq!(all.len(), 2, "{all:?}");
    }
}
