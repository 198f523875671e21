//! Workload files in the Pollux/Sia format: `name,time,application,num_replicas,batch_size`,
//! optionally `team` (otherwise teams are assigned round-robin by the caller) and `priority`.

use std::path::{Path, PathBuf};

use crate::trace::{Table, TraceError};

/// One job of a workload file.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    /// Unique name within the file.
    pub name: String,
    /// Submission time, seconds from the start (may be fractional).
    pub submit: f64,
    /// Application profile name.
    pub app: String,
    /// GPUs requested.
    pub replicas: u32,
    /// Global batch size.
    pub batch: u64,
    /// Team, when the file names one.
    pub team: Option<String>,
    /// Priority (higher runs first), 0 when the file has none.
    pub priority: i32,
}

/// Reads one workload file.
pub fn read_workload(path: &Path) -> Result<Vec<JobRow>, TraceError> {
    let mut table = Table::open(path, &["name", "time", "application", "num_replicas", "batch_size"])?;
    table.optional("team");
    table.optional("priority");
    let mut jobs = Vec::new();
    while let Some(row) = table.next_row()? {
        let replicas = row.float("num_replicas")?;
        if !(1.0..=4096.0).contains(&replicas) {
            return Err(row.bad("num_replicas", format!("expected 1 to 4096 GPUs, found {replicas}")));
        }
        let submit = row.float("time")?;
        if submit < 0.0 {
            return Err(row.bad("time", format!("a submission time cannot be negative, found {submit}")));
        }
        let team = if row.has("team") { Some(row.text("team")?.trim().to_string()) } else { None };
        let priority = if row.has("priority") { row.float("priority")? as i32 } else { 0 };
        jobs.push(JobRow {
            name: row.text("name")?.trim().to_string(),
            submit,
            app: row.text("application")?.trim().to_string(),
            replicas: replicas as u32,
            batch: row.float("batch_size")?.max(1.0) as u64,
            team: team.filter(|t| !t.is_empty()),
            priority,
        });
    }
    let mut jobs = table.finish(jobs)?;
    jobs.sort_by(|a, b| a.submit.total_cmp(&b.submit));
    Ok(jobs)
}

/// The workload files a `--workload` argument names: the file itself, or every `*.csv` in a
/// directory, sorted by name with numbers compared as numbers (`workload-2` before `workload-10`).
pub fn workload_files(path: &Path) -> Result<Vec<PathBuf>, TraceError> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|error| TraceError::Io { path: path.into(), error })?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "csv"))
        .collect();
    files.sort_by_key(|p| {
        natural_key(&p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
    });
    if files.is_empty() {
        return Err(TraceError::NoRows { path: path.join("*.csv") });
    }
    Ok(files)
}

fn natural_key(name: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut digits = String::new();
    for c in name.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                out.push((std::mem::take(&mut text), digits.parse().unwrap_or(u64::MAX)));
                digits.clear();
            }
            text.push(c);
        }
    }
    out.push((text, digits.parse().unwrap_or(0)));
    out
}
