//! Running a job as its own process group, with its GPUs in the environment and its output in
//! files; stopping the whole group.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use gantry_server::api::types::Assignment;
use tokio::process::{Child, Command};

use super::error::AgentError;

/// Where a job's output goes: `<logs>/<job id>/stdout` and `stderr`.
pub fn log_dir(logs: &Path, job_id: i64) -> PathBuf {
    logs.join(job_id.to_string())
}

/// Starts the job. The child leads a new process group, so one signal reaches everything it
/// starts; its pid is written to `<state>/pids/<job id>` so a restarted agent can clean up.
pub fn spawn(a: &Assignment, logs: &Path, state: &Path) -> Result<Child, AgentError> {
    let io = |what: String| move |source| AgentError::Io { what, source };
    let dir = log_dir(logs, a.job_id);
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let stdout = std::fs::File::create(dir.join("stdout")).map_err(io("creating stdout log".into()))?;
    let stderr = std::fs::File::create(dir.join("stderr")).map_err(io("creating stderr log".into()))?;
    let (program, args) = a.command.split_first().ok_or_else(|| AgentError::Io {
        what: "starting the job".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"),
    })?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .env("CUDA_VISIBLE_DEVICES", a.gpu_uuids.join(","))
        .env("GANTRY_JOB_ID", a.job_id.to_string());
    if a.gpu_memory_mib > 0 {
        cmd.env("GANTRY_GPU_MEMORY_LIMIT_MIB", a.gpu_memory_mib.to_string());
        if mps_in_use() {
            let limits: Vec<String> =
                a.gpu_uuids.iter().map(|u| format!("{u}={}M", a.gpu_memory_mib)).collect();
            cmd.env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", limits.join(","));
        }
        if a.gpu_compute_pct > 0 && mps_in_use() {
            cmd.env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", a.gpu_compute_pct.to_string());
        }
    }
    let child = cmd.spawn().map_err(io(format!("starting {program}")))?;
    if let Some(pid) = child.id() {
        let pids = state.join("pids");
        let _ = std::fs::create_dir_all(&pids);
        let _ = std::fs::write(pids.join(a.job_id.to_string()), pid.to_string());
    }
    Ok(child)
}

/// Forgets a finished job's pid file.
pub fn forget(state: &Path, job_id: i64) {
    let _ = std::fs::remove_file(state.join("pids").join(job_id.to_string()));
}

/// Whether an MPS control daemon's pipe directory is configured.
fn mps_in_use() -> bool {
    std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").is_some() || Path::new("/tmp/nvidia-mps/control").exists()
}

/// Sends `signal` to the process group `pgid`.
#[allow(unsafe_code)] // reason: kill(2) on a process group has no safe wrapper in std.
pub fn signal_group(pgid: u32, signal: i32) {
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// Kills the process groups a previous run of the agent left behind (their jobs were requeued
/// when this agent registered again).
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
