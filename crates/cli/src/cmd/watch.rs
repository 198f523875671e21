//! Waiting for a job's result, as `sbatch --wait` and `srun` do: state changes go to stderr and
//! the command exits with the job's exit status, so scripts can chain on it.
//!
//! The status of a job that did not exit by itself: `1` for one that failed without a status
//! (killed by a signal, could not start, ran out of retries), `130` for one that was cancelled,
//! `124` for one its time limit stopped (as `timeout(1)`).

use std::time::Duration;

use gantry_api::types::JobDetail;
use gantry_store::{Job, JobState};

use super::client::Api;

/// How often the state is read while waiting.
pub const POLL: Duration = Duration::from_millis(300);

/// The job ended other than with success: the command exits with this status (and prints
/// nothing more; the state change was already said).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobExitCode(pub u8);

impl std::fmt::Display for JobExitCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the job exited with status {}", self.0)
    }
}

impl std::error::Error for JobExitCode {}

/// `Ok` for a job that succeeded, else the status the command exits with.
pub fn result_of(job: &Job) -> anyhow::Result<()> {
    let code = match (job.state, job.exit_code) {
        (JobState::Succeeded, _) => return Ok(()),
        (JobState::Cancelled, _) => 130,
        (JobState::Timeout, _) => 124,
        (_, Some(code)) if (1..=255).contains(&code) => code as u8,
        _ => 1,
    };
    Err(JobExitCode(code).into())
}

/// Says each state change of a job once, on stderr.
#[derive(Debug, Default)]
pub struct Announcer {
    last: Option<(JobState, Option<String>)>,
    /// Print nothing.
    pub quiet: bool,
}

impl Announcer {
    /// An announcer that prints (unless `quiet`).
    pub fn new(quiet: bool) -> Self {
        Self { last: None, quiet }
    }

    /// Prints the job's state if it changed since the last call.
    pub fn saw(&mut self, job: &Job) {
        let now = (job.state, job.reason.clone());
        if self.last.as_ref() == Some(&now) {
            return;
        }
        // A pending job's reason changes as the queue moves; say it only when the state changes.
        let state_changed = self.last.as_ref().map(|l| l.0) != Some(job.state);
        self.last = Some(now);
        if self.quiet || !state_changed {
            return;
        }
        eprintln!("gantry: {}", describe(job));
    }
}

/// `job 12 running on node-a (GPUs 0,1)`, `job 12 failed: exit status 3`, ….
pub fn describe(job: &Job) -> String {
    let mut line = format!("job {} {}", job.id, job.state);
    if job.state.is_active()
        && let Some(node) = &job.node_id
    {
        line += &format!(" on {node}");
    }
    if let Some(code) = job.exit_code.filter(|_| job.state.is_terminal()) {
        line += &format!(": exit status {code}");
    }
    if let Some(reason) = job.reason.as_ref().filter(|r| !r.starts_with("exited with status")) {
        line += &format!(" ({})", super::table::printable(reason));
    }
    line
}

/// Reads the job.
pub async fn job(api: &Api, id: i64) -> anyhow::Result<Job> {
    Ok(api.get::<JobDetail>(&format!("/v1/jobs/{id}")).await?.job)
}

/// Waits until the job ends, announcing its state changes; returns it as it ended.
pub async fn until_done(api: &Api, id: i64, announce: &mut Announcer) -> anyhow::Result<Job> {
    loop {
        let job = job(api, id).await?;
        announce.saw(&job);
        if job.state.is_terminal() {
            return Ok(job);
        }
        tokio::time::sleep(POLL).await;
    }
}
