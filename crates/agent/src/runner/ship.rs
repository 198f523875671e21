//! Shipping job output to the server. An agent on another machine than the server keeps its
//! jobs' output on its own disk (capped and rotated, see [`super::logs`]); each heartbeat carries
//! what the server has not acknowledged yet, at most [`BUDGET`] bytes, read from those files.
//! An ended job's exit is reported only once all its output has been shipped, so a client that
//! sees the job finished reads all of it through the server. Output rotated away on the agent
//! before it was shipped is skipped (the next chunk starts later; the server records the gap).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use base64::Engine;
use gantry_api::job_logs;
use gantry_api::model::{JobId, LogChunk};

/// Bytes of output per heartbeat, over all jobs (base64 makes it 4/3 on the wire).
pub const BUDGET: u64 = 256 * 1024;

const STREAMS: [&str; 2] = ["stdout", "stderr"];

/// What the server has of each attempt's streams.
#[derive(Debug)]
pub struct Shipper {
    logs: PathBuf,
    shipped: HashMap<(JobId, u32, &'static str), u64>,
}

impl Shipper {
    /// Ships output found under `logs` (`<logs>/<job id>/<attempt>/<stream>`).
    pub fn new(logs: PathBuf) -> Self {
        Self { logs, shipped: HashMap::new() }
    }

    /// New output of `attempts` (job, attempt, ended), within the budget, and the ended jobs
    /// whose output is all in these chunks or already shipped.
    pub fn collect(&self, attempts: &[(JobId, u32, bool)]) -> (Vec<LogChunk>, HashSet<JobId>) {
        let mut budget = BUDGET;
        let mut chunks = Vec::new();
        let mut drained = HashSet::new();
        for &(job, attempt, ended) in attempts {
            let dir = job_logs::attempt_dir(&self.logs, job, attempt);
            let mut complete = true;
            for stream in STREAMS {
                let from = self.shipped.get(&(job, attempt, stream)).copied().unwrap_or(0);
                let chunk = match job_logs::read(&dir, stream, from, budget) {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        tracing::warn!(job, stream, error = %e, "cannot read job output to ship");
                        continue;
                    }
                };
                let len = chunk.bytes.len() as u64;
                budget -= len.min(budget);
                if len > 0 {
                    let data = base64::engine::general_purpose::STANDARD.encode(&chunk.bytes);
                    chunks.push(LogChunk {
                        job_id: job,
                        attempt,
                        stream: stream.into(),
                        offset: chunk.offset,
                        data,
                    });
                }
                if budget == 0 {
                    complete = false;
                }
            }
            if ended && complete {
                drained.insert(job);
            }
        }
        (chunks, drained)
    }

    /// The server has these chunks.
    pub fn acknowledged(&mut self, chunks: &[LogChunk]) {
        for c in chunks {
            let Some(stream) = STREAMS.iter().find(|s| **s == c.stream) else { continue };
            let len = base64::engine::general_purpose::STANDARD.decode(&c.data).map_or(0, |b| b.len() as u64);
            let end = self.shipped.entry((c.job_id, c.attempt, stream)).or_insert(0);
            *end = (*end).max(c.offset + len);
        }
    }

    /// Forgets attempts that are no longer on this node.
    pub fn retain(&mut self, live: &[(JobId, u32, bool)]) {
        let live: HashSet<(JobId, u32)> = live.iter().map(|(j, a, _)| (*j, *a)).collect();
        self.shipped.retain(|(job, attempt, _), _| live.contains(&(*job, *attempt)));
    }
}
