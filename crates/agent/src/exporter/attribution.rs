//! Which job a GPU process belongs to.
//!
//! A job run in the agent's sandbox is in the cgroup `gantry/<scope>/<job id>-<attempt>`, which
//! the job cannot leave or rename, so that path is believed first. Otherwise: the agent sets
//! `GANTRY_JOB_ID` in the environment of what it launches, so the process or one of its
//! ancestors carries it in `/proc/<pid>/environ` (a job controls its own environment, which is
//! why this comes second). When that file cannot be read (another user's process without
//! `CAP_SYS_PTRACE`), a cgroup path segment named `gantry-job-<id>` (optionally
//! `.scope`/`.slice`) also identifies the job. Otherwise the job is `unknown`.

use gantry_gpu::ProcessUsage;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Environment variable the agent sets on jobs.
pub const JOB_ENV: &str = "GANTRY_JOB_ID";
/// Job label value when nothing says which job a process is in.
pub const UNKNOWN_JOB: &str = "unknown";
const MAX_ANCESTORS: usize = 32;

/// Looks jobs up under a `/proc` root and remembers answers per pid.
#[derive(Debug)]
pub struct Attributor {
    proc_root: PathBuf,
    cache: HashMap<u32, Arc<str>>,
    unknown: Arc<str>,
}

impl Attributor {
    /// Reads from `proc_root` (normally `/proc`).
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self { proc_root: proc_root.into(), cache: HashMap::new(), unknown: Arc::from(UNKNOWN_JOB) }
    }

    /// Jobs of `processes`, in order. The backend's own job id (simulated processes) wins;
    /// pids no longer listed are forgotten so a reused pid is looked up afresh.
    pub fn attribute(&mut self, processes: &[ProcessUsage]) -> Vec<Arc<str>> {
        self.cache.retain(|pid, _| processes.iter().any(|p| p.pid == *pid));
        processes
            .iter()
            .map(|p| match &p.job_id {
                Some(job) => Arc::from(job.as_str()),
                None => {
                    if let Some(job) = self.cache.get(&p.pid) {
                        return job.clone();
                    }
                    let job = self.lookup(p.pid).map_or_else(|| self.unknown.clone(), Arc::from);
                    self.cache.insert(p.pid, job.clone());
                    job
                }
            })
            .collect()
    }

    /// The job of `pid` from its sandbox cgroup, else its environment or an ancestor's, else
    /// another cgroup naming it.
    pub fn lookup(&self, pid: u32) -> Option<String> {
        if let Some(job) = self.job_from_sandbox(pid) {
            return Some(job);
        }
        let mut current = pid;
        for _ in 0..MAX_ANCESTORS {
            if let Some(job) = self.job_from_environ(current) {
                return Some(job);
            }
            match self.parent(current) {
                Some(parent) if parent > 1 && parent != current => current = parent,
                _ => break,
            }
        }
        self.job_from_cgroup(pid)
    }

    fn job_from_environ(&self, pid: u32) -> Option<String> {
        let raw = std::fs::read(self.proc_root.join(pid.to_string()).join("environ")).ok()?;
        raw.split(|b| *b == 0).find_map(|entry| {
            let value = entry.strip_prefix(JOB_ENV.as_bytes())?.strip_prefix(b"=")?;
            let job = String::from_utf8_lossy(value).into_owned();
            (!job.is_empty()).then_some(job)
        })
    }

    fn parent(&self, pid: u32) -> Option<u32> {
        let stat = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat")).ok()?;
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses, so split at the last ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_whitespace().nth(1)?.parse().ok()
    }

    /// `<job>` from a cgroup path ending `gantry/<scope>/<job>-<attempt>` (the agent's sandbox).
    fn job_from_sandbox(&self, pid: u32) -> Option<String> {
        let text = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("cgroup")).ok()?;
        text.lines().find_map(|line| {
            let segments: Vec<&str> = line.rsplit(':').next().unwrap_or_default().split('/').collect();
            let [.., "gantry", _scope, leaf] = segments.as_slice() else {
                return None;
            };
            let (job, attempt) = leaf.split_once('-')?;
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            (digits(job) && digits(attempt)).then(|| job.to_owned())
        })
    }

    fn job_from_cgroup(&self, pid: u32) -> Option<String> {
        let text = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("cgroup")).ok()?;
        text.lines().flat_map(|line| line.rsplit(':').next().unwrap_or_default().split('/')).find_map(|seg| {
            let id = seg.strip_prefix("gantry-job-")?;
            let id = id.strip_suffix(".scope").or_else(|| id.strip_suffix(".slice")).unwrap_or(id);
            (!id.is_empty()).then(|| id.to_owned())
        })
    }
}
