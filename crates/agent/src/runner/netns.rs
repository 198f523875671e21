//! Network namespaces kept as files, as `ip netns add` keeps them.
//!
//! A namespace lives as long as a process is in it or something holds it open. To make one that
//! outlives its maker, a short-lived thread leaves the agent's namespace (`unshare(CLONE_NEWNET)`
//! acts on the calling thread only), brings the new namespace's `lo` up, and bind-mounts its
//! `/proc/thread-self/ns/net` onto an empty file; the thread then ends and the mount keeps the
//! namespace. CNI plugins get that file as `CNI_NETNS`; the job enters it with `setns` on a
//! descriptor opened before `fork` ([`super::child`]). Removing is unmounting (detached, so a
//! plugin still holding it does not block) and deleting the file; the namespace itself goes
//! away with the last process in it.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Makes a new network namespace with `lo` up, kept at `path` (which must not exist).
pub fn create(path: &Path) -> io::Result<()> {
    std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
    let target = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let made = std::thread::Builder::new()
        .name("netns".into())
        .spawn(move || enter_new_and_keep(&target))
        .map_err(io::Error::other)?
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")));
    if made.is_err() {
        let _ = std::fs::remove_file(path);
    }
    made
}

/// Unmounts the namespace file at `path` and removes it; a missing file is not an error.
#[allow(unsafe_code)] // reason: umount2(2) has no wrapper in std.
pub fn remove(path: &Path) -> io::Result<()> {
    let target = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: `target` is a valid NUL-terminated path; umount2 touches no memory of ours.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    let unmounted = io::Error::last_os_error();
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(()) => {}
    }
    // EINVAL: the file was not a mount point (a namespace that was never mounted).
    if rc != 0 && unmounted.raw_os_error() != Some(libc::EINVAL) {
        return Err(unmounted);
    }
    Ok(())
}

/// Whether `path` is a mounted network namespace (not just a left-over empty file).
pub fn is_mounted(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = path.display().to_string();
    text.lines().any(|l| l.split_whitespace().nth(4) == Some(wanted.as_str()))
}

/// Runs `command` with its network namespace the one kept at `path` (a thread enters it with
/// `setns`, and the child it forks inherits it; the agent's other threads stay where they are).
pub fn run_in(path: &Path, mut command: std::process::Command) -> io::Result<std::process::Output> {
    let ns = std::fs::File::open(path)?;
    std::thread::Builder::new()
        .name("netns-run".into())
        .spawn(move || {
            enter(&ns)?;
            command.stdin(std::process::Stdio::null()).output()
        })
        .map_err(io::Error::other)?
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
}

/// Moves the calling thread into the network namespace `ns` refers to.
#[allow(unsafe_code)] // reason: setns(2) has no wrapper in std.
fn enter(ns: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor of a namespace file; setns changes only this thread, which
    // ends once its one command has run.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs on the namespace thread: a new namespace for this thread, `lo` up, then the bind mount.
#[allow(unsafe_code)] // reason: unshare(2) and mount(2) have no wrapper in std.
fn enter_new_and_keep(target: &CString) -> io::Result<()> {
    // SAFETY: unshare takes a flag and changes only this thread's namespace; this thread ends
    // right after, so no other code of the agent ever runs in the new namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    loopback_up()?;
    let source = c"/proc/thread-self/ns/net";
    // SAFETY: both paths are valid NUL-terminated strings; the other arguments are plain values.
    let rc = unsafe {
        libc::mount(source.as_ptr(), target.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null())
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `struct ifreq` with the flags member of its union, padded to the kernel's size.
#[repr(C)]
struct IfreqFlags {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Sets `lo` of the calling thread's namespace up (`ip link set lo up`).
#[allow(unsafe_code)] // reason: SIOCGIFFLAGS/SIOCSIFFLAGS are ioctls.
fn loopback_up() -> io::Result<()> {
    let mut req = IfreqFlags { name: [0; libc::IFNAMSIZ], flags: 0, _pad: [0; 22] };
    for (slot, byte) in req.name.iter_mut().zip(b"lo") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: a datagram socket only to carry the ioctls; `req` is a valid ifreq-sized buffer
    // that outlives both calls; the descriptor is closed on every path.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req);
        if rc == 0 {
            req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            rc = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req);
        }
        let error = io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 {
            return Err(error);
        }
    }
    Ok(())
}
