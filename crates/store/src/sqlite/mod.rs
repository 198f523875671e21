//! The embedded SQLite store.
//!
//! One writer thread owns the only writing connection and commits in groups: it takes every
//! request that queued up while the previous commit was syncing, runs each under its own
//! savepoint inside one transaction, commits once and only then answers. With WAL and
//! `synchronous = FULL` the commit is on disk (WAL fsynced) before any caller hears "ok", so an
//! acknowledged write survives `kill -9` and power loss; grouping makes that one fsync per batch
//! instead of per request. Reads use separate connections, which WAL lets run beside the writer.
//!
//! The modules here (`jobs`, `nodes`, `gangs`, …) hold the store's rules as SQL over
//! [`crate::db::Conn`], so they run unchanged on PostgreSQL as well: [`crate::PgStore`] gets
//! the same [`Store`] implementation (`impl_store!` below) over its own connections.

mod apply;
pub(crate) mod audit;
mod changes;
mod conn;
mod counts;
mod gangs;
mod idle;
pub(crate) mod inputs;
pub(crate) mod jobs;
mod lease;
mod loans;
mod migrate;
mod nodes;
mod outputs;
mod pools;
pub(crate) mod rows;
mod scheduler;
mod services;
pub(crate) mod tokens;
mod volumes;
mod workflow;

use std::path::Path;
use std::sync::Mutex;

use rusqlite::Connection;

use crate::db::Conn;
use crate::model::*;
use crate::writer::Writer;
use crate::{Result, Store, StoreError};

/// The SQLite store: a file `gantry.db` (+ WAL) in a directory.
#[derive(Debug)]
pub struct SqliteStore {
    writer: Writer,
    readers: Vec<Mutex<Connection>>,
    fence: Mutex<Fence>,
}

const READERS: usize = 2;

impl SqliteStore {
    /// Opens (creating if needed) the store in `dir` and applies pending migrations.
    /// The directory is made private to this user (0700) and the database files 0600, whatever
    /// they were before: the store holds token hashes and every team's jobs.
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join("gantry.db");
        make_private(dir, &path)
            .map_err(|source| StoreError::Open { path: dir.display().to_string(), source })?;
        let mut conn = connect(&path)?;
        migrate::apply(&mut conn)?;
        let readers = (0..READERS).map(|_| connect(&path).map(Mutex::new)).collect::<Result<Vec<_>>>()?;
        Ok(Self { writer: Writer::start(conn, "BEGIN IMMEDIATE", None)?, readers, fence: Mutex::default() })
    }

    /// The job gauges' counts as `job_counts` gave them before migration 11: a `GROUP BY` over
    /// every job (what `gantry bench pass` times beside the maintained counts, and what tests
    /// compare them with).
    pub fn job_counts_by_scan(&self) -> Result<Vec<(String, JobState, u64)>> {
        self.read(counts::scan)
    }

    fn fence(&self) -> Fence {
        self.fence.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Conn) -> Result<T> + Send + 'static,
    {
        self.writer.write(f)
    }

    fn apply_change(&self, change: Change, entry: AuditEntry) -> Result<Changed> {
        self.write(move |c| changes::apply(c, change, entry))
    }

    fn read<T>(&self, f: impl FnOnce(&dyn Conn) -> Result<T>) -> Result<T> {
        use std::sync::TryLockError;
        let slot = self.readers.iter().find_map(|m| match m.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(p)) => Some(recovered(m, p.into_inner())),
            Err(TryLockError::WouldBlock) => None,
        });
        let guard = match slot {
            Some(guard) => guard,
            None => self.readers[0].lock().unwrap_or_else(|p| recovered(&self.readers[0], p.into_inner())),
        };
        f(&*guard)
    }
}

/// A reader whose last user panicked: the connection itself is sound (statements are dropped
/// while unwinding), so end any read it left open and keep using it. Else one panicking read
/// would fail every later read that needs this connection, for every caller.
fn recovered<'a>(
    lock: &Mutex<Connection>,
    guard: std::sync::MutexGuard<'a, Connection>,
) -> std::sync::MutexGuard<'a, Connection> {
    if !guard.is_autocommit()
        && let Err(e) = guard.execute_batch("ROLLBACK")
    {
        tracing::warn!(error = %e, "could not end the read a panicking reader left open");
    }
    lock.clear_poison();
    guard
}

/// The source of a copy (`postgres::copy`) brought to this version's schema first, as a start of
/// `gantry server` on it would.
pub(crate) fn migrate_for_copy(conn: &mut Connection) -> Result<()> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    migrate::apply(conn)
}

fn make_private(dir: &Path, db: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    // SQLite gives the -wal and -shm files the database file's mode, so create it 0600 first.
    std::fs::OpenOptions::new().append(true).create(true).mode(0o600).open(db)?;
    for suffix in ["", "-wal", "-shm"] {
        let file = dir.join(format!("gantry.db{suffix}"));
        if file.exists() {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

fn connect(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

/// Applies an audited change in the caller's transaction (the PostgreSQL store's writer, for
/// the submissions it does not write in bulk).
pub(crate) fn apply_change(c: &dyn Conn, change: Change, entry: AuditEntry) -> Result<Changed> {
    changes::apply(c, change, entry)
}

/// The [`Store`] both backends share: each method one call of the SQL in this module's files,
/// as a write (`self.write`: the next group commit) or a read (`self.read`: a reading
/// connection). The backend gives the two methods; [`crate::postgres::PgStore`] is the other.
macro_rules! impl_store {
    ($store:ty) => {
        impl $store {
            /// A write of the leader's: checked against the fence first, in its transaction.
            fn fenced<T, F>(&self, f: F) -> Result<T>
            where
                T: Send + 'static,
                F: FnOnce(&dyn Conn) -> Result<T> + Send + 'static,
            {
                let fence = self.fence();
                self.write(move |c| {
                    lease::check(c, &fence)?;
                    f(c)
                })
            }
        }

        impl Store for $store {
            fn apply(&self, change: Change, audit: AuditEntry) -> Result<Changed> {
                let entry = audit.clone();
                let result = self.apply_change(change, entry);
                if let Err(e) = &result
                    && !matches!(e, StoreError::Closed)
                {
                    // Counted like a refusal: the same caller failing the same way in a loop adds a
                    // row a minute, not a row a request.
                    let outcome = format!("error: {e}");
                    self.write(move |c| audit::refusal(c, &audit, &outcome))?;
                }
                result
            }
            fn audit_refusal(&self, audit: AuditEntry, outcome: String) -> Result<()> {
                self.write(move |c| audit::refusal(c, &audit, &outcome))
            }
            fn audit_rows(&self, after: i64, since: Option<i64>, limit: u32) -> Result<Vec<AuditRecord>> {
                self.read(|c| audit::rows(c, after, since, limit))
            }
            fn audit_head(&self) -> Result<Option<(i64, String)>> {
                self.read(audit::head)
            }
            fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>> {
                self.read(|c| tokens::by_hash(c, hash))
            }
            fn token(&self, id: i64) -> Result<Option<TokenRecord>> {
                self.read(|c| tokens::get(c, id))
            }
            fn tokens(&self, user: Option<&str>) -> Result<Vec<TokenRecord>> {
                self.read(|c| tokens::list(c, user))
            }
            fn invoke_tokens(&self, teams: Vec<String>) -> Result<Vec<TokenRecord>> {
                self.read(|c| tokens::invoke_tokens(c, &teams))
            }
            fn admin_token_count(&self, now: i64) -> Result<u64> {
                self.read(|c| tokens::admin_count(c, now))
            }
            fn user(&self, name: &str) -> Result<Option<User>> {
                self.read(|c| tokens::user(c, name))
            }
            fn users(&self) -> Result<Vec<User>> {
                self.read(tokens::users)
            }
            fn set_team(&self, team: &Team) -> Result<()> {
                let team = team.clone();
                self.write(move |c| tokens::set_team(c, &team))
            }
            fn teams(&self) -> Result<Vec<Team>> {
                self.read(tokens::teams)
            }
            fn pools(&self) -> Result<Vec<Pool>> {
                self.read(pools::list)
            }
            fn idle_policies(&self) -> Result<Vec<gantry_api::idle::IdlePolicyView>> {
                self.read(idle::list)
            }
            fn loans(&self) -> Result<Vec<gantry_api::idle::Loan>> {
                self.read(loans::open)
            }
            fn borrow(&self, placement: &Placement) -> Result<()> {
                let placement = placement.clone();
                let fence = self.fence();
                self.write(move |c| {
                    lease::check(c, &fence)?;
                    loans::borrow(c, &placement)?;
                    lease::stamp(c, &fence, &[placement.job_id])
                })
            }
            fn submit(&self, job: &NewJob) -> Result<(JobId, bool)> {
                let job = job.clone();
                self.write(move |c| jobs::submit(c, &job))
            }
            fn job(&self, id: JobId) -> Result<Option<Job>> {
                self.read(|c| jobs::get(c, id))
            }
            fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>> {
                self.read(|c| jobs::list(c, filter))
            }
            fn job_counts(&self) -> Result<Vec<(String, JobState, u64)>> {
                self.read(counts::maintained)
            }
            fn workers(&self, gang: JobId) -> Result<Vec<Job>> {
                self.read(|c| gangs::workers(c, gang))
            }
            fn transitions(&self, id: JobId) -> Result<Vec<Transition>> {
                self.read(|c| jobs::transitions(c, id))
            }
            fn changed_jobs(
                &self,
                after: Option<i64>,
                limit: u32,
                teams: Option<Vec<String>>,
            ) -> Result<(i64, Vec<Job>)> {
                self.read(|c| jobs::changed(c, after, limit, teams.as_deref()))
            }
            fn attempts(&self, id: JobId) -> Result<Vec<Attempt>> {
                self.read(|c| jobs::attempts(c, id))
            }
            fn cancel(&self, id: JobId, at: i64) -> Result<Job> {
                self.write(move |c| jobs::cancel(c, id, at))
            }
            fn staged_inputs(&self, id: JobId, found: &[gantry_api::inputs::Input]) -> Result<()> {
                let found = found.to_vec();
                self.write(move |c| inputs::staged(c, id, &found))
            }
            fn set_replica_port(&self, id: JobId, port: u16) -> Result<()> {
                self.write(move |c| jobs::set_replica_port(c, id, port))
            }
            fn resolved_image(&self, id: JobId, digest: &str) -> Result<()> {
                let digest = digest.to_owned();
                self.write(move |c| inputs::resolved_image(c, id, &digest))
            }
            fn reported_outputs(
                &self,
                id: JobId,
                attempt: u32,
                found: &[gantry_api::outputs::Output],
            ) -> Result<Vec<gantry_api::outputs::Output>> {
                let found = found.to_vec();
                self.write(move |c| outputs::reported(c, id, attempt, &found))
            }
            fn secret(
                &self,
                team: &str,
                name: &str,
            ) -> Result<Option<std::collections::BTreeMap<String, String>>> {
                self.read(|c| inputs::secret(c, team, name))
            }
            fn secrets(&self, team: Option<&str>) -> Result<Vec<crate::SecretListing>> {
                self.read(|c| inputs::secrets(c, team))
            }
            fn public_sources(&self) -> Result<Vec<(String, i64)>> {
                self.read(inputs::public_sources)
            }
            fn dependency_failed(&self, id: JobId, reason: &str, at: i64) -> Result<()> {
                let reason = reason.to_owned();
                self.fenced(move |c| workflow::dependency_failed(c, id, &reason, at))
            }
            fn place(&self, placement: &Placement) -> Result<()> {
                let placement = placement.clone();
                let fence = self.fence();
                self.write(move |c| {
                    lease::check(c, &fence)?;
                    jobs::place(c, &placement)?;
                    lease::stamp(c, &fence, &[placement.job_id])
                })
            }
            fn place_gang(&self, placement: &GangPlacement) -> Result<()> {
                let placement = placement.clone();
                let fence = self.fence();
                self.write(move |c| {
                    lease::check(c, &fence)?;
                    gangs::place(c, &placement)?;
                    let ids: Vec<i64> = placement.workers.iter().map(|w| w.job_id).collect();
                    lease::stamp(c, &fence, &ids)
                })
            }
            fn preempt(&self, id: JobId, reason: &str, at: i64) -> Result<()> {
                let reason = reason.to_owned();
                self.fenced(move |c| jobs::preempt(c, id, &reason, at))
            }
            fn resize(&self, id: JobId, reason: &str, at: i64) -> Result<()> {
                let reason = reason.to_owned();
                self.fenced(move |c| jobs::resize(c, id, &reason, at))
            }
            fn register_node(&self, registration: &NodeRegistration) -> Result<u64> {
                let registration = registration.clone();
                self.write(move |c| nodes::register(c, &registration))
            }
            fn heartbeat(&self, heartbeat: &Heartbeat, at: i64) -> Result<Vec<Job>> {
                let heartbeat = heartbeat.clone();
                self.write(move |c| nodes::heartbeat(c, &heartbeat, at))
            }
            fn assignments(&self, node_id: &str, epoch: u64) -> Result<Vec<Job>> {
                self.read(|c| nodes::current_assignments(c, node_id, epoch))
            }
            fn expire_nodes(&self, deadline: i64, at: i64) -> Result<Vec<String>> {
                self.fenced(move |c| nodes::expire(c, deadline, at))
            }
            fn mark_not_responding(&self, deadline: i64, at: i64) -> Result<Vec<String>> {
                self.fenced(move |c| nodes::mark_not_responding(c, deadline, at))
            }
            fn drain_due(&self, at: i64) -> Result<Vec<JobId>> {
                self.fenced(move |c| nodes::drain_due(c, at))
            }
            fn nodes(&self) -> Result<Vec<Node>> {
                self.read(nodes::list)
            }
            fn gpus(&self) -> Result<Vec<Gpu>> {
                self.read(nodes::gpus)
            }
            fn allocations(&self, held_only: bool) -> Result<Vec<Allocation>> {
                self.read(|c| jobs::allocations(c, held_only))
            }
            fn usage(
                &self,
                since: i64,
                until: i64,
                by_user: bool,
                teams: Option<Vec<String>>,
            ) -> Result<Vec<Usage>> {
                self.read(|c| jobs::usage(c, since, until, by_user, teams.as_deref()))
            }
            fn gpu_use_by_job(&self, since: i64) -> Result<Vec<(JobId, i64)>> {
                self.read(|c| workflow::used_by_job(c, since))
            }
            fn gpu_stall_of_job(&self, id: JobId) -> Result<(i64, i64)> {
                self.read(|c| workflow::stall_of_job(c, id))
            }
            fn gpu_stalls_held(&self) -> Result<Vec<(JobId, i64, i64)>> {
                self.read(workflow::stalls_held)
            }
            fn events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
                self.read(|c| tokens::events(c, filter))
            }
            fn record_event(
                &self,
                at: i64,
                kind: &str,
                subject: &str,
                message: &str,
                team: Option<&str>,
            ) -> Result<()> {
                let (kind, subject, message) = (kind.to_owned(), subject.to_owned(), message.to_owned());
                let team = team.map(str::to_owned);
                self.write(move |c| tokens::event(c, at, &kind, &subject, &message, team.as_deref()))
            }
            fn volumes(&self, teams: Option<Vec<String>>) -> Result<Vec<Volume>> {
                self.read(|c| volumes::list(c, teams.as_deref()))
            }
            fn services(&self, teams: Option<Vec<String>>) -> Result<Vec<Service>> {
                self.read(|c| services::list(c, teams.as_deref()))
            }
            fn service(&self, team: &str, name: &str) -> Result<Option<Service>> {
                self.read(|c| services::get(c, team, name))
            }
            fn service_replicas(&self, team: &str, name: &str, ended: u32) -> Result<Vec<Replica>> {
                self.read(|c| services::replicas(c, team, name, ended))
            }
            fn service_decisions(&self, id: i64, limit: u32) -> Result<Vec<ServiceDecision>> {
                self.read(|c| services::decisions(c, id, limit))
            }
            fn scale_service(&self, id: i64, desired: u32, decision: Option<ServiceDecision>) -> Result<()> {
                self.fenced(move |c| services::scale(c, id, desired, decision.as_ref()))
            }
            fn note_service_activity(&self, seen: &[ServiceActivity]) -> Result<()> {
                let seen = seen.to_vec();
                self.write(move |c| services::note_activity(c, &seen))
            }
            fn service_activity(&self) -> Result<Vec<ServiceActivity>> {
                self.read(services::activity)
            }
            fn stop_replica(&self, id: JobId, reason: &str, at: i64) -> Result<()> {
                let reason = reason.to_owned();
                self.fenced(move |c| services::stop_replica(c, id, &reason, at))
            }
            fn scheduler_position(&self) -> Result<i64> {
                self.read(scheduler::position)
            }
            fn scheduler_changes(&self, after: i64, limit: u32) -> Result<Option<SchedulerChanges>> {
                self.read(|c| scheduler::changes(c, after, limit))
            }
            fn campaign(&self, holder: &str, ttl_ms: i64, at: i64) -> Result<Lease> {
                let holder = holder.to_owned();
                self.write(move |c| lease::campaign(c, &holder, ttl_ms, at))
            }
            fn lease(&self) -> Result<Option<Lease>> {
                self.read(lease::current)
            }
            fn leadership_history(&self) -> Result<crate::model::LeadershipHistory> {
                self.read(lease::history)
            }
            fn set_fence(&self, fence: Fence) {
                *self.fence.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = fence;
            }
        }
    };
}

impl_store!(SqliteStore);
impl_store!(crate::postgres::PgStore);

#[cfg(test)]
mod tests {
    use super::*;

    /// Before, a read that panicked (an arithmetic overflow on a hostile query in a debug
    /// build) poisoned its connection's lock for good: from then on reads failed with "store is
    /// closed" whenever the other connection was busy, and for every caller.
    #[test]
    fn a_read_that_panicked_leaves_its_connection_usable() {
        let dir = tempfile::tempdir().expect("dir");
        let store = SqliteStore::open(dir.path()).expect("open");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.read(|_| -> Result<()> { panic!("a bug in one read") })
        }));
        assert!(panicked.is_err());
        let _busy = store.readers[1].lock();
        let read = store
            .read(|c| c.prepare_cached("SELECT 1")?.query_row(crate::db::params![], |r| r.get::<_, i64>(0)));
        assert_eq!(read.expect("the first connection still reads"), 1);
    }
}
