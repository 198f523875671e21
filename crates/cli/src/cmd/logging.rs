//! Logs of the long-running commands (`up`, `server`, `agent`): structured lines to stderr and,
//! appended, to `<data>/gantry.log` (0600), so a 500 answered hours ago can still be explained
//! after the terminal is gone. Level: `GANTRY_LOG`, else `RUST_LOG`, else `info`; either takes
//! tracing's filter syntax (`info,gantry_server=debug`).
//!
//! Nothing logged carries a secret: tokens are only ever printed to stdout once, at creation,
//! and requests are logged by outcome, never by header or body.

use std::io::IsTerminal;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Starts logging to stderr and to `<data>/gantry.log`; returns the file's path.
pub fn init(data: &Path) -> anyhow::Result<PathBuf> {
    let path = data.join("gantry.log");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open the log file {}", path.display()))?;
    // An older file may have been created with looser permissions.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter());
    let to_file =
        tracing_subscriber::fmt::layer().with_writer(Mutex::new(file)).with_ansi(false).with_filter(filter());
    // A second init (tests running two commands in one process) keeps the first subscriber.
    let _ = tracing_subscriber::registry().with(stderr).with(to_file).try_init();
    Ok(path)
}

fn filter() -> EnvFilter {
    let spec = ["GANTRY_LOG", "RUST_LOG"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "info".to_owned());
    EnvFilter::try_new(&spec).unwrap_or_else(|e| {
        eprintln!("warning: ignoring the log filter {spec:?}: {e}");
        EnvFilter::new("info")
    })
}
