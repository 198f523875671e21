//! One control group per attempt: limits, and a way to end every process a job started.
//!
//! A process group is not enough to stop a job: `setsid sleep 1000 &` leaves it, and a job that
//! exits after starting a daemon leaves the daemon running with the job's GPUs. A cgroup is
//! inescapable for an unprivileged process, so the agent puts each attempt's first process in
//! its own group before it execs (see `process.rs`): everything the job ever starts is inside,
//! and ending the attempt ends the group. The same group carries the job's memory and CPU
//! requests as limits, a cap on its processes (`pids.max`, so that a fork loop cannot take every
//! pid of the node from the agent, the server and the shims), and under v1 the devices it may
//! open ([`super::devices`]; under v2 through a BPF program, [`super::bpf_devices`]).
//!
//! cgroup v2 is used where the unified hierarchy offers `memory`, `cpu` or `pids`; otherwise
//! the v1 `memory`, `cpu`, `pids`, `devices` and `freezer` hierarchies, one group in each. Groups live under
//! `gantry/<scope>/` at the top of each hierarchy, where the scope is fixed per agent state
//! directory, so a restarted agent can find and end what its previous run left.
//!
//! Ending a group: v2 writes `cgroup.kill`. Where that is missing (v1, or kernels before 5.14)
//! the group is frozen, every process in it gets SIGKILL, and it is thawed, until it is empty;
//! freezing first means a process cannot fork faster than it is killed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::devices::Rule;
use super::process;

/// The v1 controllers a job's group is made in; `freezer` ends it, the others limit it.
const V1_CONTROLLERS: &[&str] = &["memory", "cpu", "pids", "devices", "freezer"];

/// The v2 controllers enabled for jobs' groups.
const V2_CONTROLLERS: &[&str] = &["memory", "cpu", "pids"];

/// v2 controllers enabled only for what they count (`io.stat`: a job's reads, which the input
/// meter judges data stalls by), when the hierarchy offers them.
const V2_STAT_CONTROLLERS: &[&str] = &["io"];

/// The CFS period the CPU quota is expressed in, µs.
const CPU_PERIOD_US: u64 = 100_000;

/// The parent groups of this agent's jobs.
#[derive(Debug, Clone)]
pub struct Cgroups {
    v2: bool,
    /// v2: the kernel loads BPF device programs ([`super::bpf_devices`]).
    bpf_devices: bool,
    /// `gantry/<scope>` in each hierarchy used (one for v2).
    parents: Vec<PathBuf>,
}

/// What a job's group limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// Memory, MiB (0: not limited).
    pub memory_mib: u64,
    /// CPU, milli-cores (0: not limited).
    pub cpu_milli: u64,
    /// Processes and threads (0: not limited).
    pub pids_max: u64,
    /// The only devices it may open (`None`: not restricted). Enforced under v1 only.
    pub devices: Option<Vec<Rule>>,
}

/// One attempt's group.
#[derive(Debug, Clone)]
pub struct Cgroup {
    v2: bool,
    /// The group in each hierarchy; the first lists the processes (v1: freezer when mounted).
    dirs: Vec<PathBuf>,
}

impl Cgroups {
    /// Finds a writable hierarchy and makes `gantry/<scope>` in it, or says why it cannot.
    ///
    /// Preference: v2 when it offers a controller jobs are limited with; else the v1
    /// hierarchies; else v2 without controllers, which still groups and ends a job (on hybrid
    /// systems the v2 hierarchy often has none, or only one such as `hugetlb`).
    pub fn open(scope: &str) -> Result<Self, String> {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let mounts = parse_mounts(&mounts);
        let unified = mounts.iter().find(|m| m.fstype == "cgroup2").map(|m| {
            let controllers = std::fs::read_to_string(m.point.join("cgroup.controllers")).unwrap_or_default();
            (m.point.clone(), controllers)
        });
        if let Some((root, controllers)) = &unified
            && controllers.split_whitespace().any(|c| V2_CONTROLLERS.contains(&c))
        {
            return Self::open_v2(root, controllers.split_whitespace().collect(), scope);
        }
        let mut parents = Vec::new();
        for controller in V1_CONTROLLERS {
            let Some(mount) = mounts.iter().find(|m| m.fstype == "cgroup" && m.has_option(controller)) else {
                continue;
            };
            let parent = mount.point.join("gantry").join(scope);
            std::fs::create_dir_all(&parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            // The freezer group goes first: it is the one that ends the job.
            if *controller == "freezer" { parents.insert(0, parent) } else { parents.push(parent) }
        }
        match (parents.is_empty(), unified) {
            (false, _) => Ok(Self { v2: false, bpf_devices: false, parents }),
            (true, Some((root, _))) => Self::open_v2(&root, Vec::new(), scope),
            (true, None) => Err("no cgroup hierarchy is mounted".into()),
        }
    }

    fn open_v2(root: &Path, available: Vec<&str>, scope: &str) -> Result<Self, String> {
        let parent = root.join("gantry").join(scope);
        std::fs::create_dir_all(&parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        let wanted: Vec<&str> = V2_CONTROLLERS
            .iter()
            .chain(V2_STAT_CONTROLLERS)
            .copied()
            .filter(|c| available.contains(c))
            .collect();
        for dir in [root.to_path_buf(), root.join("gantry"), parent.clone()] {
            for controller in &wanted {
                // Already enabled is fine; a controller that cannot be enabled shows up as a
                // missing limit file when a job asks for that limit.
                let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}"));
            }
        }
        let bpf_devices = super::bpf_devices::supported().is_ok();
        Ok(Self { v2: true, bpf_devices, parents: vec![parent] })
    }

    /// Whether a job's devices can be restricted: v1's `devices` hierarchy is mounted, or under
    /// v2 the kernel loads device programs.
    pub fn restricts_devices(&self) -> bool {
        if self.v2 {
            return self.bpf_devices;
        }
        self.parents.iter().any(|p| p.join("devices.allow").exists())
    }

    /// `v2` or `v1`, for messages.
    pub fn version(&self) -> &'static str {
        if self.v2 { "v2" } else { "v1" }
    }

    /// Makes the group `name` with `limits`.
    pub fn create(&self, name: &str, limits: &Limits) -> std::io::Result<Cgroup> {
        let group = Cgroup { v2: self.v2, dirs: self.parents.iter().map(|p| p.join(name)).collect() };
        for dir in &group.dirs {
            if dir.exists() {
                // Left by a crash between creation and clean-up: end what is in it.
                group.kill();
            } else {
                std::fs::create_dir(dir)?;
            }
        }
        group.limit(limits)?;
        Ok(group)
    }

    /// Holds every job of this agent together to `limits` (memory and CPU): the parent group.
    pub fn limit_all(&self, limits: &Limits) -> std::io::Result<()> {
        Cgroup { v2: self.v2, dirs: self.parents.clone() }.limit(limits)
    }

    /// Lifts the memory and CPU limits of the parent group (a reserve given up since the last
    /// start); a file that is missing or refuses is left as it is.
    pub fn unlimit_all(&self) {
        let unlimited: &[(&str, &str)] = if self.v2 {
            &[("memory.max", "max"), ("cpu.max", "max")]
        } else {
            &[("memory.limit_in_bytes", "-1"), ("cpu.cfs_quota_us", "-1")]
        };
        for parent in &self.parents {
            for (file, value) in unlimited {
                let path = parent.join(file);
                if path.exists() {
                    let _ = std::fs::write(path, value);
                }
            }
        }
    }

    /// Removes the (empty) parent groups; a group still holding jobs stays.
    pub fn release(&self) {
        for parent in &self.parents {
            let _ = std::fs::remove_dir(parent);
        }
    }

    /// Ends and removes every group under this agent's scope (left by a previous run) except
    /// those named in `keep`.
    pub fn remove_all(&self, keep: &std::collections::HashSet<String>) {
        let Some(names) = self.parents.first().and_then(|p| std::fs::read_dir(p).ok()) else {
            return;
        };
        for name in names.flatten().filter(|e| e.path().is_dir()).map(|e| e.file_name()) {
            if keep.contains(&*name.to_string_lossy()) {
                continue;
            }
            let group = Cgroup { v2: self.v2, dirs: self.parents.iter().map(|p| p.join(&name)).collect() };
            tracing::info!(group = %group.dirs[0].display(), "ending a job group left by a previous agent run");
            if let Err(e) = group.remove() {
                tracing::warn!(error = %e, "could not remove a job group left by a previous agent run");
            }
        }
    }
}

/// An attempt's group as it is remembered across agent restarts and handed to its shim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CgroupRef {
    /// cgroup v2.
    pub v2: bool,
    /// The group in each hierarchy.
    pub dirs: Vec<PathBuf>,
}

impl CgroupRef {
    /// The group it names.
    pub fn open(&self) -> Cgroup {
        Cgroup { v2: self.v2, dirs: self.dirs.clone() }
    }
}

impl Cgroup {
    /// How to find this group again.
    pub fn to_ref(&self) -> CgroupRef {
        CgroupRef { v2: self.v2, dirs: self.dirs.clone() }
    }

    /// The group's name (its directory's), `<job>-<attempt>`.
    pub fn name(&self) -> Option<String> {
        self.dirs.first().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned())
    }

    fn limit(&self, limits: &Limits) -> std::io::Result<()> {
        let quota = (limits.cpu_milli * CPU_PERIOD_US / 1000).max(1000);
        let memory = limits.memory_mib << 20;
        let mut writes: Vec<(&str, String)> = Vec::new();
        if self.v2 {
            if limits.memory_mib > 0 {
                writes.push(("memory.max", memory.to_string()));
            }
            if limits.cpu_milli > 0 {
                writes.push(("cpu.max", format!("{quota} {CPU_PERIOD_US}")));
            }
        } else {
            if limits.memory_mib > 0 {
                writes.push(("memory.limit_in_bytes", memory.to_string()));
            }
            if limits.cpu_milli > 0 {
                writes.push(("cpu.cfs_period_us", CPU_PERIOD_US.to_string()));
                writes.push(("cpu.cfs_quota_us", quota.to_string()));
            }
        }
        if limits.pids_max > 0 {
            writes.push(("pids.max", limits.pids_max.to_string()));
        }
        match (&limits.devices, self.v2) {
            (Some(devices), false) => {
                writes.push(("devices.deny", "a".to_owned()));
                writes.extend(devices.iter().map(|d| ("devices.allow", d.v1())));
            }
            (Some(devices), true) => super::bpf_devices::attach(&self.dirs[0], devices)
                .map_err(|e| std::io::Error::new(e.kind(), format!("allowing the job's devices: {e}")))?,
            (None, _) => {}
        }
        for (file, value) in writes {
            let Some(path) = self.file(file) else {
                tracing::warn!(file, "the job's cgroup has no such file: the limit is not applied");
                continue;
            };
            std::fs::write(&path, value)
                .map_err(|e| std::io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))?;
        }
        Ok(())
    }

    /// The group's file `name` in whichever hierarchy has it.
    pub fn file(&self, name: &str) -> Option<PathBuf> {
        self.dirs.iter().map(|d| d.join(name)).find(|p| p.exists())
    }

    /// The files a process writes `0` to, to move itself into the group.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// The processes in the group now.
    pub fn pids(&self) -> Vec<u32> {
        let text = std::fs::read_to_string(self.dirs[0].join("cgroup.procs")).unwrap_or_default();
        text.lines().filter_map(|l| l.trim().parse().ok()).collect()
    }

    /// Sends `signal` to every process in the group.
    pub fn signal(&self, signal: i32) {
        for pid in self.pids() {
            process::signal_pid(pid, signal);
        }
    }

    /// Whether the kernel killed a process of the group for exceeding its memory limit.
    pub fn oom_killed(&self) -> bool {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        let text = self.file(file).and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
        text.lines().any(|l| l.strip_prefix("oom_kill ").is_some_and(|n| n.trim() != "0"))
    }

    /// SIGKILLs every process in the group, daemons included; returns whether it emptied.
    /// Blocks (briefly): call it off the async runtime.
    pub fn kill(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        if self.v2 && std::fs::write(self.dirs[0].join("cgroup.kill"), "1").is_ok() {
            while !self.pids().is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        while !self.pids().is_empty() {
            if Instant::now() >= deadline {
                return false;
            }
            self.freeze(true);
            self.signal(libc::SIGKILL);
            self.freeze(false);
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Freezes (or thaws) the group where a freezer exists, waiting briefly for it to settle.
    fn freeze(&self, frozen: bool) {
        let (file, value) = match (self.v2, frozen) {
            (true, true) => ("cgroup.freeze", "1"),
            (true, false) => ("cgroup.freeze", "0"),
            (false, true) => ("freezer.state", "FROZEN"),
            (false, false) => ("freezer.state", "THAWED"),
        };
        let Some(path) = self.file(file) else {
            return;
        };
        if std::fs::write(&path, value).is_err() || !frozen {
            return;
        }
        let settled = || {
            if self.v2 {
                let events = self.file("cgroup.events").and_then(|p| std::fs::read_to_string(p).ok());
                events.is_some_and(|e| e.lines().any(|l| l == "frozen 1"))
            } else {
                std::fs::read_to_string(&path).is_ok_and(|s| s.trim() == "FROZEN")
            }
        };
        let until = Instant::now() + Duration::from_millis(200);
        while !settled() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Ends every process in the group and removes it. Blocks: call it off the async runtime.
    pub fn remove(&self) -> std::io::Result<()> {
        self.kill();
        for dir in &self.dirs {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    // Busy until the last killed process is gone.
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    Err(_) => {
                        self.kill();
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A line of `/proc/self/mountinfo`, as much as is needed here.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    point: PathBuf,
    fstype: String,
    super_options: String,
}

impl Mount {
    fn has_option(&self, option: &str) -> bool {
        self.super_options.split(',').any(|o| o == option)
    }
}

impl Cgroup {
    /// The group's path below its hierarchy's mount point (`/gantry/<scope>/…`): what an OCI
    /// runtime's `cgroupsPath` names.
    pub fn runtime_path(&self) -> Option<String> {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mounts = parse_mounts(&mounts);
        let dir = self.dirs.first()?;
        let mount = mounts
            .iter()
            .filter(|m| m.fstype.starts_with("cgroup") && dir.starts_with(&m.point))
            .max_by_key(|m| m.point.as_os_str().len())?;
        Some(format!("/{}", dir.strip_prefix(&mount.point).ok()?.display()))
    }
}

fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let point = head.split_whitespace().nth(4)?;
            let mut tail = tail.split_whitespace();
            let fstype = tail.next()?.to_owned();
            let super_options = tail.nth(1).unwrap_or_default().to_owned();
            Some(Mount { point: PathBuf::from(point), fstype, super_options })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_mounts_are_told_apart_with_their_controllers() {
        let text = "\
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
22 1 0:21 / /proc rw - proc proc rw";
        let mounts = parse_mounts(text);
        assert_eq!(mounts.len(), 4);
        assert!(mounts[0].has_option("cpu") && mounts[0].has_option("cpuacct"));
        assert!(!mounts[0].has_option("cpuset"));
        assert_eq!(mounts[1].point, PathBuf::from("/sys/fs/cgroup/memory"));
        assert!(mounts[1].has_option("memory"));
        assert_eq!(mounts[2].fstype, "cgroup2");
    }
}
