//! What the agent remembers of each attempt across its own restarts.
//!
//! An attempt is supervised by its shim ([`super::shim`]), not by the agent, so it outlives the
//! agent. For a restarted agent to find it again, the agent writes one record per attempt in
//! `<state>/attempts/<job>-<attempt>.json` once the shim has started the job, and the shim writes
//! `<job>-<attempt>.exit` when the job has ended and been cleaned up. Both are written to a
//! temporary file and renamed into place, so a reader sees all of a file or none of it.
//!
//! On start the agent sorts each record into one of three cases ([`Found`]): the exit file is
//! there (the job ended while the agent was away: its real status is reported); the shim is
//! still alive (the agent adopts the attempt); or neither (the attempt really died, say with the
//! machine: the server requeues it). "Alive" means the process with the recorded pid has the
//! recorded start time in `/proc/<pid>/stat`: a pid alone may have been reused by an unrelated
//! process since.
//!
//! A record is removed once the server has acknowledged the attempt's end.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::cgroup::CgroupRef;

/// One attempt as the agent started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The job.
    pub job_id: i64,
    /// The attempt.
    pub attempt: u32,
    /// The shim's pid.
    pub shim_pid: u32,
    /// The shim's start time (clock ticks after boot, `/proc/<pid>/stat` field 22).
    pub shim_start: u64,
    /// The job's first process, leader of its process group.
    pub pid: u32,
    /// Its start time (0 when it had already ended when the agent looked).
    pub pid_start: u64,
    /// The attempt's cgroup, when cgroups are used.
    pub cgroup: Option<CgroupRef>,
    /// When its time limit runs out (ms since the Unix epoch) and the limit in seconds.
    pub deadline: Option<(i64, u64)>,
    /// Its GPUs.
    pub gpu_uuids: Vec<String>,
    /// Its GPU memory grant, MiB (0: whole GPUs).
    pub grant_mib: u64,
    /// Its memory request, MiB.
    pub memory_mib: u64,
    /// Its network namespace, when it has one.
    #[serde(default)]
    pub net: Option<super::network::NetRef>,
}

/// How an attempt's shim said it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// The raw wait status of the job's first process.
    pub status: i32,
    /// Whether the kernel killed a process of it for exceeding its memory limit.
    pub oom_killed: bool,
}

/// What a restarted agent finds of an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The job ended while the agent was away.
    Ended(Record, Exit),
    /// The shim still runs: the attempt is adopted.
    Running(Record),
    /// Neither the shim nor an exit is left: the attempt died.
    Dead(Record),
}

/// `<state>/attempts`.
pub fn dir(state: &Path) -> PathBuf {
    state.join("attempts")
}

fn stem(job_id: i64, attempt: u32) -> String {
    format!("{job_id}-{attempt}")
}

/// Where the shim of (`job_id`, `attempt`) writes its exit.
pub fn exit_path(state: &Path, job_id: i64, attempt: u32) -> PathBuf {
    dir(state).join(format!("{}.exit", stem(job_id, attempt)))
}

fn record_path(state: &Path, job_id: i64, attempt: u32) -> PathBuf {
    dir(state).join(format!("{}.json", stem(job_id, attempt)))
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename), mode 0600.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // `<name>.tmp`, not `<stem>.tmp`: the agent writes `<job>-<attempt>.json` while the shim
    // may be writing `<job>-<attempt>.exit`.
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent()
        && let Ok(d) = std::fs::File::open(parent)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Keeps `record`.
pub fn save(state: &Path, record: &Record) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).create(dir(state))?;
    let json = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    write_atomically(&record_path(state, record.job_id, record.attempt), &json)
}

/// Keeps how an attempt ended (the shim's last act).
pub fn save_exit(state: &Path, job_id: i64, attempt: u32, exit: &Exit) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).create(dir(state))?;
    let json = serde_json::to_vec(exit).map_err(std::io::Error::other)?;
    write_atomically(&exit_path(state, job_id, attempt), &json)
}

/// Forgets an attempt: its record and its exit.
pub fn forget(state: &Path, job_id: i64, attempt: u32) {
    let _ = std::fs::remove_file(record_path(state, job_id, attempt));
    let _ = std::fs::remove_file(exit_path(state, job_id, attempt));
}

/// The exit the shim wrote, if it did.
pub fn read_exit(state: &Path, job_id: i64, attempt: u32) -> Option<Exit> {
    let bytes = std::fs::read(exit_path(state, job_id, attempt)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Every recorded attempt, sorted into ended, running and dead. Exit files without a record
/// (an attempt the agent had already forgotten) and unreadable records are removed.
pub fn recover(state: &Path) -> Vec<Found> {
    let Ok(entries) = std::fs::read_dir(dir(state)) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut exits = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => {}
            Some("exit") => {
                exits.push(path);
                continue;
            }
            _ => {
                let _ = std::fs::remove_file(&path);
                continue;
            }
        }
        let record: Option<Record> = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok());
        let Some(record) = record else {
            tracing::warn!(file = %path.display(), "removing an unreadable attempt record");
            let _ = std::fs::remove_file(&path);
            continue;
        };
        found.push(classify(state, record));
    }
    for exit in exits {
        if !exit.with_extension("json").exists() {
            let _ = std::fs::remove_file(exit);
        }
    }
    found.sort_by_key(|f| match f {
        Found::Ended(r, _) | Found::Running(r) | Found::Dead(r) => (r.job_id, r.attempt),
    });
    found
}

fn classify(state: &Path, record: Record) -> Found {
    if let Some(exit) = read_exit(state, record.job_id, record.attempt) {
        return Found::Ended(record, exit);
    }
    if is_alive(record.shim_pid, record.shim_start) {
        return Found::Running(record);
    }
    // The shim may have written its exit between the two checks.
    match read_exit(state, record.job_id, record.attempt) {
        Some(exit) => Found::Ended(record, exit),
        None => Found::Dead(record),
    }
}

/// Whether process `pid` runs (not a zombie) and started at `start` (clock ticks after boot).
pub fn is_alive(pid: u32, start: u64) -> bool {
    matches!(stat(pid), Some((state, started)) if state != 'Z' && state != 'X' && started == start)
}

/// The start time of process `pid`, from `/proc/<pid>/stat`.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, start)| start)
}

/// (state, start time) of `pid`.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Fields after the command (which may hold spaces and parentheses) start after the last ')':
/// field 3 is the state, field 22 the start time.
fn parse_stat(text: &str) -> Option<(char, u64)> {
    let mut fields = text.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(22 - 4)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(job_id: i64, shim_pid: u32, shim_start: u64) -> Record {
        Record {
            job_id,
            attempt: 1,
            shim_pid,
            shim_start,
            pid: shim_pid,
            pid_start: 0,
            cgroup: None,
            deadline: None,
            gpu_uuids: Vec::new(),
            grant_mib: 0,
            memory_mib: 0,
            net: None,
        }
    }

    #[test]
    fn a_record_and_its_exit_written_at_the_same_time_are_both_kept() {
        let state = tempfile::tempdir().expect("dir");
        for job in 0..100 {
            let path = state.path().to_owned();
            let shim = std::thread::spawn(move || {
                save_exit(&path, job, 1, &Exit { status: 0, oom_killed: false }).expect("exit");
            });
            save(state.path(), &record(job, 1, 1)).expect("record");
            shim.join().expect("shim thread");
            assert!(read_exit(state.path(), job, 1).is_some(), "job {job}: the exit was lost");
            assert!(record_path(state.path(), job, 1).exists(), "job {job}: the record was lost");
        }
    }

    #[test]
    fn the_start_time_is_read_past_a_command_with_spaces_and_parentheses() {
        let text = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(text), Some(('S', 987_654)));
    }

    #[test]
    fn this_process_is_alive_with_its_start_time_and_not_with_another() {
        let me = std::process::id();
        let start = start_time(me).expect("own start time");
        assert!(is_alive(me, start));
        assert!(!is_alive(me, start + 1), "a reused pid has another start time");
    }

    #[test]
    fn a_record_whose_pid_now_belongs_to_another_process_is_dead_and_one_with_an_exit_is_ended() {
        let state = tempfile::tempdir().expect("dir");
        let me = std::process::id();
        let start = start_time(me).expect("start time");
        save(state.path(), &record(1, me, start)).expect("save");
        save(state.path(), &record(2, me, start + 7)).expect("save");
        save(state.path(), &record(3, me, start + 7)).expect("save");
        let exit = Exit { status: 3 << 8, oom_killed: false };
        save_exit(state.path(), 3, 1, &exit).expect("exit");
        std::fs::write(exit_path(state.path(), 9, 1), b"{}").expect("stray exit");
        let found = recover(state.path());
        assert_eq!(
            found,
            vec![
                Found::Running(record(1, me, start)),
                Found::Dead(record(2, me, start + 7)),
                Found::Ended(record(3, me, start + 7), exit),
            ]
        );
        assert!(!exit_path(state.path(), 9, 1).exists(), "an exit without a record is removed");
        forget(state.path(), 3, 1);
        assert_eq!(recover(state.path()).len(), 2);
    }
}
