//! What the server keeps of jobs' output: a byte quota per team, a retention window after a job
//! ends, and a free-space floor under which no job is accepted.
//!
//! Each stream of each attempt is capped on its own (`--log-limit`, see [`crate::job_logs`]);
//! that alone lets a member keep `limit × 2 streams × 5 attempts` per job, for as many jobs
//! as they submit. So the server also keeps, per team, the bytes its jobs' output takes on disk
//! (a ledger): counted at start by reading the logs directory, then kept current by every
//! write and removal, not by walking the directory per write (the sweep below re-measures it
//! once a minute). A write that would take a team past
//! its quota ([`OutputLimits::team_quota`], or the team's `log_quota_bytes`) first removes the
//! output of the team's oldest ended attempts (lowest job id, then attempt: the attempts of
//! ended jobs and the earlier attempts of requeued ones); if that does not make room, the
//! stream gets what room is left, then one marker line
//! (`[gantry: output truncated: team vision's log quota of 100 MiB is full]`), and nothing
//! more of that stream is kept. Nothing a running attempt wrote is removed to make room.
//!
//! [`Output::sweep`], every minute, measures the logs directory again (an agent on the server's
//! machine, `gantry up`'s, writes there directly rather than shipping output, so this is how
//! its output is counted and held to the quota, within a minute of being written), removes the
//! output of jobs that ended more than the retention window ago (`--log-retention`), and
//! removes a team's oldest ended attempts while it is over its quota. Time is its parameter, so
//! tests pass a clock instead of waiting.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use gantry_store::{Job, JobFilter, JobId, JobState, Store};

use crate::job_logs;

/// Bytes of each team's quota kept for marker lines (about 800 of them), so that a stream cut
/// at a full quota still says why.
pub const MARKER_RESERVE: u64 = 64 << 10;

/// The server's settings for kept output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Bytes a team's jobs' output may take, for a team without its own `log_quota_bytes`.
    pub team_quota: u64,
    /// How long a job's output is kept after the job ends.
    pub retention: Duration,
    /// Below this many free bytes on the data disk, submissions are refused.
    pub min_free_disk: u64,
}

impl Default for OutputLimits {
    /// 10 GiB per team, 7 days, 1 GiB free.
    fn default() -> Self {
        Self { team_quota: 10 << 30, retention: Duration::from_secs(7 * 86_400), min_free_disk: 1 << 30 }
    }
}

/// One attempt's kept output.
#[derive(Debug, Clone)]
struct Kept {
    team: String,
    bytes: u64,
}

/// Bytes on disk per team and per attempt, and the streams cut at the quota.
#[derive(Debug, Default)]
struct Ledger {
    loaded: bool,
    teams: HashMap<String, u64>,
    attempts: BTreeMap<(JobId, u32), Kept>,
    truncated: HashSet<(JobId, u32, String)>,
}

/// The kept output of every job, accounted per team.
#[derive(Debug, Default)]
pub struct Output {
    ledger: Mutex<Ledger>,
}

/// One write of shipped output.
#[derive(Debug, Clone, Copy)]
pub struct Shipped<'a> {
    /// The job.
    pub job: &'a Job,
    /// Its attempt.
    pub attempt: u32,
    /// `stdout` or `stderr`.
    pub stream: &'a str,
    /// Position of `bytes` in the stream.
    pub offset: u64,
    /// The output.
    pub bytes: &'a [u8],
    /// Bytes the team may keep.
    pub quota: u64,
    /// The per-stream cap.
    pub limit: u64,
}

impl Output {
    /// Appends shipped output to the job's copy under `logs`, within the team's quota.
    pub fn write(&self, store: &dyn Store, logs: &Path, w: Shipped<'_>) -> std::io::Result<()> {
        let mut ledger = self.ledger.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ledger.load(store, logs);
        let (job, team) = (w.job.id, w.job.team.as_str());
        if ledger.truncated.contains(&(job, w.attempt, w.stream.to_owned())) {
            return Ok(());
        }
        let dir = job_logs::attempt_dir(logs, job, w.attempt);
        // Shipped output is dated when it arrives (a heartbeat after the job wrote it).
        let now = crate::app::now_ms();
        let skip = usize::try_from(job_logs::stream_end(&dir, w.stream).saturating_sub(w.offset))
            .unwrap_or(usize::MAX)
            .min(w.bytes.len());
        let new = (w.bytes.len() - skip) as u64;
        if new == 0 {
            return Ok(());
        }
        // Data may fill the quota but for a reserve that the marker lines come out of.
        let for_data = w.quota.saturating_sub(MARKER_RESERVE);
        let over = (ledger.used(team) + new).saturating_sub(for_data);
        if over > 0 {
            ledger.evict(store, logs, team, over, Some(job));
        }
        let before = job_logs::stream_bytes(&dir, w.stream);
        let room = for_data.saturating_sub(ledger.used(team));
        if new <= room {
            let result = job_logs::append_at(&dir, w.stream, w.attempt, w.offset, w.bytes, w.limit, now);
            ledger.add(team, job, w.attempt, job_logs::stream_bytes(&dir, w.stream), before);
            return result;
        }
        ledger.truncated.insert((job, w.attempt, w.stream.to_owned()));
        let keep = usize::try_from(room).unwrap_or(0);
        let at = w.offset + skip as u64;
        let kept =
            job_logs::append_at(&dir, w.stream, w.attempt, at, &w.bytes[skip..skip + keep], w.limit, now);
        ledger.add(team, job, w.attempt, job_logs::stream_bytes(&dir, w.stream), before);
        kept?;
        let marker =
            format!("\n[gantry: output truncated: team {team}'s log quota of {} is full]\n", size(w.quota));
        if ledger.used(team) + marker.len() as u64 > w.quota {
            return Ok(()); // the reserve is spent too: the stream just ends
        }
        let before = job_logs::stream_bytes(&dir, w.stream);
        let result =
            job_logs::append_at(&dir, w.stream, w.attempt, at + keep as u64, marker.as_bytes(), w.limit, now);
        ledger.add(team, job, w.attempt, job_logs::stream_bytes(&dir, w.stream), before);
        result
    }

    /// Once a minute: measures what is on disk again, job by job (output an agent on this
    /// machine writes straight into the logs directory reaches the ledger no other way), removes
    /// the output of jobs that ended before `now - retention` or that the store no longer has,
    /// then holds each team to its quota by removing its oldest ended attempts. Returns how
    /// many jobs' output went for their age. The measuring happens outside the ledger's lock,
    /// so shipped writes wait only for the bookkeeping.
    pub fn sweep(&self, store: &dyn Store, logs: &Path, now: i64, limits: OutputLimits) -> usize {
        let cutoff = now.saturating_sub(i64::try_from(limits.retention.as_millis()).unwrap_or(i64::MAX));
        let Some(quotas) = Quotas::read(store, limits) else { return 0 };
        let measured = measure(store, logs);
        let mut ledger = self.ledger.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ledger.loaded = true;
        let on_disk: HashSet<JobId> = measured.iter().map(|m| m.0).collect();
        let gone: Vec<(JobId, u32)> =
            ledger.attempts.keys().filter(|k| !on_disk.contains(&k.0)).copied().collect();
        gone.into_iter().for_each(|(job, attempt)| ledger.forget(job, attempt));
        let mut removed = 0;
        for (id, job, attempts) in measured {
            let expired = job
                .as_ref()
                .is_none_or(|j| j.state.is_terminal() && j.finished_at.is_some_and(|t| t < cutoff));
            if expired {
                let kept: Vec<u32> =
                    ledger.attempts.range((id, 0)..=(id, u32::MAX)).map(|(k, _)| k.1).collect();
                kept.into_iter().for_each(|a| ledger.forget(id, a));
                let _ = std::fs::remove_dir_all(job_logs::dir(logs, id));
                removed += 1;
                continue;
            }
            let team = job.map(|j| j.team).unwrap_or_default();
            for (attempt, bytes) in attempts {
                let current = ledger.attempts.get(&(id, attempt)).map_or(0, |k| k.bytes);
                ledger.add(&team, id, attempt, bytes, current);
            }
        }
        let teams: Vec<(String, u64)> = ledger.teams.iter().map(|(t, used)| (t.clone(), *used)).collect();
        for (team, used) in teams {
            let quota = quotas.of(&team);
            if used > quota {
                ledger.evict(store, logs, &team, used - quota, None);
            }
        }
        removed
    }

    /// Holds teams to their quota while their jobs run (every few seconds, between sweeps):
    /// measures the output of each running attempt (what an agent on the server's machine
    /// writes straight into the logs directory reaches the ledger no other way), and for a team
    /// past its quota removes the output of its oldest ended attempts, then, if that is not
    /// enough, marks each of its running attempts [`job_logs::QUOTA_FULL`] (holding the marker
    /// line): the agent copying it writes the line and keeps nothing more, and shipped output
    /// of it is no longer kept. Nothing a running attempt wrote is removed. Returns how many
    /// attempts it marked.
    pub fn hold_running(&self, store: &dyn Store, logs: &Path, limits: OutputLimits) -> usize {
        let Some(quotas) = Quotas::read(store, limits) else { return 0 };
        let running = JobFilter { state: Some(JobState::Running), ..JobFilter::default() };
        let Ok(running) = store.jobs(&running) else { return 0 };
        let measured: Vec<(&Job, u64)> =
            running.iter().map(|j| (j, files_size(&job_logs::attempt_dir(logs, j.id, j.attempt)))).collect();
        let mut ledger = self.ledger.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ledger.load(store, logs);
        for (j, bytes) in &measured {
            let current = ledger.attempts.get(&(j.id, j.attempt)).map_or(0, |k| k.bytes);
            ledger.add(&j.team, j.id, j.attempt, *bytes, current);
        }
        let teams: HashSet<&str> = running.iter().map(|j| j.team.as_str()).collect();
        let mut marked = 0;
        for team in teams {
            let quota = quotas.of(team);
            let used = ledger.used(team);
            if used <= quota {
                continue;
            }
            ledger.evict(store, logs, team, used - quota, None);
            if ledger.used(team) <= quota {
                continue;
            }
            let line =
                format!("\n[gantry: output truncated: team {team}'s log quota of {} is full]\n", size(quota));
            for j in running.iter().filter(|j| j.team == team) {
                let dir = job_logs::attempt_dir(logs, j.id, j.attempt);
                let mark = dir.join(job_logs::QUOTA_FULL);
                if !dir.is_dir() || mark.exists() {
                    continue;
                }
                if std::fs::write(&mark, &line).is_ok() {
                    marked += 1;
                }
                for stream in ["stdout", "stderr"] {
                    ledger.truncated.insert((j.id, j.attempt, stream.to_owned()));
                }
            }
        }
        marked
    }

    /// Bytes of output kept for `team`.
    pub fn used(&self, store: &dyn Store, logs: &Path, team: &str) -> u64 {
        let mut ledger = self.ledger.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ledger.load(store, logs);
        ledger.used(team)
    }
}

/// Each team's output quota: its own `log_quota_bytes`, else the server's.
struct Quotas {
    own: HashMap<String, u64>,
    default: u64,
}

impl Quotas {
    /// `None` while the store cannot be read.
    fn read(store: &dyn Store, limits: OutputLimits) -> Option<Self> {
        let teams = store.teams().ok()?;
        let own = teams.into_iter().filter_map(|t| t.log_quota_bytes.map(|q| (t.name, q))).collect();
        Some(Self { own, default: limits.team_quota })
    }

    fn of(&self, team: &str) -> u64 {
        self.own.get(team).copied().unwrap_or(self.default)
    }
}

impl Ledger {
    fn used(&self, team: &str) -> u64 {
        self.teams.get(team).copied().unwrap_or(0)
    }

    /// Counts what is on disk, once (before the first sweep does).
    fn load(&mut self, store: &dyn Store, logs: &Path) {
        if self.loaded {
            return;
        }
        self.loaded = true;
        for (id, job, attempts) in measure(store, logs) {
            let team = job.map(|j| j.team).unwrap_or_default(); // gone from the store: the sweep removes it
            attempts.into_iter().for_each(|(attempt, bytes)| self.add(&team, id, attempt, bytes, 0));
        }
    }

    /// Moves an attempt's count from `before` to `after` bytes.
    fn add(&mut self, team: &str, job: JobId, attempt: u32, after: u64, before: u64) {
        let kept =
            self.attempts.entry((job, attempt)).or_insert_with(|| Kept { team: team.to_owned(), bytes: 0 });
        kept.bytes = (kept.bytes + after).saturating_sub(before);
        let total = self.teams.entry(team.to_owned()).or_insert(0);
        *total = (*total + after).saturating_sub(before);
    }

    /// Drops an attempt's count (its output is gone, or about to be).
    fn forget(&mut self, job: JobId, attempt: u32) {
        let Some(kept) = self.attempts.remove(&(job, attempt)) else { return };
        if let Some(total) = self.teams.get_mut(&kept.team) {
            *total = total.saturating_sub(kept.bytes);
        }
        self.truncated.retain(|(j, a, _)| (*j, *a) != (job, attempt));
    }

    /// Removes an attempt's output and its count.
    fn remove(&mut self, logs: &Path, job: JobId, attempt: u32) {
        self.forget(job, attempt);
        if attempt == 0 {
            remove_files(&job_logs::dir(logs, job));
        } else {
            let _ = std::fs::remove_dir_all(job_logs::attempt_dir(logs, job, attempt));
        }
    }

    /// Removes `team`'s oldest ended attempts (never `writing`'s) until `need` bytes are freed
    /// or none is left.
    fn evict(&mut self, store: &dyn Store, logs: &Path, team: &str, need: u64, writing: Option<JobId>) {
        let candidates: Vec<(JobId, u32)> = self
            .attempts
            .iter()
            .filter(|((job, _), kept)| kept.team == team && Some(*job) != writing)
            .map(|(key, _)| *key)
            .collect();
        let mut freed = 0;
        let mut ended: HashMap<JobId, Option<u32>> = HashMap::new();
        for (job, attempt) in candidates {
            if freed >= need {
                break;
            }
            // `Some(n)`: attempts below n are over; all of them when the job ended.
            let over = *ended.entry(job).or_insert_with(|| match store.job(job) {
                Ok(Some(j)) if j.state.is_terminal() => Some(u32::MAX),
                Ok(Some(j)) => Some(j.attempt),
                Ok(None) => Some(u32::MAX),
                Err(_) => None,
            });
            if over.is_some_and(|n| attempt < n) {
                freed += self.attempts.get(&(job, attempt)).map_or(0, |k| k.bytes);
                self.remove(logs, job, attempt);
            }
        }
    }
}

/// What is on disk: for each job directory under `logs` (`<logs>/<job>`), the job (`None`:
/// the store no longer has it) and the bytes of each attempt (`<job>/<attempt>/*`; files
/// directly in the job's directory, output from before per-attempt directories, as attempt 0).
/// Jobs the store cannot be asked about now are left out.
type Measured = Vec<(JobId, Option<Job>, Vec<(u32, u64)>)>;

fn measure(store: &dyn Store, logs: &Path) -> Measured {
    let Ok(entries) = std::fs::read_dir(logs) else { return Vec::new() };
    let mut measured = Vec::new();
    for entry in entries.flatten() {
        let Some(id) = entry.file_name().to_str().and_then(|n| n.parse::<JobId>().ok()) else { continue };
        let Ok(job) = store.job(id) else { continue };
        let Ok(inside) = std::fs::read_dir(entry.path()) else { continue };
        let mut attempts: BTreeMap<u32, u64> = BTreeMap::new();
        for item in inside.flatten() {
            let (attempt, bytes) = match item.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) {
                Some(a) => (a, files_size(&item.path())),
                None => (0, item.metadata().map_or(0, |m| if m.is_file() { m.len() } else { 0 })),
            };
            *attempts.entry(attempt).or_insert(0) += bytes;
        }
        measured.push((id, job, attempts.into_iter().collect()));
    }
    measured
}

/// Bytes of the plain files in `dir`.
fn files_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

/// Removes the plain files directly in `dir`.
fn remove_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let files: Vec<PathBuf> =
        entries.flatten().filter(|e| e.metadata().is_ok_and(|m| m.is_file())).map(|e| e.path()).collect();
    files.iter().for_each(|f| drop(std::fs::remove_file(f)));
}

/// Free bytes for unprivileged users on the file system holding `path` (or its nearest
/// existing parent).
#[allow(unsafe_code)] // reason: statvfs(3) has no safe wrapper in our dependencies; it writes only the buffer passed.
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let mut at = path;
    while !at.exists() {
        at = at.parent().unwrap_or(Path::new("/"));
    }
    let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path and `stat` a buffer of the right type.
    if unsafe { libc::statvfs(c.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs succeeded, so it filled `stat`.
    let stat = unsafe { stat.assume_init() };
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// A byte count as people read it: `100 MiB`, `10 GiB`, `512 B`.
pub fn size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, scale) in UNITS {
        if bytes >= scale {
            let value = bytes as f64 / scale as f64;
            return if bytes.is_multiple_of(scale) {
                format!("{} {unit}", bytes / scale)
            } else {
                format!("{value:.1} {unit}")
            };
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(super::size(100 << 20), "100 MiB");
        assert_eq!(super::size(10 << 30), "10 GiB");
        assert_eq!(super::size(1536), "1.5 KiB");
        assert_eq!(super::size(12), "12 B");
    }

    #[test]
    fn free_space_is_read_for_a_path_that_does_not_exist_yet() {
        let dir = tempfile::tempdir().expect("dir");
        assert!(super::free_bytes(&dir.path().join("not/yet")).expect("statvfs") > 0);
    }
}
