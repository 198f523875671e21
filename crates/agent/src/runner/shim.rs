//! The per-attempt supervisor ("shim", as containerd-shim or conmon): what lets a job outlive
//! the agent that started it.
//!
//! A job's output goes through pipes to capped files ([`super::logs`]); whoever reads the pipes
//! must live as long as the job, and whoever waits for the job must be there when it ends. The
//! agent is neither: it is stopped for upgrades and may crash. So the agent starts one small
//! process per attempt, the same executable run as `gantry __shim` (the agent finds it through
//! [`super::AgentConfig::shim`]), in its own session so that a Ctrl-C meant for the agent does
//! not reach it. The agent writes the attempt's [`Spec`] to the shim's stdin; the shim:
//!
//! 1. starts the job exactly as the agent used to: in its cgroup, as its user, in its work
//!    directory, in its network namespace when it has one, with its environment, its output
//!    piped into capped files it copies itself;
//! 2. answers `started <pid>` (or `error <why>`) on its stdout, which the agent waits for;
//! 3. waits for the job's first process, then ends the rest of the attempt (its whole cgroup,
//!    daemons included, or its process group), waits for the output to reach disk, removes
//!    the work directory and unplugs the network namespace (CNI DEL, unmount, remove);
//! 4. writes how the job ended to `<state>/attempts/<job>-<attempt>.exit`, atomically, and exits.
//!
//! The shim stays in the agent's cgroup, not the job's: ending the job's group must not end the
//! shim before it has recorded the exit. Everything else about the attempt (stop signals, time
//! limits, GPU grants, reports) stays with the agent, which finds the attempt again after a
//! restart through its record ([`super::record`]).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::cgroup::{Cgroup, CgroupRef};
use super::child::{Confinement, Credentials};
use super::error::AgentError;
use super::mounts::{MountSpec, Private};
use super::network::NetRef;
use super::process::{self, Launch};
use super::record::{self, Exit};
use super::{logs, sandbox};

/// The argument that makes the `gantry` binary a shim.
pub const ARG: &str = "__shim";

/// How long the end of an attempt waits for its output to reach disk. Only processes outside
/// the attempt's cgroup (there are none when cgroups are used) can hold the pipes open longer.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// Everything the shim needs to run one attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// The job.
    pub job_id: i64,
    /// The attempt.
    pub attempt: u32,
    /// argv.
    pub argv: Vec<String>,
    /// The whole environment.
    pub env: BTreeMap<String, String>,
    /// Where the job starts (the work directory, or the directory it asked for inside it).
    pub cwd: PathBuf,
    /// The work directory (removed when the attempt ends).
    pub workdir: PathBuf,
    /// Who the job runs as (`None`: the agent's user).
    pub user: Option<Credentials>,
    /// The attempt's cgroup.
    pub cgroup: Option<CgroupRef>,
    /// Its own mount namespace (`None`: the node's mounts).
    #[serde(default)]
    pub mounts: Option<MountSpec>,
    /// The attempt's log directory.
    pub logs: PathBuf,
    /// At most this many bytes of each stream are kept.
    pub log_limit: u64,
    /// The agent's state directory (the exit file goes to its `attempts/`).
    pub state: PathBuf,
    /// The attempt's network namespace (`None`: the node's network).
    #[serde(default)]
    pub net: Option<NetRef>,
    /// The container `argv` runs (an OCI runtime), removed when the attempt ends (`None`: a
    /// process job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
}

/// An attempt's container: what the shim removes once it has ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Container {
    /// Its directory: the bundle, the overlay's mount point, upper and work directories.
    pub dir: PathBuf,
    /// The OCI runtime.
    pub runtime: PathBuf,
    /// The runtime's state directory (`--root`).
    pub state_root: PathBuf,
    /// The container's id.
    pub id: String,
}

impl Container {
    /// Deletes the container's runtime state and unmounts and removes its root file system.
    pub fn remove(&self) {
        let _ = Command::new(&self.runtime)
            .arg("--root")
            .arg(&self.state_root)
            .args(["delete", "--force", &self.id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        gantry_image::store::Rootfs::at(&self.dir).remove();
    }
}

/// A shim that started its job.
#[derive(Debug)]
pub struct Started {
    /// The shim process (a child of this agent).
    pub shim: std::process::Child,
    /// The shim's start time, for [`record::is_alive`].
    pub shim_start: u64,
    /// The job's first process.
    pub pid: u32,
}

/// Starts `exe` as the shim of `spec` and waits until it has started the job. Blocks briefly.
pub fn launch(exe: &Path, spec: &Spec) -> Result<Started, AgentError> {
    let io = |what: &str| {
        let what = what.to_owned();
        move |source| AgentError::Io { what, source }
    };
    let mut shim = Command::new(exe)
        .arg(ARG)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io(&format!("starting the job's supervisor {}", exe.display())))?;
    let json = serde_json::to_vec(spec).map_err(|e| io("encoding the job")(std::io::Error::other(e)))?;
    let answer = (|| {
        let mut stdin = shim.stdin.take().ok_or_else(|| std::io::Error::other("no stdin"))?;
        stdin.write_all(&json)?;
        drop(stdin);
        let stdout = shim.stdout.take().ok_or_else(|| std::io::Error::other("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        Ok(line)
    })();
    let line = match answer {
        Ok(line) => line,
        Err(e) => {
            let _ = shim.kill();
            let _ = shim.wait();
            return Err(io("talking to the job's supervisor")(e));
        }
    };
    if let Some(pid) = line.strip_prefix("started ").and_then(|p| p.trim().parse().ok()) {
        let shim_start = record::start_time(shim.id()).unwrap_or_default();
        return Ok(Started { shim, shim_start, pid });
    }
    let _ = shim.wait();
    let why = line.strip_prefix("error ").unwrap_or("the job's supervisor ended before starting it");
    Err(AgentError::Io {
        what: "starting the job".into(),
        source: std::io::Error::other(why.trim().to_owned()),
    })
}

/// The shim's main: reads a [`Spec`] on stdin, runs the attempt, records its exit. Returns the
/// process's exit status.
pub fn main() -> i32 {
    let mut input = Vec::new();
    if std::io::stdin().read_to_end(&mut input).is_err() {
        return 2;
    }
    let spec: Spec = match serde_json::from_slice(&input) {
        Ok(spec) => spec,
        Err(e) => {
            println!("error the job's description is unreadable: {e}");
            return 2;
        }
    };
    new_session();
    let cgroup = spec.cgroup.as_ref().map(CgroupRef::open);
    let (mut child, output) = match start(&spec, cgroup.as_ref()) {
        Ok(started) => started,
        Err(e) => {
            println!("error {e}");
            return 1;
        }
    };
    let pid = child.id();
    println!("started {pid}");
    let _ = std::io::stdout().flush();
    let status = match child.wait() {
        Ok(status) => status,
        // Not our child any more: nothing is known of how it ended, and no exit is written.
        Err(_) => return 1,
    };
    let oom_killed = end_the_rest(pid, cgroup.as_ref());
    let deadline = Instant::now() + OUTPUT_DRAIN;
    for mut done in output {
        while done.try_recv().is_err_and(|e| e == tokio::sync::oneshot::error::TryRecvError::Empty)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    if let Some(container) = &spec.container {
        container.remove();
    }
    sandbox::remove_dir(&spec.workdir);
    if let Some(net) = &spec.net {
        // Its stderr goes nowhere; what a failed DEL leaves, the agent's next start removes.
        let _ = net.detach();
    }
    let exit = Exit { status: status.into_raw(), oom_killed };
    match record::save_exit(&spec.state, spec.job_id, spec.attempt, &exit) {
        Ok(()) => 0,
        // Its stderr goes nowhere; the agent reports the attempt as lost track of.
        Err(_) => 1,
    }
}

type Output = Vec<tokio::sync::oneshot::Receiver<()>>;

fn start(spec: &Spec, cgroup: Option<&Cgroup>) -> Result<(std::process::Child, Output), AgentError> {
    let (stdout, stdout_done) = logs::capture(&spec.logs, "stdout", spec.log_limit)?;
    let (stderr, stderr_done) = logs::capture(&spec.logs, "stderr", spec.log_limit)?;
    let join = cgroup.map(Cgroup::procs_files).unwrap_or_default();
    let netns =
        spec.net.as_ref().map(NetRef::open).transpose().map_err(|source| AgentError::Io {
            what: "opening the job's network namespace".into(),
            source,
        })?;
    let confinement = Confinement::new(&join, spec.user.clone())
        .map_err(|source| AgentError::Io { what: "preparing the job's cgroup".into(), source })?
        .with_netns(netns);
    let mounts = spec.mounts.as_ref().map(Private::new).transpose();
    let mounts =
        mounts.map_err(|source| AgentError::Io { what: "preparing the job's mounts".into(), source })?;
    let confinement = confinement.with_mounts(mounts);
    let launch = Launch { argv: &spec.argv, env: &spec.env, cwd: &spec.cwd, confinement, stdout, stderr };
    Ok((process::spawn(launch)?, vec![stdout_done, stderr_done]))
}

/// Leaves the agent's session and process group: signals meant for the agent (a Ctrl-C in its
/// terminal, a signal to its group) do not reach the shim.
#[allow(unsafe_code)] // reason: setsid(2) has no wrapper in std.
fn new_session() {
    // SAFETY: setsid takes no arguments and touches no memory of ours.
    unsafe {
        libc::setsid();
    }
}

/// Ends every process the attempt left; returns whether its memory limit killed one.
fn end_the_rest(pid: u32, cgroup: Option<&Cgroup>) -> bool {
    match cgroup {
        Some(c) => {
            let oom_killed = c.oom_killed();
            let _ = c.remove();
            oom_killed
        }
        None => {
            process::signal_group(pid, libc::SIGKILL);
            false
        }
    }
}

/// How an ended attempt's first process ended, from its exit.
pub fn status(exit: &Exit) -> std::process::ExitStatus {
    std::process::ExitStatus::from_raw(exit.status)
}
