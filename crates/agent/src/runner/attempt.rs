//! One attempt of a job, from its sandbox to the report of its end.
//!
//! Starting: the attempt's user, work directory, cgroup and network namespace come from the
//! [`Sandbox`], its environment from [`super::env`] (a gang's `MASTER_ADDR` naming this node
//! becomes the bridge's gateway, [`super::network`]; rank 0 publishes `MASTER_PORT`); its shim ([`super::shim`]) starts it and copies its output
//! to [`super::logs`]. The agent then records the attempt ([`super::record`]) so that a
//! restarted agent finds it again.
//!
//! Ending happens in the shim, in this order, once the first process has exited (by itself or
//! because it was stopped): the rest of the attempt is ended (its whole cgroup, or without
//! cgroups its process group), so no daemon outlives the job; the output is waited for until it
//! is on disk, so that a client that sees the job finished and then reads its log reads all of
//! it; the work directory is removed; and only then is the exit written. A task here watches
//! the shim and reports the end to the job table once the shim is gone. The table keeps no
//! handle on the job's process, only its pid and cgroup for signals.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use gantry_api::job_logs;
use gantry_api::model::JobId;
use gantry_api::types::Assignment;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::cgroup::Cgroup;
use super::env;
use super::error::AgentError;
use super::logs;
use super::network::{self, Attached};
use super::record::{self, Record};
use super::sandbox::{self, Sandbox};
use super::shim::{self, Spec};
use super::users::Identity;

/// How often a task looks whether its attempt's shim is still there.
const POLL: Duration = Duration::from_millis(100);

/// What every attempt needs from the agent.
#[derive(Debug, Clone)]
pub struct Context {
    /// Users, work directories, cgroups.
    pub sandbox: Arc<Sandbox>,
    /// Root of the jobs' log directories.
    pub logs: PathBuf,
    /// The agent's state directory (attempt records).
    pub state: PathBuf,
    /// The executable run as each attempt's shim.
    pub shim: PathBuf,
    /// The node's GPU UUIDs and their device minors ([`super::devices`]).
    pub minors: Arc<std::collections::BTreeMap<String, u32>>,
    /// Container images and the OCI runtime (`None`: the store could not be opened).
    pub images: Option<Arc<super::images::Images>>,
}

/// A started attempt, as the job table keeps it.
#[derive(Debug)]
pub struct Started {
    /// Its first process, also its process group.
    pub pid: u32,
    /// Its cgroup, when cgroups are used.
    pub cgroup: Option<Arc<Cgroup>>,
    /// Its output directories, uploaded once it has ended.
    pub outputs: Option<super::outputs::Dirs>,
}

/// An attempt ended and was cleaned up.
#[derive(Debug)]
pub struct Ended {
    /// The job.
    pub job_id: JobId,
    /// The attempt.
    pub attempt: u32,
    /// How its first process ended (or why that is not known).
    pub status: std::io::Result<ExitStatus>,
    /// Whether the kernel killed a process of it for exceeding its memory limit.
    pub oom_killed: bool,
}

/// Starts attempt `a`; a task in `tasks` reports its end on `exits`. `deadline` is when its
/// time limit runs out (ms since the Unix epoch, and the limit), kept in its record.
/// Refuses a replica's `$PORT` that another process of the node holds (jobs share the node's
/// network): the replica would fail to bind, or answer for that process. Bound and released at
/// once; the controller gives the service's next replica another port.
fn port_free(port: u16) -> Result<(), AgentError> {
    match std::net::TcpListener::bind(("0.0.0.0", port)) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(AgentError::Refused(format!(
            "port {port} ($PORT) is in use on node {} by a process Gantry did not start; the next replica gets another port",
            super::hostname()
        ))),
        Err(_) => Ok(()),
    }
}

pub fn start(
    a: &Assignment,
    ctx: &Context,
    deadline: Option<(i64, u64)>,
    (staged, inputs, image): (
        Option<&std::path::Path>,
        &[(String, String)],
        Option<&gantry_image::store::Image>,
    ),
    exits: &mpsc::UnboundedSender<Ended>,
    tasks: &mut JoinSet<()>,
) -> Result<Started, AgentError> {
    if let (Some(port), None) = (a.port, ctx.sandbox.network()) {
        port_free(port)?;
    }
    let (user, credentials) = ctx.sandbox.user_for(&a.team)?;
    let user = &user;
    let workdir = ctx.sandbox.make_workdir(a.job_id, a.attempt, user, staged)?;
    let out_root = ctx.sandbox.output_root(a.job_id, a.attempt);
    let outputs = match super::outputs::make(&out_root, &a.outputs, user, ctx.sandbox.has_users()) {
        Ok(o) => o,
        Err(e) => {
            sandbox::remove_dir(&workdir);
            sandbox::remove_dir(&out_root);
            return Err(e);
        }
    };
    let workdir_and_outputs = [workdir.clone(), out_root.clone()];
    let remove_dirs = || workdir_and_outputs.iter().for_each(|d| sandbox::remove_dir(d));
    let cgroup = match ctx.sandbox.cgroup(a, &ctx.minors) {
        Ok(c) => c.map(Arc::new),
        Err(e) => {
            remove_dirs();
            return Err(e);
        }
    };
    let attached = match ctx
        .sandbox
        .network()
        .map(|n| n.attach(a.job_id, a.attempt, &published(a), a.port.as_slice()))
    {
        None => None,
        Some(Ok(attached)) => Some(attached),
        Some(Err(e)) => {
            if let Some(c) = &cgroup {
                let _ = c.remove();
            }
            remove_dirs();
            return Err(e);
        }
    };
    let cleanup = |cgroup: &Option<Arc<Cgroup>>| {
        // Nothing ran in the group: removing it does not wait.
        if let Some(c) = cgroup {
            let _ = c.remove();
        }
        remove_dirs();
        if let Some(n) = &attached {
            let _ = n.net.detach();
        }
    };
    let spec = match spec(a, ctx, user, credentials, &workdir, cgroup.as_deref(), attached.as_ref()) {
        // Its declared inputs' read-only copies in the node's cache (`super::stage`).
        Ok(mut spec) => {
            spec.env.extend(inputs.iter().cloned());
            // Its output directories, reachable through a private `/tmp` too.
            if let Some(o) = &outputs {
                spec.env.extend(o.env());
                if let Some(m) = spec.mounts.as_mut() {
                    m.keep.push(o.root.clone());
                }
            }
            spec
        }
        Err(e) => {
            cleanup(&cgroup);
            return Err(e);
        }
    };
    let spec = match image {
        None => spec,
        Some(image) => {
            let outputs_root = outputs.as_ref().map(|o| o.root.clone());
            match containerize(spec, a, ctx, image, cgroup.as_deref(), outputs_root, inputs) {
                Ok(spec) => spec,
                Err(e) => {
                    cleanup(&cgroup);
                    return Err(e);
                }
            }
        }
    };
    let started = match shim::launch(&ctx.shim, &spec) {
        Err(e) if spec.container.is_some() => {
            if let Some(c) = &spec.container {
                c.remove();
            }
            cleanup(&cgroup);
            return Err(e);
        }
        Ok(started) => started,
        Err(e) => {
            cleanup(&cgroup);
            return Err(e);
        }
    };
    let record = Record {
        job_id: a.job_id,
        attempt: a.attempt,
        shim_pid: started.shim.id(),
        shim_start: started.shim_start,
        pid: started.pid,
        pid_start: record::start_time(started.pid).unwrap_or_default(),
        cgroup: cgroup.as_deref().map(Cgroup::to_ref),
        deadline,
        gpu_uuids: a.gpu_uuids.clone(),
        grant_mib: a.gpu_memory_mib,
        memory_mib: a.memory_mib,
        net: attached.as_ref().map(|n| n.net.clone()),
    };
    if let Err(e) = record::save(&ctx.state, &record) {
        tracing::warn!(job = a.job_id, error = %e, "could not record the attempt: a restarted agent will not find it");
    }
    tasks.spawn(watch(record, Some(started.shim), ctx.clone(), exits.clone()));
    Ok(Started { pid: started.pid, cgroup, outputs })
}

/// The `PATH` of a container whose image sets none, and of the runtime the shim starts.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Turns a process job's `spec` into the same job in a container of `image`: its root file
/// system mounted, its bundle written, and the runtime as what the shim starts (as root, in the
/// attempt's cgroup and network namespace; the container's process runs as the job's user).
fn containerize(
    mut spec: Spec,
    a: &Assignment,
    ctx: &Context,
    image: &gantry_image::store::Image,
    cgroup: Option<&Cgroup>,
    outputs_root: Option<PathBuf>,
    inputs: &[(String, String)],
) -> Result<Spec, AgentError> {
    use gantry_image::bundle::{self, Bind, BundleSpec};
    let images = ctx
        .images
        .as_ref()
        .ok_or_else(|| AgentError::Refused("this node cannot run container images".into()))?;
    let runtime = images.runtime().map_err(AgentError::Refused)?.to_path_buf();
    let id = format!("gantry-{}-{}", a.job_id, a.attempt);
    let dir = ctx.state.join("containers").join(&id);
    if dir.exists() {
        gantry_image::store::Rootfs::at(&dir).remove();
    }
    let refused = |e: &dyn std::fmt::Display| AgentError::Refused(format!("preparing its container: {e}"));
    let rootfs = images.store().mount_rootfs(image, &dir).map_err(|e| refused(&e))?;
    // What eviction keeps while the attempt runs; the directory goes with the attempt.
    let _ = std::fs::write(dir.join("image"), image.digest.as_str());
    images.store().touch(&image.digest);
    // The image's environment, then the job's; the image's PATH stays (its tools are there).
    let mut env: Vec<(String, String)> = image.config.env();
    let image_path = env.iter().any(|(k, _)| k == "PATH");
    for (k, v) in &spec.env {
        if k == "PATH" && image_path {
            continue;
        }
        env.retain(|(name, _)| name != k);
        env.push((k.clone(), v.clone()));
    }
    if !image_path {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    let (uid, gid, groups) = match &spec.user {
        Some(c) => (c.uid, c.gid, c.groups.clone()),
        None => (super::users::current_uid(), super::users::current_gid(), Vec::new()),
    };
    let mut binds = vec![Bind {
        source: spec.workdir.clone(),
        destination: spec.workdir.display().to_string(),
        readonly: false,
    }];
    if let Some(root) = outputs_root {
        binds.push(Bind { destination: root.display().to_string(), source: root, readonly: false });
    }
    for (_, path) in inputs {
        let path = PathBuf::from(path);
        if path.is_absolute() && path.exists() {
            binds.push(Bind { destination: path.display().to_string(), source: path, readonly: true });
        }
    }
    // The job's volumes, bound in at their paths as on the node.
    for v in spec.mounts.iter().flat_map(|m| &m.binds) {
        if let Err(e) = mount_point_in(&rootfs.path, &v.target) {
            rootfs.remove();
            let what = format!("making the mount point {} of a volume in the image", v.target.display());
            return Err(AgentError::Io { what, source: e });
        }
        binds.push(Bind {
            source: v.source.clone(),
            destination: v.target.display().to_string(),
            readonly: v.read_only,
        });
    }
    let devices = gpu_devices(a, ctx);
    if !devices.is_empty() {
        // The driver's libraries and nvidia-smi, as a CDI spec's edits would add them.
        binds.extend(gantry_image::driver::node_binds());
    }
    let sizes = spec.mounts.as_ref().map(|m| (m.tmp_bytes, m.shm_bytes));
    let memory = a.memory_mib << 20;
    let tmp_bytes = sizes.map_or(1 << 30, |s| s.0);
    let shm_bytes = sizes.and_then(|s| s.1).unwrap_or(if memory > 0 { memory } else { 1 << 30 });
    let wanted = a.image.as_ref();
    let entrypoint = wanted.and_then(|w| w.entrypoint.clone()).map(|e| vec![e]);
    let argv = image.config.argv(&spec.argv, entrypoint.as_deref());
    // Where it starts: the directory asked for, else its uploaded directory (bound at the same
    // path), else the image's WORKDIR, else its own directory.
    let image_workdir =
        image.config.config.as_ref().and_then(|c| c.working_dir.clone()).filter(|d| d.starts_with('/'));
    let cwd = match (wanted.and_then(|w| w.workdir.clone()), image_workdir) {
        (Some(dir), _) => dir,
        (None, Some(dir)) if a.upload.is_none() && a.workdir.is_none() => dir,
        _ => spec.cwd.display().to_string(),
    };
    if argv.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(AgentError::Refused(
            "the image has no entrypoint or command, and the job gave none".into(),
        ));
    }
    let cgroups_path =
        if super::images::is_crun(&runtime) { None } else { cgroup.and_then(Cgroup::runtime_path) };
    let bundle_spec = BundleSpec {
        rootfs: rootfs.path.clone(),
        argv,
        env,
        cwd,
        uid,
        gid,
        additional_gids: groups,
        hostname: format!("job-{}", a.job_id),
        binds,
        tmp_bytes,
        shm_bytes,
        devices,
        cgroups_path,
    };
    let bundle_dir = dir.join("bundle");
    if let Err(e) = bundle::write(&bundle_dir, &bundle_spec) {
        rootfs.remove();
        return Err(refused(&e));
    }
    let state_root = ctx.state.join("runtime");
    spec.argv = bundle::run_argv(&runtime, &bundle_dir, &id, &state_root);
    spec.env = [("PATH".to_owned(), DEFAULT_PATH.to_owned())].into();
    spec.cwd = bundle_dir;
    spec.user = None;
    spec.mounts = None;
    spec.container = Some(shim::Container { dir, runtime, state_root, id });
    Ok(spec)
}

/// The device nodes of the GPUs granted to `a` (and the driver's control nodes) that this node
/// has, as the container makes them.
fn gpu_devices(a: &Assignment, ctx: &Context) -> Vec<gantry_image::bundle::Device> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let mut paths: Vec<String> =
        a.gpu_uuids.iter().filter_map(|u| ctx.minors.get(u)).map(|m| format!("/dev/nvidia{m}")).collect();
    if !paths.is_empty() {
        paths.extend(["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"].map(String::from));
    }
    paths
        .into_iter()
        .filter_map(|p| {
            let m = std::fs::metadata(&p).ok().filter(|m| m.file_type().is_char_device())?;
            let rdev = m.rdev();
            Some(gantry_image::bundle::Device {
                path: p,
                major: i64::from(libc::major(rdev)),
                minor: i64::from(libc::minor(rdev)),
            })
        })
        .collect()
}

/// Watches the shim of an attempt a previous run of the agent started (its record says the
/// shim is alive).
pub fn adopt(record: &Record, ctx: &Context, exits: &mpsc::UnboundedSender<Ended>, tasks: &mut JoinSet<()>) {
    tasks.spawn(watch(record.clone(), None, ctx.clone(), exits.clone()));
}

fn spec(
    a: &Assignment,
    ctx: &Context,
    user: &Identity,
    credentials: Option<super::child::Credentials>,
    workdir: &std::path::Path,
    cgroup: Option<&Cgroup>,
    attached: Option<&Attached>,
) -> Result<Spec, AgentError> {
    let home = ctx.sandbox.home(a, user)?;
    let binds = ctx.sandbox.volume_binds(a, user)?;
    let mut env = env::build(a, &user.name, workdir, &home)?;
    if let Some(gateway) = attached.and_then(|n| n.gateway)
        && let Some(addr) = env.get_mut("MASTER_ADDR")
        && network::names_this_node(addr, &super::hostname())
    {
        *addr = gateway.to_string();
    }
    let cwd = match &a.chdir {
        Some(dir) => on_node(dir)?,
        None => ctx.sandbox.make_subdir(workdir, a.workdir.as_deref(), user)?,
    };
    logs::private_dir(&job_logs::dir(&ctx.logs, a.job_id))?;
    let dir = job_logs::attempt_dir(&ctx.logs, a.job_id, a.attempt);
    logs::private_dir(&dir)?;
    job_logs::prune(&job_logs::dir(&ctx.logs, a.job_id), a.attempt);
    let limit = if a.log_limit_bytes == 0 { job_logs::DEFAULT_LIMIT } else { a.log_limit_bytes };
    Ok(Spec {
        job_id: a.job_id,
        attempt: a.attempt,
        argv: a.command.clone(),
        env,
        cwd: cwd.clone(),
        workdir: workdir.to_path_buf(),
        user: credentials,
        cgroup: cgroup.map(Cgroup::to_ref),
        mounts: ctx.sandbox.mounts(a, workdir, &cwd, &home).map(|mut m| {
            m.binds = binds;
            m
        }),
        logs: dir,
        log_limit: limit,
        state: ctx.state.clone(),
        net: attached.map(|n| n.net.clone()),
        container: None,
    })
}

/// A `--chdir` directory: checked again (absolute, no `..`) and required to be a directory on
/// this node.
fn on_node(dir: &str) -> Result<PathBuf, AgentError> {
    gantry_api::workflow::check_chdir(dir).map_err(AgentError::Refused)?;
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(PathBuf::from(dir)),
        _ => {
            Err(AgentError::Refused(format!("chdir: {dir} is not a directory on node {}", super::hostname())))
        }
    }
}

/// The ports attempt `a` publishes on its node: rank 0 of a gang publishes `MASTER_PORT`, a
/// service replica its `$PORT`.
fn published(a: &Assignment) -> Vec<u16> {
    let rendezvous =
        a.gang.as_ref().filter(|g| g.is_worker() && g.rank == Some(0)).and_then(|g| g.master_port);
    // A service replica's `$PORT`: the gateway reaches it at the node's address.
    rendezvous.into_iter().chain(a.port).collect()
}

/// Waits until the attempt's shim is gone (reaping it when it is this agent's child), then
/// reports how the job ended. A shim that ended without writing an exit leaves the attempt's
/// processes without a supervisor: they are ended here.
async fn watch(
    record: Record,
    mut own: Option<std::process::Child>,
    ctx: Context,
    exits: mpsc::UnboundedSender<Ended>,
) {
    loop {
        let gone = match own.as_mut().map(std::process::Child::try_wait) {
            Some(Ok(status)) => status.is_some(),
            Some(Err(e)) => {
                // Not waitable (say, SIGCHLD ignored): watch it by pid and start time instead.
                tracing::debug!(job = record.job_id, error = %e, "cannot wait for the job's shim");
                own = None;
                continue;
            }
            None => !record::is_alive(record.shim_pid, record.shim_start),
        };
        if gone {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let (job_id, attempt) = (record.job_id, record.attempt);
    let ended = match record::read_exit(&ctx.state, job_id, attempt) {
        Some(exit) => Ended { job_id, attempt, status: Ok(shim::status(&exit)), oom_killed: exit.oom_killed },
        None => {
            let workdir = ctx.sandbox.workdir(job_id, attempt);
            tracing::warn!(
                job = job_id,
                attempt,
                shim = record.shim_pid,
                "the job's shim ended without recording its exit"
            );
            let record = record.clone();
            let _ = tokio::task::spawn_blocking(move || {
                end_orphaned(&record);
                sandbox::remove_dir(&workdir);
            })
            .await;
            let error = std::io::Error::other("its supervisor ended without recording how the job ended");
            Ended { job_id, attempt, status: Err(error), oom_killed: false }
        }
    };
    let _ = exits.send(ended);
}

/// Ends what is left of an attempt whose shim is gone: its cgroup, or without one its process
/// group while the leader is the process the record names (not a reused pid); then removes its
/// network namespace. Blocks.
pub fn end_orphaned(record: &Record) {
    end_processes(record);
    if let Some(net) = &record.net
        && let Err(e) = net.detach()
    {
        tracing::warn!(error = %e, "could not remove a job's network");
    }
}

fn end_processes(record: &Record) {
    match &record.cgroup {
        Some(c) => {
            if let Err(e) = c.open().remove() {
                tracing::warn!(error = %e, "could not remove a job's cgroup");
            }
        }
        None if record::is_alive(record.pid, record.pid_start) => {
            super::process::signal_group(record.pid, libc::SIGKILL);
        }
        None => {}
    }
}

/// Makes `target` (absolute, inside the container) in the image's root `root`, each part made
/// searchable by the job's user (the runtime would make them with the agent's umask). A part the
/// image has as anything but a directory (a link to the node's `/etc`, say) is refused: nothing
/// is made through it.
fn mount_point_in(root: &std::path::Path, target: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut at = root.to_path_buf();
    for part in target.components().filter(|c| matches!(c, std::path::Component::Normal(_))) {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(_) => {
                return Err(std::io::Error::other(format!(
                    "the image has {} as something other than a directory",
                    at.display()
                )));
            }
            Err(_) => {
                std::fs::create_dir(&at)?;
                std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o755))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod mount_point_tests {
    #[test]
    fn a_mount_point_is_made_in_the_image_and_never_through_a_link_it_holds() {
        let dir = tempfile::tempdir().expect("dir");
        let (root, outside) = (dir.path().join("rootfs"), dir.path().join("host-etc"));
        std::fs::create_dir_all(&root).expect("root");
        std::fs::create_dir_all(&outside).expect("outside");
        super::mount_point_in(&root, std::path::Path::new("/mnt/data")).expect("made");
        assert!(root.join("mnt/data").is_dir());
        // A hostile image's /data is a link to a directory of the node.
        std::os::unix::fs::symlink(&outside, root.join("data")).expect("link");
        let err = super::mount_point_in(&root, std::path::Path::new("/data/x")).expect_err("refused");
        assert!(err.to_string().contains("something other than a directory"), "{err}");
        assert!(!outside.join("x").exists(), "nothing was made through the link");
    }
}
