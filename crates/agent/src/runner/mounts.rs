//! A job's own view of the file system: a mount namespace per attempt, with a private `/tmp`
//! and `/dev/shm` and a `/proc` that shows the job only its own user's processes.
//!
//! Jobs of different teams on one node used to share `/tmp` and `/dev/shm` (a file or shared
//! memory segment left world-readable by one was readable by the other) and saw every process's
//! `/proc/<pid>/cmdline`. With a root agent, each attempt's first process, between fork and exec
//! ([`super::child`]), after joining its cgroup and before dropping root:
//!
//! 1. unshares its mount namespace and makes every mount in it private, so nothing it mounts
//!    propagates back to the node (and nothing the node mounts later reaches the job);
//! 2. mounts a fresh tmpfs on `/tmp` and on `/dev/shm` (mode 1777, `nosuid,nodev`, capped at
//!    [`MountSpec::tmp_bytes`] and [`MountSpec::shm_bytes`]). tmpfs pages are charged to the
//!    memory cgroup of the process that writes them, the job's, so they also count against its
//!    memory limit. They disappear with the namespace, when the attempt's last process ends;
//! 3. when the job's work directory lies under one of those (a `--work-dir` under `/tmp`), binds
//!    it back at the same path inside the new tmpfs, so the job still finds its directory; so
//!    too the MPS control daemon's pipe directory (`/tmp/nvidia-mps` by default), so that jobs
//!    on an MPS node still reach the daemon;
//! 4. binds each volume the job mounts ([`Bind`]: a directory the agent made and checked) at
//!    its path, read-only when asked (a bind remounted `MS_RDONLY`, which the job cannot undo);
//! 5. mounts a new `proc` instance on `/proc` with `hidepid=2`: the job sees (and can read the
//!    `cmdline` of) only processes of its own user. Jobs of one team run as one user and so
//!    still see each other, as they can signal each other.
//!
//! The job cannot undo this: it is not root, and in a user namespace of its own the mounts it
//! inherited are locked together, so unmounting one to reveal what lies beneath is refused.
//!
//! Everything the child needs is prepared here, in the parent ([`Private::new`]); the child
//! makes only `unshare`, `mount`, `mkdir`, `open`, `close` and `chdir` calls on that memory.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The default cap of a job's private `/tmp`.
pub const DEFAULT_TMP_BYTES: u64 = 1 << 30;

/// What the agent is told about jobs' private mounts (`--job-tmp-size`, `--job-shm-size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountConfig {
    /// Cap of each job's `/tmp`, bytes.
    pub tmp_bytes: u64,
    /// Cap of each job's `/dev/shm`, bytes (`None`: the job's memory limit, or when it has
    /// none half the node's memory, tmpfs' own default).
    pub shm_bytes: Option<u64>,
}

impl Default for MountConfig {
    fn default() -> Self {
        Self { tmp_bytes: DEFAULT_TMP_BYTES, shm_bytes: None }
    }
}

impl MountConfig {
    /// The mounts of one attempt whose memory limit is `memory_mib` (0: none) and whose work
    /// directory is `workdir`, started in `cwd`.
    pub fn spec(&self, memory_mib: u64, workdir: &Path, cwd: &Path) -> MountSpec {
        let shm_bytes = self.shm_bytes.or((memory_mib > 0).then_some(memory_mib << 20));
        let keep = mps_pipe_dir().into_iter().collect();
        MountSpec {
            tmp_bytes: self.tmp_bytes,
            shm_bytes,
            workdir: workdir.to_owned(),
            cwd: cwd.to_owned(),
            keep,
            binds: Vec::new(),
        }
    }
}

/// The MPS control daemon's pipe directory, which jobs must reach through their own `/tmp`.
fn mps_pipe_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
        .map_or_else(|| PathBuf::from("/tmp/nvidia-mps"), PathBuf::from);
    dir.is_dir().then_some(dir)
}

/// One attempt's private mounts, as the agent hands them to the attempt's shim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountSpec {
    /// Cap of `/tmp`, bytes.
    pub tmp_bytes: u64,
    /// Cap of `/dev/shm`, bytes (`None`: tmpfs' default, half the node's memory).
    pub shm_bytes: Option<u64>,
    /// The attempt's work directory (bound back when it lies under `/tmp` or `/dev/shm`).
    pub workdir: PathBuf,
    /// Where the job starts.
    pub cwd: PathBuf,
    /// Other directories the job must still reach when they lie under `/tmp` or `/dev/shm`:
    /// the MPS control daemon's pipe directory (`/tmp/nvidia-mps` by default).
    #[serde(default)]
    pub keep: Vec<PathBuf>,
    /// Volumes to bind at their paths (`gantry_api::volumes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binds: Vec<Bind>,
}

/// A directory of the node bound at `target` in the job's mount namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    /// The node's directory.
    pub source: PathBuf,
    /// Where the job sees it (the agent made the directory).
    pub target: PathBuf,
    /// Remounted read-only.
    pub read_only: bool,
}

/// At most this many directories are bound back (the child keeps their descriptors on its stack).
const MOST_KEPT: usize = 4;

/// A tmpfs to mount: where, and with which options.
#[derive(Debug)]
struct Tmpfs {
    target: CString,
    options: CString,
}

/// A directory bound back inside a new tmpfs at its own path.
#[derive(Debug)]
struct Keep {
    /// The directory, opened (`O_PATH`) before the tmpfs hides it.
    dir: CString,
    /// Directories to make inside the tmpfs, outermost first, the directory itself last.
    make: Vec<CString>,
}

/// The mounts prepared for the child.
#[derive(Debug)]
pub struct Private {
    tmpfs: Vec<Tmpfs>,
    keep: Vec<Keep>,
    /// Volumes: source, target, read-only.
    binds: Vec<(CString, CString, bool)>,
    /// Where the job starts, entered again when its work directory was bound back.
    cwd: Option<CString>,
}

fn c(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)
}

impl Private {
    /// Prepares `spec`'s mounts. A `/dev/shm` the node does not have is not made, and a kept
    /// directory that does not exist is left out.
    pub fn new(spec: &MountSpec) -> io::Result<Self> {
        let mut tmpfs = Vec::new();
        let (mut keep, mut cwd) = (Vec::new(), None);
        let targets = [(Path::new("/tmp"), Some(spec.tmp_bytes)), (Path::new("/dev/shm"), spec.shm_bytes)];
        for (target, size) in targets {
            if target != Path::new("/tmp") && !target.is_dir() {
                continue;
            }
            tmpfs.push(self::tmpfs(target, size)?);
            if spec.workdir.starts_with(target) {
                keep.push(kept(target, &spec.workdir)?);
                cwd = Some(c(&spec.cwd)?);
            }
            for dir in spec.keep.iter().filter(|d| d.starts_with(target) && d.is_dir()) {
                keep.push(kept(target, dir)?);
            }
        }
        if keep.len() > MOST_KEPT {
            return Err(io::Error::other(format!("at most {MOST_KEPT} directories can be kept")));
        }
        let binds = spec
            .binds
            .iter()
            .map(|b| Ok((c(&b.source)?, c(&b.target)?, b.read_only)))
            .collect::<io::Result<_>>()?;
        Ok(Self { tmpfs, keep, binds, cwd })
    }

    /// In the child: enters a new mount namespace and mounts everything. Async-signal-safe.
    #[allow(unsafe_code)] // reason: unshare, mount, mkdir, open and chdir have no wrapper in std.
    pub fn enter(&self) -> io::Result<()> {
        let check = |rc: libc::c_int| if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) };
        // SAFETY: plain system calls on NUL-terminated strings owned by `self`, allocated before
        // the fork, and on buffers on this stack; null pointers are allowed where passed
        // (mount's source, type and data).
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            let none = std::ptr::null();
            check(libc::mount(none, c"/".as_ptr(), none, libc::MS_REC | libc::MS_PRIVATE, none.cast()))?;
            let mut fds = [-1; MOST_KEPT];
            for (k, fd) in self.keep.iter().zip(fds.iter_mut()) {
                *fd = libc::open(k.dir.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
                if *fd < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            let flags = libc::MS_NOSUID | libc::MS_NODEV;
            for t in &self.tmpfs {
                let data = t.options.as_ptr().cast();
                check(libc::mount(c"tmpfs".as_ptr(), t.target.as_ptr(), c"tmpfs".as_ptr(), flags, data))?;
            }
            for (k, &fd) in self.keep.iter().zip(fds.iter()) {
                for dir in &k.make {
                    // Root makes them with the agent's umask; the last only serves as the
                    // bind's mount point.
                    if libc::mkdir(dir.as_ptr(), 0o711) != 0
                        && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
                let mut source = [0u8; 32];
                let source = fd_path(&mut source, fd);
                let target = k.dir.as_ptr();
                check(libc::mount(source.cast(), target, none, libc::MS_BIND | libc::MS_REC, none.cast()))?;
                libc::close(fd);
            }
            for (source, target, read_only) in &self.binds {
                let bind = libc::MS_BIND | libc::MS_REC;
                check(libc::mount(source.as_ptr(), target.as_ptr(), none, bind, none.cast()))?;
                if *read_only {
                    let again = bind | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
                    check(libc::mount(none, target.as_ptr(), none, again, none.cast()))?;
                }
            }
            if let Some(cwd) = &self.cwd {
                check(libc::chdir(cwd.as_ptr()))?;
            }
            let proc_flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            let hidepid = c"hidepid=2".as_ptr().cast();
            check(libc::mount(c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), proc_flags, hidepid))?;
        }
        Ok(())
    }
}

/// `dir` (under the tmpfs at `target`), and the directories to make to bind it back.
fn kept(target: &Path, dir: &Path) -> io::Result<Keep> {
    let mut make = Vec::new();
    let mut at = target.to_path_buf();
    for part in dir.strip_prefix(target).map_err(io::Error::other)?.components() {
        at.push(part);
        make.push(c(&at)?);
    }
    Ok(Keep { dir: c(dir)?, make })
}

fn tmpfs(target: &Path, size: Option<u64>) -> io::Result<Tmpfs> {
    let options = match size {
        Some(bytes) => format!("mode=1777,size={}", bytes.max(4096)),
        None => "mode=1777".to_owned(),
    };
    Ok(Tmpfs { target: c(target)?, options: CString::new(options).map_err(io::Error::other)? })
}

/// Writes `/proc/self/fd/<fd>` and a NUL into `buf` without allocating; returns its start.
fn fd_path(buf: &mut [u8; 32], fd: libc::c_int) -> *const u8 {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 12];
    let (mut n, mut len) = (fd.unsigned_abs(), 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    buf.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptor_path_is_written_without_allocating() {
        for fd in [0, 7, 42, 1234, i32::MAX] {
            let mut buf = [0u8; 32];
            fd_path(&mut buf, fd);
            let end = buf.iter().position(|&b| b == 0).expect("terminated");
            assert_eq!(std::str::from_utf8(&buf[..end]).expect("ascii"), format!("/proc/self/fd/{fd}"));
        }
    }

    #[test]
    fn a_work_directory_under_tmp_is_bound_back_and_one_elsewhere_is_not() {
        let config = MountConfig::default();
        let under = Private::new(&config.spec(0, Path::new("/tmp/w/s/1-1"), Path::new("/tmp/w/s/1-1/a")))
            .expect("prepared");
        let keep = under.keep.first().expect("bound back");
        let made: Vec<_> = keep.make.iter().map(|m| m.to_str().expect("utf-8").to_owned()).collect();
        assert_eq!(made, ["/tmp/w", "/tmp/w/s", "/tmp/w/s/1-1"]);
        assert!(under.cwd.is_some(), "the job starts in its directory again");
        let elsewhere =
            Private::new(&config.spec(0, Path::new("/var/lib/w/1-1"), Path::new("/var/lib/w/1-1")))
                .expect("prepared");
        assert!(elsewhere.keep.is_empty() && elsewhere.cwd.is_none());
    }

    #[test]
    fn an_existing_directory_to_keep_under_tmp_is_bound_back_and_a_missing_one_is_left_out() {
        let mps = tempfile::tempdir_in("/tmp").expect("dir");
        let missing = Path::new("/tmp/gantry-no-such-dir");
        let spec = MountSpec { keep: vec![mps.path().to_owned(), missing.to_owned()], ..base_spec() };
        let private = Private::new(&spec).expect("prepared");
        let kept: Vec<_> = private.keep.iter().map(|k| k.dir.to_str().expect("utf-8").to_owned()).collect();
        assert_eq!(kept, [mps.path().display().to_string()]);
    }

    fn base_spec() -> MountSpec {
        let dir = Path::new("/var/lib/w/1-1");
        MountConfig::default().spec(0, dir, dir)
    }

    #[test]
    fn shared_memory_is_capped_at_the_jobs_memory_unless_the_agent_says_otherwise() {
        let dir = Path::new("/w");
        assert_eq!(MountConfig::default().spec(512, dir, dir).shm_bytes, Some(512 << 20));
        assert_eq!(MountConfig::default().spec(0, dir, dir).shm_bytes, None);
        let fixed = MountConfig { shm_bytes: Some(64 << 20), ..MountConfig::default() };
        assert_eq!(fixed.spec(512, dir, dir).shm_bytes, Some(64 << 20));
        let tmp = tmpfs(Path::new("/tmp"), Some(1 << 30)).expect("tmpfs");
        assert_eq!(tmp.options.to_str().expect("utf-8"), "mode=1777,size=1073741824");
    }
}
