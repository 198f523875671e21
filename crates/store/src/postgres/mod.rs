//! The PostgreSQL store: the same [`Store`](crate::Store), the same SQL and the same group
//! commit as [`crate::SqliteStore`], on a database its operators already run.
//!
//! **Shape.** One writer thread owns the only writing connection and commits in groups (the
//! [`crate::writer`] the SQLite store uses: each request under its own savepoint, one `COMMIT`
//! per group, answers after it), and a few reading connections serve reads beside it. Every
//! rule (what a placement checks, how a lost node requeues its jobs) is the SQL of the
//! `sqlite` modules, run through [`crate::db::Conn`]; the connection rewrites the few words
//! the dialects spell differently.
//!
//! **Submissions in bulk.** Each statement is a round trip to the server, and a submission
//! alone costs eight (savepoint, request-id lookup, insert, inputs, transition, audit head,
//! audit row, release) and its share of the commit: one writer thread doing those one after
//! another tops out near 700 a second. So a run of plain submissions queued in one group is
//! written together ([`bulk`]): the run's request ids looked up in one query, its job ids
//! taken from the sequence in one, the audit head locked once, and the jobs, their transitions
//! and their chained audit rows inserted by one statement, whatever the run's length. The
//! triggers check and keep every row as they do for single writes; a run the database refuses
//! is rolled back to its savepoint and written one submission at a time.
//!
//! **Durability.** Every connection sets `synchronous_commit = on`: `COMMIT` returns once the
//! server has flushed the commit to its WAL, so an acknowledged write survives a crash of either
//! process (as far as the server's own `fsync` setting holds).
//!
//! **Invariants in the database.** The schema (`migrations/postgres/`, the same numbers as
//! SQLite's) keeps what the rules must never break even against a writer that skips them:
//! a trigger refuses an allocation that does not fit beside what its GPU holds (taking the
//! GPU's row lock first, so two transactions cannot both fit into the same room), a node epoch
//! only grows, an audit row must follow the chain's head; triggers keep the scheduler's change
//! log (gap-free: a counter row under its lock rather than a sequence, which would leave gaps at
//! rollbacks and could commit out of order) and the job counts.
//!
//! **Threads.** The trait is synchronous and is called from tokio workers, the blocking pool
//! and plain threads alike. The connections' I/O runs on a small runtime the store owns; a call
//! sends its query there and waits on a channel, so no runtime is ever entered from inside
//! another.

mod bulk;
mod conn;
pub mod copy;
pub(crate) mod migrate;
pub mod tls;

use std::str::FromStr;
use std::sync::Mutex;

use tokio_postgres::Config;

use crate::db::Conn;
use crate::model::{AuditEntry, Change, Changed};
use crate::writer::{Bulk, Submission, Writer};
use crate::{Result, StoreError};
use conn::PgConn;

/// Reading connections.
const READERS: usize = 4;

/// The PostgreSQL store, at a `postgres://USER@HOST:PORT/DB` URL.
#[derive(Debug)]
pub struct PgStore {
    writer: Writer,
    readers: Vec<Mutex<PgConn>>,
    url: String,
    pub(crate) fence: Mutex<crate::model::Fence>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl PgStore {
    /// Connects to the database at `url` (a `postgres://` URL or `key=value` pairs) and applies
    /// pending migrations (one replica at a time: they hold an advisory lock).
    pub fn open(url: &str) -> Result<Self> {
        let (config, runtime) = open_parts(url)?;
        let rt = runtime.handle().clone();
        let writer = PgConn::open(&rt, &config)?;
        migrate::apply(&writer)?;
        let readers =
            (0..READERS).map(|_| PgConn::open(&rt, &config).map(Mutex::new)).collect::<Result<_>>()?;
        Ok(Self {
            writer: Writer::start(
                writer,
                "BEGIN",
                Some(Bulk { many: bulk::many, one: crate::sqlite::apply_change }),
            )?,
            readers,
            url: redacted(url),
            fence: Mutex::default(),
            runtime: Some(runtime),
        })
    }

    /// The database's URL without its password.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn fence(&self) -> crate::model::Fence {
        self.fence.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub(crate) fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Conn) -> Result<T> + Send + 'static,
    {
        self.writer.write(f)
    }

    /// An audited change: a plain submission with the others queued beside it
    /// ([`bulk`]), any other change alone.
    pub(crate) fn apply_change(&self, change: Change, entry: AuditEntry) -> Result<Changed> {
        match change {
            Change::Submit(job) if bulk::fits(&job) => self.writer.submit(Submission { job, entry }),
            change => self.write(move |c| crate::sqlite::apply_change(c, change, entry)),
        }
    }

    pub(crate) fn read<T>(&self, f: impl FnOnce(&dyn Conn) -> Result<T>) -> Result<T> {
        use std::sync::TryLockError;
        let slot = self.readers.iter().find_map(|m| match m.try_lock() {
            Ok(guard) => Some(guard),
            // A panic while reading leaves no transaction open (reads run in autocommit).
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        });
        let guard = match slot {
            Some(guard) => guard,
            None => self.readers[0].lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        };
        f(&*guard)
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // The queued writes first, while their connection still runs; then the runtime, not
        // by `Runtime::drop`, which blocks and may not run inside another runtime.
        self.writer.close();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// How to connect: the settings and the TLS connector their `sslmode` asks for.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) config: Config,
    pub(crate) tls: tls::MakeRustls,
}

/// The connection settings of `url` (the password from `PGPASSWORD` when it has none, TLS as its
/// `sslmode` and `sslrootcert` ask) and the runtime its connections' I/O runs on.
pub(crate) fn open_parts(url: &str) -> Result<(Target, tokio::runtime::Runtime)> {
    let bad = |e: String| StoreError::Open {
        path: redacted(url),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    };
    let (rest, options) = tls::split(url).map_err(bad)?;
    let mut config = Config::from_str(&rest).map_err(|e| bad(e.to_string()))?;
    config.ssl_mode(options.mode.negotiation());
    let tls = tls::connector(&options).map_err(bad)?;
    // libpq's variable, so that the password need not be in the URL (and a process list).
    if config.get_password().is_none()
        && let Some(password) = std::env::var_os("PGPASSWORD")
    {
        config.password(password.as_encoded_bytes());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gantry-postgres")
        .enable_all()
        .build()
        .map_err(|source| StoreError::Open { path: "postgres runtime".into(), source })?;
    Ok((Target { config, tls }, runtime))
}

/// A URL as it may be logged: the password left out.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url
            .split_whitespace()
            .filter(|kv| !kv.starts_with("password="))
            .collect::<Vec<_>>()
            .join(" ");
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_url_leaves_the_password_out() {
        assert_eq!(redacted("postgres://gantry:s3cret@db:5432/gantry"), "postgres://gantry@db:5432/gantry");
        assert_eq!(redacted("host=db password=s3cret user=g"), "host=db user=g");
        assert_eq!(redacted("postgres://db/gantry"), "postgres://db/gantry");
    }

    #[test]
    fn the_shared_sql_is_rewritten_to_numbered_parameters_outside_quotes() {
        let sql = "SELECT value FROM json_each(?1) WHERE x = '?' AND y = ?12";
        assert_eq!(
            conn::rewrite(sql),
            "SELECT value FROM json_array_elements_text($1) WHERE x = '?' AND y = $12"
        );
    }
}
