//! A closed pipe ends a printing command quietly, as it ends any Unix tool.
//!
//! Rust ignores SIGPIPE, so `gantry jobs | head` used to panic on the first line written after
//! `head` exited ("failed printing to stdout: Broken pipe"). Commands that print and exit get the
//! default action back, but only for their own output: SIGPIPE also comes from writing to a
//! socket the server reset (rustls and hyper write with `writev`, which has no `MSG_NOSIGNAL`),
//! and a client that fails over to another server must get `EPIPE` there rather than die. So the
//! handler ends the process as the default action would only when stdout or stderr is the pipe
//! that broke. Daemons keep SIGPIPE ignored.

/// Lets a write to a closed stdout (or stderr) end the process, as the default SIGPIPE action
/// does; a write to a closed socket fails with `EPIPE` instead.
#[allow(unsafe_code)] // reason: signal(2) has no wrapper in std; the handler touches no memory of ours.
pub fn exit_quietly_on_closed_pipe() {
    // SAFETY: installs a handler that calls only async-signal-safe functions (poll, signal,
    // raise), before any thread of ours starts.
    unsafe {
        libc::signal(libc::SIGPIPE, on_sigpipe as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
}

/// Whether stdout or stderr is a pipe (or socket) whose reader is gone.
#[allow(unsafe_code)] // reason: poll(2) on two descriptors the process owns.
fn own_output_broken() -> bool {
    let mut fds = [1, 2].map(|fd| libc::pollfd { fd, events: 0, revents: 0 });
    // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, 0) };
    ready > 0 && fds.iter().any(|p| p.revents & (libc::POLLERR | libc::POLLHUP) != 0)
}

#[allow(unsafe_code)] // reason: a signal handler restoring the default action and raising again.
extern "C" fn on_sigpipe(_: libc::c_int) {
    if own_output_broken() {
        // SAFETY: signal and raise are async-signal-safe; SIGPIPE is blocked while this handler
        // runs, so the raised one is delivered, with the default action, when it returns.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
    }
}
