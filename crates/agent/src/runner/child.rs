//! What runs in a job's process between `fork` and `exec`: entering its network namespace and
//! its cgroup, its own mounts ([`super::mounts`]), and becoming its user.
//!
//! Both must happen before the job's own code runs. Joining the cgroup from the parent after
//! spawning would leave a window in which the job can fork outside it; and std's
//! `CommandExt::uid` changes user *before* `pre_exec` closures run, after which the child could
//! no longer write to the root-owned `cgroup.procs`. So one `pre_exec` closure does both, in that
//! order, and std's own user switching is not used. The closure runs in a forked copy of a
//! multi-threaded process, so it only makes async-signal-safe system calls on memory prepared
//! before the fork, and allocates nothing.
//!
//! Privileges are dropped for good: supplementary groups are replaced by the user's own,
//! `setgid` and `setuid` as root set the real, effective and saved ids, and `no_new_privs`
//! stops setuid binaries (`su`, `sudo`) from raising them again. The closure checks that
//! `setuid(0)` now fails. Descriptors the agent's libraries may have opened without
//! close-on-exec are marked close-on-exec so the job inherits only its stdio. The umask is 077:
//! what a job creates is its own user's alone (0600 files, 0700 directories) unless it says
//! otherwise.
//!
//! The network namespace ([`super::network`]) is entered first, with `setns` on a descriptor the
//! parent opened (close-on-exec, so the job does not inherit it): it needs root, and a job must
//! never run a single instruction in the node's namespace.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Who the job becomes, in the form the system calls take.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    /// User id.
    pub uid: libc::uid_t,
    /// Primary group id.
    pub gid: libc::gid_t,
    /// Supplementary groups.
    pub groups: Vec<libc::gid_t>,
}

/// What the child does before exec, prepared in the parent.
#[derive(Debug)]
pub struct Confinement {
    /// `cgroup.procs` files to move into (one per hierarchy).
    join: Vec<CString>,
    /// `None`: keep the agent's user.
    user: Option<Credentials>,
    /// The attempt's network namespace (`None`: the node's).
    netns: Option<std::fs::File>,
    /// `None`: the node's mounts.
    mounts: Option<super::mounts::Private>,
}

impl Confinement {
    /// Prepares joining the groups whose `cgroup.procs` files are `join` and becoming `user`.
    pub fn new(join: &[PathBuf], user: Option<Credentials>) -> io::Result<Self> {
        let join = join
            .iter()
            .map(|p| CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other))
            .collect::<io::Result<_>>()?;
        Ok(Self { join, user, netns: None, mounts: None })
    }

    /// Also enters the network namespace open in `netns` (before anything else).
    pub fn with_netns(mut self, netns: Option<std::fs::File>) -> Self {
        self.netns = netns;
        self
    }

    /// Also gives the job its own mount namespace (after joining the groups, as root).
    pub fn with_mounts(mut self, mounts: Option<super::mounts::Private>) -> Self {
        self.mounts = mounts;
        self
    }

    /// Installs the confinement on `cmd`.
    #[allow(unsafe_code)] // reason: only `pre_exec` runs code in the child between fork and exec.
    pub fn install(self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: `enter` is async-signal-safe: it makes only setns, open, write, close, syscall,
        // prctl, unshare, mount, mkdir, chdir, umask, setgroups, setgid and setuid calls on memory
        // owned by the closure, allocated before the fork, and it does not allocate, lock or touch
        // any other state of the parent.
        unsafe {
            cmd.pre_exec(move || self.enter());
        }
    }

    fn enter(&self) -> io::Result<()> {
        if let Some(ns) = &self.netns {
            enter_netns(ns)?;
        }
        for procs in &self.join {
            write_zero(procs)?;
        }
        if let Some(mounts) = &self.mounts {
            mounts.enter()?;
        }
        close_inherited();
        set_umask();
        if let Some(user) = &self.user {
            become_user(user)?;
        }
        Ok(())
    }
}

/// Moves this process into the network namespace open in `ns`.
#[allow(unsafe_code)] // reason: setns(2) has no wrapper in std.
fn enter_netns(ns: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: setns takes a descriptor this closure owns and a flag; it touches no memory.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes "0" (this process) to a `cgroup.procs` file.
#[allow(unsafe_code)] // reason: std's file API may allocate, which is not allowed after fork.
fn write_zero(path: &CString) -> io::Result<()> {
    // SAFETY: `path` is a valid NUL-terminated string; the buffer is a static byte.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, b"0".as_ptr().cast(), 1);
        let error = io::Error::last_os_error();
        libc::close(fd);
        if written != 1 {
            return Err(error);
        }
    }
    Ok(())
}

/// Marks every descriptor above stderr close-on-exec (kernels before 5.11 lack the call; then
/// only the descriptors already so marked are closed, which is all of Rust's).
#[allow(unsafe_code)] // reason: close_range(2) has no wrapper in std.
fn close_inherited() {
    // SAFETY: close_range takes plain integers; marking descriptors close-on-exec cannot affect
    // memory, and std's exec-error pipe is already close-on-exec.
    unsafe {
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
    }
}

#[allow(unsafe_code)] // reason: umask(2) has no wrapper in std.
fn set_umask() {
    // SAFETY: umask takes a plain integer and cannot fail.
    unsafe {
        libc::umask(0o077);
    }
}

#[allow(unsafe_code)] // reason: setgroups, setgid, setuid and prctl have no wrapper in std.
fn become_user(user: &Credentials) -> io::Result<()> {
    let check = |rc: libc::c_int| if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) };
    // SAFETY: plain system calls; `groups` outlives the call and its length is passed with it.
    unsafe {
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        check(libc::setgroups(user.groups.len(), user.groups.as_ptr()))?;
        check(libc::setgid(user.gid))?;
        check(libc::setuid(user.uid))?;
        if user.uid != 0 && libc::setuid(0) == 0 {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
    }
    Ok(())
}
