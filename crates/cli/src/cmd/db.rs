//! `gantry db migrate --from DATA_DIR --to postgres://…`: a SQLite cluster moved into an empty
//! PostgreSQL database (the copy itself is `gantry_store::postgres::copy`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use gantry_store::postgres::copy::{CopyError, sqlite_to_postgres};
use gantry_store::postgres::redacted;

use super::control::Database;

/// Database subcommands.
#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Copy a stopped SQLite cluster's whole state (jobs, tokens, audit chain, usage, …) into an
    /// empty PostgreSQL database, in one transaction; then start `gantry server --db URL`.
    Migrate(MigrateArgs),
}

/// Arguments of `gantry db migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The SQLite cluster's data directory (the one with `gantry.db`); its server must be stopped.
    #[arg(long, value_name = "DATA_DIR")]
    from: PathBuf,
    /// The empty PostgreSQL database: `postgres://USER@HOST:PORT/DB` (the password from
    /// `PGPASSWORD` when the URL has none).
    #[arg(long, value_name = "URL")]
    to: String,
}

/// Runs a `gantry db` subcommand.
pub fn run(command: DbCommand) -> anyhow::Result<()> {
    match command {
        DbCommand::Migrate(args) => migrate(&args),
    }
}

fn migrate(args: &MigrateArgs) -> anyhow::Result<()> {
    let url = match Database::parse(&args.to) {
        Ok(Database::Postgres(url)) => url,
        _ => bail!("--to must be a PostgreSQL URL like postgres://gantry@db:5432/gantry, not `{}`", args.to),
    };
    let from = &args.from;
    if !from.join("gantry.db").is_file() {
        bail!(
            "{} holds no SQLite store (no gantry.db): give --from the data directory of the cluster to move",
            from.display()
        );
    }
    let _lock = lock(from)?;
    let shown = redacted(&url);
    let copied = match sqlite_to_postgres(from, &url) {
        Ok(copied) => copied,
        Err(CopyError::Refused(why)) => bail!("{why}; nothing was written to {shown}"),
        Err(CopyError::Store(e)) => {
            return Err(e).with_context(|| format!("the copy to {shown} failed and was rolled back"));
        }
    };
    println!(
        "copied {} rows of {} tables from {} to {shown}; start the control plane with `gantry server --db {shown}`",
        copied.rows(),
        copied.tables.len(),
        from.display()
    );
    Ok(())
}

/// The data directory's `gantry.lock`, held for the copy: a running `gantry up` or `gantry
/// server` holds it (and would write beside the copy), and one started meanwhile waits.
fn lock(data: &Path) -> anyhow::Result<std::fs::File> {
    let path = data.join("gantry.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "a gantry up or gantry server is using {} (it holds gantry.lock): stop it first, then migrate",
            data.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}
