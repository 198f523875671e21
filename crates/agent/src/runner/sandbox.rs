//! The job sandbox: which user an attempt runs as, where, and in which cgroup.
//!
//! The agent holds secrets (its join token, and under `gantry up` the store and the admin's
//! client config) and every job's output. A job is someone else's code, so it must not run as
//! the agent. When the agent runs as root, each attempt:
//!
//! - runs as an unprivileged user of its team alone: by default `gantry-t-<team>`
//!   ([`super::team_user`]), created the first time the team has a job on the node, so that no
//!   team can read another's `/proc/<pid>/environ`, signal or `ptrace` its processes or enter
//!   its work directory; `--job-user TEAM=USER` names another (`*`: every team not listed, and
//!   `'*=gantry-job'` puts every team back in one shared user). It gets that user's groups only
//!   and no way back to root ([`super::child`]);
//! - works in its own directory `<work>/<scope>/<job>-<attempt>`, mode 0700 and owned by that
//!   user, which is also its `HOME`. The work root is outside the agent's data directory (which
//!   a job user cannot enter) and is mode 0711, so a job cannot list other attempts'
//!   directories. The directory is removed when the attempt ends: results belong on shared
//!   storage, and a node must not fill up with old attempts;
//! - sees only an allow-listed environment ([`super::env`]);
//! - runs in its own cgroup ([`super::cgroup`]), limited to its memory and CPU requests (or,
//!   when it asks for none, the node's defaults, [`JobDefaults`]) and to `pids.max` processes,
//!   allowed only its own GPUs' device nodes ([`super::devices`]), and ended as a whole,
//!   daemons included, when the attempt ends;
//! - has its own mount namespace ([`super::mounts`]): a private, size-capped `/tmp` and
//!   `/dev/shm`, and a `/proc` that shows only its own user's processes; umask 077.
//! - runs in its own network namespace set up by the CNI plugins ([`super::network`]) when they
//!   are installed (`--job-network`), so that its loopback is its own.
//!
//! An agent that is not root can do none of this: jobs run as the agent's own user, can read
//! what it can read, and are stopped by process group. The agent says so once at start-up
//! ([`Sandbox::warnings`]).
//!
//! The scope is a random name kept in the agent's state directory; it keeps two agents on one
//! machine apart and lets a restarted agent end the groups and remove the directories its
//! previous run left ([`Sandbox::remove_orphans`]).

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use gantry_api::types::Assignment;

use super::cgroup::{Cgroup, Cgroups, Limits};
use super::child::Credentials;
use super::devices;
use super::error::AgentError;
use super::mounts::{MountConfig, MountSpec};
use super::network::{Network, NetworkConfig};
use super::team_user;
use super::users::{self, Identity, SHARED_JOB_USER};

/// The team key of `--job-user` that names the user of every team not listed.
pub const ANY_TEAM: &str = "*";

/// The default `pids.max` of a job whose team sets none.
pub const DEFAULT_PIDS_LIMIT: u64 = 4096;

/// Sandbox settings, validated for form (users are looked up by [`Sandbox::build`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Root of the per-attempt work directories.
    pub work_dir: PathBuf,
    /// Team → user to run its jobs as ([`ANY_TEAM`]: every other team). Needs a root agent.
    pub job_users: BTreeMap<String, String>,
    /// Network namespaces (`--job-network`, `--cni-*`).
    pub network: NetworkConfig,
    /// Sizes of each job's private `/tmp` and `/dev/shm`.
    pub mounts: MountConfig,
    /// The limits of a job that asks for none.
    pub defaults: JobDefaults,
    /// What jobs can never take.
    pub reserve: NodeReserve,
    /// Where users' persistent homes are kept (`<root>/<team>/<user>`; `None`: `homes` beside
    /// the attempts' work directories, on this node).
    pub home_root: Option<PathBuf>,
}

/// Memory and CPU kept for the agent, the server and the system (`--reserve-memory`,
/// `--reserve-cpu`): the node advertises its capacity less these ([`Sandbox::capacity`]), and
/// with cgroups the parent group of all jobs is held to the same, so that jobs together,
/// limited or not, never take them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeReserve {
    /// Memory, MiB.
    pub memory_mib: u64,
    /// CPU, milli-cores.
    pub cpu_milli: u64,
}

impl NodeReserve {
    /// `cpu_milli` and `memory_mib` less the reserve.
    pub fn capacity(&self, cpu_milli: u64, memory_mib: u64) -> (u64, u64) {
        (cpu_milli.saturating_sub(self.cpu_milli), memory_mib.saturating_sub(self.memory_mib))
    }
}

/// What a job that asks for no memory or CPU is held to (`--default-job-memory`,
/// `--default-job-cpu`), and the processes of one whose team sets no `pids_limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobDefaults {
    /// Memory, MiB.
    pub memory: DefaultLimit,
    /// CPU, milli-cores.
    pub cpu: DefaultLimit,
    /// `pids.max` (0: not limited).
    pub pids_max: u64,
}

/// One default limit of a job that asks for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultLimit {
    /// Not limited (the node reserve still holds).
    None,
    /// This much, whatever the job's GPUs.
    Fixed(u64),
    /// Its GPUs' share of what the node offers jobs (at least one GPU's; a node without GPUs
    /// counts [`CPU_NODE_SHARES`]), and for CPU at least one core: the default of `gantry agent`.
    GpuShare,
}

/// How many shares a node without GPUs is cut into for [`DefaultLimit::GpuShare`].
pub const CPU_NODE_SHARES: u64 = 4;

impl DefaultLimit {
    /// The share of `capacity` for one GPU of `node_gpus`, or the fixed value (0: none), and
    /// whether it is per GPU.
    fn resolve(self, capacity: u64, node_gpus: u64) -> (u64, bool) {
        match self {
            Self::None => (0, false),
            Self::Fixed(v) => (v, false),
            Self::GpuShare => {
                let shares = if node_gpus == 0 { CPU_NODE_SHARES } else { node_gpus };
                ((capacity / shares).max(1), true)
            }
        }
    }
}

impl Default for JobDefaults {
    fn default() -> Self {
        Self { memory: DefaultLimit::None, cpu: DefaultLimit::None, pids_max: DEFAULT_PIDS_LIMIT }
    }
}

/// The users, directories and cgroups jobs run in.
#[derive(Debug)]
pub struct Sandbox {
    /// `None` when the agent is not root: jobs run as the agent.
    users: Option<JobUsers>,
    agent: Identity,
    /// `<work_dir>/<scope>`.
    work: PathBuf,
    cgroups: Option<Cgroups>,
    /// `None`: jobs share the node's network.
    network: Option<Network>,
    /// `None`: jobs see the node's mounts (the agent is not root, or cannot unshare).
    mounts: Option<MountConfig>,
    defaults: JobDefaults,
    /// The node's GPUs ([`Sandbox::set_node_gpus`]).
    node_gpus: std::sync::atomic::AtomicU64,
    /// Root of the users' persistent homes.
    homes: PathBuf,
    /// Root of the node-local volumes (`<work>/volumes/<team>/<name>`).
    volumes: PathBuf,
    reserve: NodeReserve,
    warnings: Vec<String>,
}

#[derive(Debug)]
struct JobUsers {
    /// `--job-user TEAM=USER`.
    by_team: BTreeMap<String, Identity>,
    /// `--job-user '*=USER'`: the user of every team not listed. `None`: each its own.
    any: Option<Identity>,
    /// Team users found or made so far, by team (a team's user is made once per node).
    own: Mutex<BTreeMap<String, Identity>>,
}

impl JobUsers {
    /// The user of `team`: its mapping, else `*`'s, else its own user, made when missing.
    fn get(&self, team: &str) -> Result<Identity, AgentError> {
        if let Some(id) = self.by_team.get(team).or(self.any.as_ref()) {
            return Ok(id.clone());
        }
        // Held while `useradd` runs: two attempts of one team make its user once.
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = own.get(team) {
            return Ok(id.clone());
        }
        let id = checked(&team_user::name(team), users::resolve_or_create_for_team(team)?)?;
        own.insert(team.to_owned(), id.clone());
        Ok(id)
    }
}

/// Whether this process runs with root's effective user id.
pub fn running_as_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective =
        status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1));
    effective == Some("0")
}

impl Sandbox {
    /// Resolves (or creates) the job users, makes the work root and finds the cgroup hierarchy.
    /// `state` is the agent's state directory (the scope is kept there).
    pub fn build(config: &SandboxConfig, state: &Path) -> Result<Self, AgentError> {
        let agent = users::current()?;
        let root = agent.uid == 0;
        if !root && !config.job_users.is_empty() {
            return Err(AgentError::Sandbox("--job-user needs the agent to run as root".into()));
        }
        let scope = scope(state)?;
        let work = config.work_dir.join(&scope);
        for dir in [&config.work_dir, &work] {
            make_dir(dir, 0o711)
                .map_err(|e| AgentError::Sandbox(format!("creating {}: {e}", dir.display())))?;
        }
        let mut warnings = Vec::new();
        let users = if root {
            check_owned_by_root(&[&config.work_dir, &work])?;
            check_traversable(&config.work_dir)?;
            Some(job_users(&config.job_users)?)
        } else {
            warnings.push(format!(
                "jobs are not isolated from the agent's files: the agent is not root, so jobs run as {} \
                 and can read everything it can",
                agent.name
            ));
            None
        };
        let cgroups = match Cgroups::open(&scope) {
            Ok(c) => Some(c),
            Err(why) => {
                warnings.push(format!(
                    "jobs get no cgroups ({why}): memory and CPU requests are not enforced, and \
                     processes that leave a job's process group can outlive it"
                ));
                None
            }
        };
        let network = match Network::build(&config.network, state, &scope, root)? {
            Ok(n) => Some(n),
            Err(why) => {
                warnings.push(why);
                None
            }
        };
        if let Some(c) = cgroups.as_ref().filter(|c| root && !c.restricts_devices()) {
            warnings.push(format!(
                "jobs' devices are not restricted (cgroup {} has no devices controller the agent \
                 drives): a job can open every GPU's /dev/nvidia*",
                c.version()
            ));
        }
        let mounts = if root { probe_mounts(config.mounts, &mut warnings) } else { None };
        let (defaults, reserve) = (config.defaults, config.reserve);
        let node_gpus = std::sync::atomic::AtomicU64::new(0);
        let homes = config.home_root.clone().unwrap_or_else(|| config.work_dir.join("homes"));
        let volumes = config.work_dir.join("volumes");
        let sandbox = Self {
            users,
            agent,
            work,
            cgroups,
            network,
            mounts,
            defaults,
            node_gpus,
            homes,
            volumes,
            reserve,
            warnings,
        };
        sandbox.hold_back_reserve();
        Ok(sandbox)
    }

    /// What the node offers jobs: its `cpu_milli` and `memory_mib` less the reserve.
    pub fn capacity(&self, cpu_milli: u64, memory_mib: u64) -> (u64, u64) {
        self.reserve.capacity(cpu_milli, memory_mib)
    }

    /// Limits the parent group of all jobs to the node's capacity less the reserve, and to three
    /// quarters of the node's process ids.
    fn hold_back_reserve(&self) {
        let Some(cgroups) = &self.cgroups else {
            return;
        };
        cgroups.unlimit_all();
        // All jobs together keep a quarter of the node's process ids: eight jobs at their own
        // 4,096 each took every pid of the node, and then the agent and the server could not fork.
        let pids_max = jobs_pids_max();
        let (cpu_milli, memory_mib) = self.capacity(super::node_cpu_milli(), super::node_memory_mib());
        let limits = Limits {
            memory_mib: if self.reserve.memory_mib > 0 { memory_mib.max(1) } else { 0 },
            cpu_milli: if self.reserve.cpu_milli > 0 { cpu_milli.max(1) } else { 0 },
            pids_max,
            ..Limits::default()
        };
        if let Err(e) = cgroups.limit_all(&limits) {
            tracing::warn!(error = %e, "could not hold the node reserve back from jobs");
        }
    }

    /// What the agent should say once at start-up.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// One line saying how jobs are run.
    pub fn describe(&self) -> String {
        let who = match &self.users {
            Some(JobUsers { any: Some(any), .. }) => format!("as {} (or their team's user)", any.name),
            Some(_) => format!(
                "each as their team's own user ({}<team>, made on first use, or --job-user's)",
                team_user::PREFIX
            ),
            None => format!("as {} (not isolated)", self.agent.name),
        };
        let groups = self
            .cgroups
            .as_ref()
            .map_or("process groups".to_owned(), |c| format!("cgroup {} groups", c.version()));
        let mounts = if self.mounts.is_some() { " with their own /tmp, /dev/shm and /proc" } else { "" };
        let net = self.network.as_ref().map_or("the node's network".to_owned(), Network::describe);
        format!(
            "jobs run {who} in {groups}{mounts}, in work directories under {}, in {net}",
            self.work.display()
        )
    }

    /// The attempts' network, `None` when jobs share the node's.
    pub fn network(&self) -> Option<&Network> {
        self.network.as_ref()
    }

    /// What the node registers: `cni` when each attempt gets its own network namespace, else
    /// `shared`.
    pub fn network_kind(&self) -> gantry_api::model::NodeNetwork {
        use gantry_api::model::NodeNetwork;
        if self.network.is_some() { NodeNetwork::Cni } else { NodeNetwork::Shared }
    }

    /// The user `team`'s jobs run as, and the credentials to switch to (`None`: stay the agent).
    /// The first job of a team on this node makes the team's user (`useradd`, which blocks
    /// briefly); an error says why it could not, and the job fails with it.
    pub fn user_for(&self, team: &str) -> Result<(Identity, Option<Credentials>), AgentError> {
        match &self.users {
            None => Ok((self.agent.clone(), None)),
            Some(u) => {
                let id = u.get(team)?;
                let credentials = Credentials { uid: id.uid, gid: id.gid, groups: id.groups.clone() };
                Ok((id, Some(credentials)))
            }
        }
    }

    /// The node's dataset cache ([`super::cache`]): beside the work directories (under the same
    /// traversable, root-owned work root), not among them (orphans are removed there).
    pub fn cache_root(&self) -> PathBuf {
        self.work.with_extension("cache")
    }

    /// The attempt's work directory.
    pub fn workdir(&self, job_id: i64, attempt: u32) -> PathBuf {
        self.work.join(format!("{job_id}-{attempt}"))
    }

    /// The persistent `$HOME` of the user who submitted `a` in its team,
    /// `<homes>/<team>/<user>` (a job without a user: `<homes>/<team>/<team>`): made on first
    /// use, private to the job's user (0700, given to it when the agent is root) under
    /// directories only the agent may change, so what one job leaves in `~` (a pip `--user`
    /// install, `~/.cache/huggingface`, a venv) the user's next job of the team finds, and no
    /// other team's job can read. A name that is not a plain path component is cleaned and
    /// suffixed with its hash ([`team_user::path_part`]).
    pub fn home(&self, a: &Assignment, user: &Identity) -> Result<PathBuf, AgentError> {
        let who = team_user::path_part(a.user.as_deref().unwrap_or(&a.team));
        let team_dir = self.homes.join(team_user::path_part(&a.team));
        agent_dirs(&[&self.homes, &team_dir])?;
        let home = team_dir.join(&who);
        self.user_dir(&home, 0o700, user, "home")?;
        Ok(home)
    }

    /// The binds of the volumes `a` mounts: each volume's directory (a shared one as named, a
    /// node-local one under the work root, `<work>/volumes/<team>/<name>`), made on first use
    /// and given to the job's user (0770), and its mount point, made under one of
    /// [`gantry_api::volumes::MOUNT_ROOTS`] when missing. Refused: volumes without a mount
    /// namespace (an agent that is not root), a mount point or volume that is not a plain
    /// directory, a writable mount of a volume past its size.
    pub fn volume_binds(
        &self,
        a: &Assignment,
        user: &Identity,
    ) -> Result<Vec<super::mounts::Bind>, AgentError> {
        if a.volumes.is_empty() {
            return Ok(Vec::new());
        }
        if self.mounts.is_none() {
            return Err(AgentError::Refused(
                "volumes need jobs in mount namespaces of their own: the agent must run as root".into(),
            ));
        }
        let mut binds = Vec::new();
        for v in &a.volumes {
            let mount = gantry_api::volumes::VolumeMount {
                name: v.name.clone(),
                path: v.path.clone(),
                read_only: v.read_only,
            };
            mount.check().map_err(AgentError::Refused)?;
            let source = match &v.source {
                Some(path) => PathBuf::from(path),
                None => {
                    let team = self.volumes.join(team_user::path_part(&a.team));
                    agent_dirs(&[&self.volumes, &team])?;
                    team.join(&v.name)
                }
            };
            let what = format!("volume {}", v.name);
            self.user_dir(&source, 0o770, user, &what)?;
            if let Some(size) = v.size_bytes.filter(|_| !v.read_only) {
                let held = bytes_under(&source);
                if held > size {
                    return Err(AgentError::Refused(format!(
                        "volume {} holds {} bytes, past its size of {size}: free some (mount it read-only to read it)",
                        v.name, held
                    )));
                }
            }
            // The mount point is the node's (root's), not the job user's.
            let target = PathBuf::from(&v.path);
            plain_dir(&target, 0o755, &format!("the mount point of {what}"))?;
            binds.push(super::mounts::Bind { source, target, read_only: v.read_only });
        }
        Ok(binds)
    }

    /// The attempt's output directories' parent ([`super::outputs`]): beside its work
    /// directory, which the shim removes as the attempt ends.
    pub fn output_root(&self, job_id: i64, attempt: u32) -> PathBuf {
        self.work.join(format!("{job_id}-{attempt}.out"))
    }

    /// Whether attempts run as users of their own (the agent is root): their directories are
    /// given to those users.
    pub fn has_users(&self) -> bool {
        self.users.is_some()
    }

    /// Where the attempt's uploaded working directory is fetched to before it becomes the work
    /// directory ([`super::upload`]); beside it, so that the rename is atomic.
    pub fn staging_dir(&self, job_id: i64, attempt: u32) -> PathBuf {
        self.work.join(format!("{job_id}-{attempt}.upload"))
    }

    /// Makes the attempt's work directory, mode 0700, owned by `user`: empty, or the `staged`
    /// upload renamed into place (everything in it then given to `user` too).
    pub fn make_workdir(
        &self,
        job_id: i64,
        attempt: u32,
        user: &Identity,
        staged: Option<&Path>,
    ) -> Result<PathBuf, AgentError> {
        let dir = self.workdir(job_id, attempt);
        let io = |source| AgentError::Io {
            what: format!("creating the work directory {}", dir.display()),
            source,
        };
        remove_dir(&dir);
        match staged {
            Some(staged) => std::fs::rename(staged, &dir).map_err(io)?,
            None => std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(io)?,
        }
        if self.users.is_some() {
            match staged {
                Some(_) => super::upload::chown_tree(&dir, user.uid, user.gid).map_err(io)?,
                None => std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).map_err(io)?,
            }
        }
        Ok(dir)
    }

    /// The directory a job asked to start in (`--workdir`), made inside the attempt's new work
    /// directory one part at a time, each mode 0700 and owned by `user`. The path is checked
    /// again ([`gantry_api::workflow::check_workdir`]: relative, no `..`), and since the work
    /// directory was just made empty nothing in it can be a link leading elsewhere; a part that
    /// exists and is not a plain directory is refused all the same.
    pub fn make_subdir(
        &self,
        workdir: &Path,
        sub: Option<&str>,
        user: &Identity,
    ) -> Result<PathBuf, AgentError> {
        let Some(sub) = sub else {
            return Ok(workdir.to_path_buf());
        };
        gantry_api::workflow::check_workdir(sub).map_err(AgentError::Refused)?;
        let mut dir = workdir.to_path_buf();
        for part in sub.split('/') {
            dir.push(part);
            self.user_dir(&dir, 0o700, user, "workdir")?;
        }
        Ok(dir)
    }

    /// Keeps `dir` when it is a directory, else makes it (`mode`) and, when the agent is root,
    /// gives it to the job's `user`. Anything else there (a file, a link) is refused, `what`
    /// naming it: a link is never followed.
    fn user_dir(&self, dir: &Path, mode: u32, user: &Identity, what: &str) -> Result<(), AgentError> {
        if plain_dir(dir, mode, what)? && self.users.is_some() {
            let io = |source| AgentError::Io {
                what: format!("giving {what} {} to its user", dir.display()),
                source,
            };
            std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid)).map_err(io)?;
        }
        Ok(())
    }

    /// `a` with the node's default memory and CPU where it asks for none: what it runs under.
    pub fn with_defaults(&self, mut a: Assignment) -> Assignment {
        let limits = self.job_defaults().for_job(a.memory_mib, a.cpu_milli, a.gpu_uuids.len(), None);
        a.memory_mib = limits.memory_mib;
        a.cpu_milli = limits.cpu_milli;
        a
    }

    /// Tells the sandbox how many GPUs the node has, which [`DefaultLimit::GpuShare`] divides
    /// the node by (set before the node registers).
    pub fn set_node_gpus(&self, gpus: usize) {
        self.node_gpus.store(gpus as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// What this node holds a job to that does not say, as it registers them.
    pub fn job_defaults(&self) -> gantry_api::model::JobLimits {
        let d = self.defaults;
        let gpus = self.node_gpus.load(std::sync::atomic::Ordering::Relaxed);
        let (cpu_milli, memory_mib) = self.capacity(super::node_cpu_milli(), super::node_memory_mib());
        let (memory_mib, memory_per_gpu) = d.memory.resolve(memory_mib, gpus);
        let (cpu_milli, cpu_per_gpu) = d.cpu.resolve(cpu_milli, gpus);
        gantry_api::model::JobLimits {
            memory_mib,
            cpu_milli,
            pids_max: d.pids_max,
            memory_per_gpu,
            cpu_per_gpu,
        }
    }

    /// The `pids.max` of `a` (its team's limit, else the node's).
    pub fn pids_max(&self, a: &Assignment) -> u64 {
        a.pids_limit.unwrap_or(self.defaults.pids_max)
    }

    /// The attempt's private mounts (`None`: it sees the node's), for a job starting in `cwd`.
    pub fn mounts(&self, a: &Assignment, workdir: &Path, cwd: &Path, home: &Path) -> Option<MountSpec> {
        self.mounts.map(|m| {
            let mut spec = m.spec(a.memory_mib, workdir, cwd);
            // A home under /tmp (a work root there) must stay reachable under the job's own /tmp.
            spec.keep.push(home.to_path_buf());
            spec
        })
    }

    /// The attempt's cgroup, limited to its requests (`None` without cgroups); `minors` maps
    /// the node's GPU UUIDs to their device minors (a root agent allows only the granted ones).
    pub fn cgroup(
        &self,
        a: &Assignment,
        minors: &BTreeMap<String, u32>,
    ) -> Result<Option<Cgroup>, AgentError> {
        let Some(cgroups) = &self.cgroups else {
            return Ok(None);
        };
        let devices = (self.users.is_some() && cgroups.restricts_devices()).then(|| {
            let proc_devices = std::fs::read_to_string("/proc/devices").unwrap_or_default();
            devices::allowed(&devices::minors_of(&a.gpu_uuids, minors), &proc_devices)
        });
        let limits =
            Limits { memory_mib: a.memory_mib, cpu_milli: a.cpu_milli, pids_max: self.pids_max(a), devices };
        let name = format!("{}-{}", a.job_id, a.attempt);
        cgroups
            .create(&name, &limits)
            .map(Some)
            .map_err(|source| AgentError::Io { what: format!("creating the cgroup {name}"), source })
    }

    /// Ends the groups and removes the work directories a previous run of the agent left.
    /// Blocks: call it before the agent takes work, or off the async runtime.
    pub fn remove_orphans(&self) {
        self.remove_orphans_except(&std::collections::HashSet::new());
    }

    /// Like [`Sandbox::remove_orphans`], but keeps the groups and work directories of the
    /// attempts named in `keep` (`<job>-<attempt>`: attempts a restarted agent adopted).
    pub fn remove_orphans_except(&self, keep: &std::collections::HashSet<String>) {
        if let Some(c) = &self.cgroups {
            c.remove_all(keep);
        }
        if let Some(n) = &self.network {
            n.remove_orphans(keep);
        }
        if let Ok(entries) = std::fs::read_dir(&self.work) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                // An adopted attempt keeps its output directories too.
                if !keep.contains(name.strip_suffix(".out").unwrap_or(&name)) {
                    remove_dir(&entry.path());
                }
            }
        }
    }
}

impl Sandbox {
    /// Removes this agent's (empty) parent groups and work directory scope; for a clean stop,
    /// after the last attempt was cleaned up.
    pub fn release(&self) {
        if let Some(c) = &self.cgroups {
            c.release();
        }
        if let Some(n) = &self.network {
            n.release();
        }
        let _ = std::fs::remove_dir(&self.work);
    }
}

/// Whether this node can give jobs their own mounts: starts `true` with them once. Blocks.
fn probe_mounts(config: MountConfig, warnings: &mut Vec<String>) -> Option<MountConfig> {
    let root = Path::new("/");
    let tried = super::mounts::Private::new(&config.spec(0, root, root)).and_then(|mounts| {
        let mut cmd = std::process::Command::new("true");
        cmd.current_dir(root).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        super::child::Confinement::new(&[], None)?.with_mounts(Some(mounts)).install(&mut cmd);
        let status = cmd.status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("the probe ended with {status}")))
        }
    });
    match tried {
        Ok(()) => Some(config),
        Err(e) => {
            warnings.push(format!(
                "jobs share the node's /tmp, /dev/shm and /proc: cannot give them their own mount namespace ({e})"
            ));
            None
        }
    }
}

/// Removes a work directory and everything in it. Blocks.
pub fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(error = %e, dir = %dir.display(), "could not remove a work directory");
        }
        _ => {}
    }
}

/// Resolves the users `--job-user` names. They must exist, except the shared `gantry-job` of
/// the opt-out `'*=gantry-job'`, which is made when missing as it always was.
fn job_users(config: &BTreeMap<String, String>) -> Result<JobUsers, AgentError> {
    let any = match config.get(ANY_TEAM).map(String::as_str) {
        Some(SHARED_JOB_USER) => Some(checked(
            SHARED_JOB_USER,
            users::resolve_or_create(SHARED_JOB_USER, "gantry jobs of every team")?,
        )?),
        Some(name) => Some(checked(name, users::resolve(name)?)?),
        None => None,
    };
    let mut by_team = BTreeMap::new();
    for (team, name) in config.iter().filter(|(t, _)| *t != ANY_TEAM) {
        by_team.insert(team.clone(), checked(name, users::resolve(name)?)?);
    }
    Ok(JobUsers { by_team, any, own: Mutex::default() })
}

/// Jobs never run as root.
fn checked(name: &str, found: Identity) -> Result<Identity, AgentError> {
    if found.uid == 0 {
        return Err(AgentError::Sandbox(format!("jobs cannot run as {name}: it is root")));
    }
    Ok(found)
}

/// The agent's scope name, made on first start and kept in `<state>/sandbox-scope`.
fn scope(state: &Path) -> Result<String, AgentError> {
    let path = state.join("sandbox-scope");
    let io = |source| AgentError::Io { what: format!("keeping {}", path.display()), source };
    if let Ok(text) = std::fs::read_to_string(&path)
        && is_scope(text.trim())
    {
        return Ok(text.trim().to_owned());
    }
    let uuid = std::fs::read_to_string("/proc/sys/kernel/random/uuid").map_err(io)?;
    let scope: String = uuid.chars().filter(char::is_ascii_hexdigit).take(12).collect();
    make_dir(state, 0o700).map_err(io)?;
    std::fs::write(&path, &scope).map_err(io)?;
    Ok(scope)
}

fn is_scope(s: &str) -> bool {
    s.len() == 12 && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// Makes `dir` (and parents) and sets its mode.
/// Makes `dirs` (mode 0711, the agent's: job users may pass, not list or change them).
fn agent_dirs(dirs: &[&Path]) -> Result<(), AgentError> {
    for dir in dirs {
        make_dir(dir, 0o711).map_err(|e| AgentError::Sandbox(format!("creating {}: {e}", dir.display())))?;
    }
    Ok(())
}

/// Keeps `dir` when it is a directory (false), else makes it and its missing parents with
/// `mode` (true). Anything else there (a file, a link) is refused, `what` naming it.
fn plain_dir(dir: &Path, mode: u32, what: &str) -> Result<bool, AgentError> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => Ok(false),
        Ok(_) => Err(AgentError::Refused(format!("{what}: {} is not a directory", dir.display()))),
        Err(_) => {
            let io = |source| AgentError::Io { what: format!("creating {what} {}", dir.display()), source };
            std::fs::DirBuilder::new().recursive(true).mode(mode).create(dir).map_err(io)?;
            Ok(true)
        }
    }
}

/// Bytes of the regular files under `dir` (links are not followed).
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_under(&e.path()),
            Ok(m) if m.is_file() => m.len(),
            _ => 0,
        })
        .sum()
}

fn make_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(mode).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

/// Directories a job user could change must not hold other users' work directories.
fn check_owned_by_root(dirs: &[&Path]) -> Result<(), AgentError> {
    for dir in dirs {
        let meta =
            std::fs::metadata(dir).map_err(|e| AgentError::Sandbox(format!("{}: {e}", dir.display())))?;
        if meta.uid() != 0 {
            return Err(AgentError::Sandbox(format!(
                "the work directory {} must be owned by root, not uid {}",
                dir.display(),
                meta.uid()
            )));
        }
    }
    Ok(())
}

/// A job user must be able to reach its work directory: every directory above the work root
/// must be searchable by others (a 0700 directory there makes every job fail in `chdir`).
fn check_traversable(work: &Path) -> Result<(), AgentError> {
    for dir in work.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        if meta.mode() & 0o001 == 0 {
            return Err(AgentError::Sandbox(format!(
                "job users cannot reach the work directory {}: {} is mode {:o}; choose another --work-dir",
                work.display(),
                dir.display(),
                meta.mode() & 0o7777
            )));
        }
    }
    Ok(())
}

/// Processes and threads all jobs of the node may hold at once: three quarters of the kernel's
/// `pid_max` (or `threads-max`, whichever is lower), so the node's own daemons can always fork.
pub fn jobs_pids_max() -> u64 {
    let read = |path: &str| std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<u64>().ok());
    let node = match (read("/proc/sys/kernel/pid_max"), read("/proc/sys/kernel/threads-max")) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => 32_768,
    };
    (node / 4 * 3).max(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_is_made_once_and_kept() {
        let state = tempfile::tempdir().expect("dir");
        let first = scope(state.path()).expect("scope");
        assert!(is_scope(&first), "{first}");
        assert_eq!(scope(state.path()).expect("scope"), first);
    }

    #[test]
    fn the_node_offers_its_capacity_less_the_reserve() {
        let reserve = NodeReserve { memory_mib: 1024, cpu_milli: 500 };
        assert_eq!(reserve.capacity(4000, 8192), (3500, 7168));
        assert_eq!(reserve.capacity(100, 100), (0, 0), "never below nothing");
    }

    #[test]
    fn a_gpu_share_divides_the_node_by_its_gpus_and_a_cpu_node_in_four() {
        assert_eq!(DefaultLimit::GpuShare.resolve(24_000, 4), (6000, true));
        assert_eq!(DefaultLimit::GpuShare.resolve(24_000, 0), (24_000 / CPU_NODE_SHARES, true));
        assert_eq!(DefaultLimit::GpuShare.resolve(0, 8), (1, true), "never nothing: 0 means unlimited");
        assert_eq!(DefaultLimit::Fixed(512).resolve(24_000, 4), (512, false));
        assert_eq!(DefaultLimit::None.resolve(24_000, 4), (0, false));
    }

    #[test]
    fn a_job_that_asks_for_nothing_runs_under_its_gpus_share_of_the_node() {
        let dir = tempfile::tempdir().expect("dir");
        let config = SandboxConfig {
            work_dir: dir.path().join("work"),
            defaults: JobDefaults {
                memory: DefaultLimit::GpuShare,
                cpu: DefaultLimit::GpuShare,
                pids_max: 99,
            },
            ..SandboxConfig::default()
        };
        let Ok(sandbox) = Sandbox::build(&config, &dir.path().join("state")) else {
            return; // a work root this user cannot own or reach: covered by the tests above
        };
        sandbox.set_node_gpus(4);
        let d = sandbox.job_defaults();
        let (cpu, memory) = sandbox.capacity(super::super::node_cpu_milli(), super::super::node_memory_mib());
        assert!(d.memory_per_gpu && d.cpu_per_gpu, "{d:?}");
        assert_eq!((d.memory_mib, d.cpu_milli, d.pids_max), ((memory / 4).max(1), (cpu / 4).max(1), 99));
        let job: Assignment = serde_json::from_value(serde_json::json!({"job_id": 1, "attempt": 1,
            "command": ["true"], "gpu_uuids": ["GPU-a", "GPU-b"], "gpu_memory_mib": 0, "gpu_compute_pct": 0}))
        .expect("assignment");
        let two = sandbox.with_defaults(job.clone());
        assert_eq!(two.memory_mib, d.memory_mib * 2);
        assert_eq!(two.cpu_milli, (d.cpu_milli * 2).max(1000));
        let asked = sandbox.with_defaults(Assignment { memory_mib: 100, cpu_milli: 300, ..job });
        assert_eq!((asked.memory_mib, asked.cpu_milli), (100, 300), "a request is its own limit");
    }

    #[test]
    fn a_work_root_under_a_private_directory_is_refused() {
        let private = tempfile::tempdir().expect("dir");
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let err = check_traversable(&private.path().join("work")).expect_err("unreachable");
        assert!(err.to_string().contains("cannot reach"), "{err}");
    }
}
