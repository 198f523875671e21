//! A closed pipe ends a printing command quietly, as it ends any Unix tool.
//!
//! Rust ignores SIGPIPE, so `gantry jobs | head` used to panic on the first line written after
//! `head` exited ("failed printing to stdout: Broken pipe"). Commands that print and exit get the
//! default disposition back; daemons keep SIGPIPE ignored, since they write to sockets whose
//! peers may hang up and must get `EPIPE` rather than die.

/// Lets a write to a closed stdout end the process, as the default SIGPIPE action does.
#[allow(unsafe_code)] // reason: signal(2) has no wrapper in std; it touches no memory of ours.
pub fn exit_quietly_on_closed_pipe() {
    // SAFETY: setting a standard signal's disposition to SIG_DFL installs no handler and
    // happens before any thread of ours starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
