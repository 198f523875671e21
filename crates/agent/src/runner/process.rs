//! Starting a job's process as prepared by the sandbox (the shim does, [`super::shim`]),
//! signalling processes, and the pid files of agents from before shims.
//!
//! The process leads its own process group: where cgroups are not available (an agent not
//! running as root) the group is how a job is stopped.

use std::collections::BTreeMap;
use std::io::PipeWriter;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::child::Confinement;
use super::error::AgentError;

/// Everything needed to start one attempt.
#[derive(Debug)]
pub struct Launch<'a> {
    /// argv.
    pub argv: &'a [String],
    /// The whole environment.
    pub env: &'a BTreeMap<String, String>,
    /// Working directory.
    pub cwd: &'a Path,
    /// Cgroup and user to enter before exec.
    pub confinement: Confinement,
    /// Write end of the stdout pipe.
    pub stdout: PipeWriter,
    /// Write end of the stderr pipe.
    pub stderr: PipeWriter,
}

/// Starts the process. The returned child holds the only copies of the pipes' write ends
/// besides the job's, so the readers see the end of output when the job's processes are gone.
pub fn spawn(launch: Launch<'_>) -> Result<Child, AgentError> {
    let (program, args) = launch.argv.split_first().ok_or_else(|| AgentError::Io {
        what: "starting the job".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"),
    })?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(launch.env)
        .current_dir(launch.cwd)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(launch.stdout)
        .stderr(launch.stderr);
    launch.confinement.install(&mut cmd);
    let child = cmd.spawn().map_err(|source| AgentError::Io { what: format!("starting {program}"), source });
    // Dropping `cmd` closes the agent's copies of the pipes' write ends.
    drop(cmd);
    child
}

/// Sends `signal` to the process group `pgid`.
pub fn signal_group(pgid: u32, signal: i32) {
    if let Ok(pgid) = i32::try_from(pgid)
        && pgid > 1
    {
        kill(-pgid, signal);
    }
}

/// Sends `signal` to the process `pid`.
pub fn signal_pid(pid: u32, signal: i32) {
    if let Ok(pid) = i32::try_from(pid)
        && pid > 1
    {
        kill(pid, signal);
    }
}

#[allow(unsafe_code)] // reason: kill(2) has no safe wrapper in std for signals other than SIGKILL.
fn kill(target: i32, signal: i32) {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(target, signal);
    }
}

/// Kills the process groups recorded in `<state>/pids` by agents before attempts had shims and
/// records (see [`super::record`]); their jobs were requeued when the agent registered again.
pub fn kill_orphans(state: &Path) {
    let Ok(entries) = std::fs::read_dir(state.join("pids")) else {
        return;
    };
    for entry in entries.flatten() {
        if let Some(pgid) = std::fs::read_to_string(entry.path()).ok().and_then(|s| s.trim().parse().ok()) {
            tracing::info!(pgid, "killing a job left by a previous agent run");
            signal_group(pgid, libc::SIGKILL);
        }
        let _ = std::fs::remove_file(entry.path());
    }
}

/// The process group of a pid, from `/proc/<pid>/stat`.
pub fn pgid_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(2)?.parse().ok()
}
