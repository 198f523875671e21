//! One attempt of a job, from its sandbox to the report of its end.
//!
//! Starting: the attempt's user, work directory and cgroup come from the [`Sandbox`], its
//! environment from [`super::env`], and its output goes through pipes to [`super::logs`].
//!
//! Ending, in this order, once the first process has exited (by itself or because it was
//! stopped): the rest of the attempt is ended (its whole cgroup, or without cgroups its process
//! group), so no daemon outlives the job; the output is waited for until it is on disk, so that
//! a client that sees the job finished and then reads its log reads all of it; the work
//! directory is removed; and only then is the end reported to the job table. The table keeps no
//! handle on the process, only its pid and cgroup for signals.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use gantry_api::job_logs;
use gantry_api::model::JobId;
use gantry_api::types::Assignment;
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::cgroup::Cgroup;
use super::child::{Confinement, Credentials};
use super::env;
use super::error::AgentError;
use super::logs;
use super::process::{self, Launch};
use super::sandbox::{self, Sandbox};
use super::users::Identity;

/// How long the end of an attempt waits for its output to reach disk. Only processes outside
/// the attempt's cgroup (there are none when cgroups are used) can hold the pipes open longer.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// What every attempt needs from the agent.
#[derive(Debug, Clone)]
pub struct Context {
    /// Users, work directories, cgroups.
    pub sandbox: Arc<Sandbox>,
    /// Root of the jobs' log directories.
    pub logs: PathBuf,
    /// The agent's state directory (pid files).
    pub state: PathBuf,
}

/// A started attempt, as the job table keeps it.
#[derive(Debug)]
pub struct Started {
    /// Its first process, also its process group.
    pub pid: u32,
    /// Its cgroup, when cgroups are used.
    pub cgroup: Option<Arc<Cgroup>>,
}

/// An attempt ended and was cleaned up.
#[derive(Debug)]
pub struct Ended {
    /// The job.
    pub job_id: JobId,
    /// The attempt.
    pub attempt: u32,
    /// How its first process ended (or why waiting for it failed).
    pub status: std::io::Result<ExitStatus>,
    /// Whether the kernel killed a process of it for exceeding its memory limit.
    pub oom_killed: bool,
}

/// Starts attempt `a`; a task in `tasks` reports its end on `exits`.
pub fn start(
    a: &Assignment,
    ctx: &Context,
    exits: &mpsc::UnboundedSender<Ended>,
    tasks: &mut JoinSet<()>,
) -> Result<Started, AgentError> {
    let (user, credentials) = ctx.sandbox.user_for(&a.team);
    let workdir = ctx.sandbox.make_workdir(a.job_id, a.attempt, user)?;
    let cgroup = match ctx.sandbox.cgroup(a) {
        Ok(c) => c.map(Arc::new),
        Err(e) => {
            sandbox::remove_dir(&workdir);
            return Err(e);
        }
    };
    let (child, output) = match launch(a, ctx, user, credentials, &workdir, cgroup.as_deref()) {
        Ok(launched) => launched,
        Err(e) => {
            // Nothing ran in the group: removing it does not wait.
            if let Some(c) = &cgroup {
                let _ = c.remove();
            }
            sandbox::remove_dir(&workdir);
            return Err(e);
        }
    };
    let pid = child.id().unwrap_or_default();
    process::remember(&ctx.state, a.job_id, pid);
    let end = End { job_id: a.job_id, attempt: a.attempt, pid, cgroup: cgroup.clone(), output, workdir };
    tasks.spawn(end.wait(child, exits.clone()));
    Ok(Started { pid, cgroup })
}

type Output = Vec<oneshot::Receiver<()>>;

fn launch(
    a: &Assignment,
    ctx: &Context,
    user: &Identity,
    credentials: Option<Credentials>,
    workdir: &std::path::Path,
    cgroup: Option<&Cgroup>,
) -> Result<(Child, Output), AgentError> {
    let env = env::build(a, &user.name, workdir)?;
    let cwd = ctx.sandbox.make_subdir(workdir, a.workdir.as_deref(), user)?;
    let dir = job_logs::dir(&ctx.logs, a.job_id);
    logs::private_dir(&dir)?;
    let limit = if a.log_limit_bytes == 0 { job_logs::DEFAULT_LIMIT } else { a.log_limit_bytes };
    let (stdout, stdout_done) = logs::capture(&dir, "stdout", limit)?;
    let (stderr, stderr_done) = logs::capture(&dir, "stderr", limit)?;
    let join = cgroup.map(Cgroup::procs_files).unwrap_or_default();
    let confinement = Confinement::new(&join, credentials)
        .map_err(|source| AgentError::Io { what: "preparing the job's cgroup".into(), source })?;
    let launch = Launch { argv: &a.command, env: &env, cwd: &cwd, confinement, stdout, stderr };
    Ok((process::spawn(launch)?, vec![stdout_done, stderr_done]))
}

/// What is left to do when an attempt's first process exits.
struct End {
    job_id: JobId,
    attempt: u32,
    pid: u32,
    cgroup: Option<Arc<Cgroup>>,
    output: Output,
    workdir: PathBuf,
}

impl End {
    async fn wait(self, mut child: Child, exits: mpsc::UnboundedSender<Ended>) {
        let status = child.wait().await;
        let (pid, cgroup) = (self.pid, self.cgroup);
        let oom_killed =
            tokio::task::spawn_blocking(move || end_the_rest(pid, cgroup.as_deref())).await.unwrap_or(false);
        let drained = async {
            for done in self.output {
                let _ = done.await;
            }
        };
        if tokio::time::timeout(OUTPUT_DRAIN, drained).await.is_err() {
            tracing::warn!(job = self.job_id, "output is still being written after the job ended");
        }
        let workdir = self.workdir;
        let _ = tokio::task::spawn_blocking(move || sandbox::remove_dir(&workdir)).await;
        let ended = Ended { job_id: self.job_id, attempt: self.attempt, status, oom_killed };
        let _ = exits.send(ended);
    }
}

/// Ends every process the attempt left; returns whether its memory limit killed one. Blocks.
fn end_the_rest(pid: u32, cgroup: Option<&Cgroup>) -> bool {
    match cgroup {
        Some(c) => {
            let oom_killed = c.oom_killed();
            if let Err(e) = c.remove() {
                tracing::warn!(error = %e, "could not remove a job's cgroup");
            }
            oom_killed
        }
        None => {
            process::signal_group(pid, libc::SIGKILL);
            false
        }
    }
}
