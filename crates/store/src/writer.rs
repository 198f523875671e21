//! The writer thread and its group commit, for either backend: one connection, one thread;
//! every write queued while the previous commit was syncing runs under its own savepoint in the
//! next transaction, which commits once before any of them is answered.
//!
//! A backend may also take submissions in bulk ([`Bulk`]): a run of submissions queued one
//! after another in a group is written by a few statements for all of them under one savepoint
//! (on PostgreSQL each statement is a round trip, so a group of 50 costs a handful rather than
//! 400). Should the run fail as a whole, it is rolled back to its savepoint and each submission
//! written alone, as any other write, so that one bad submission fails only itself.

use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::db::Conn;
use crate::model::{AuditEntry, Change, Changed, NewJob};
use crate::{Result, StoreError};

type Reply = Box<dyn FnOnce(std::result::Result<(), String>) + Send>;
/// A write: run on the connection (none once the group could not begin), it gives the reply to
/// send once the group's commit is known.
type Write = Box<dyn FnOnce(Option<&dyn Conn>) -> Reply + Send>;

/// What the writer thread is asked to do.
enum Op {
    /// Any write: run under its own savepoint.
    One(Write),
    /// A submission, which the backend's [`Bulk`] may write with the others beside it.
    Submit(Submission, mpsc::SyncSender<Result<Changed>>),
}

/// A submission and its audit entry (`Change::Submit`).
#[derive(Debug)]
pub(crate) struct Submission {
    /// The job.
    pub(crate) job: Box<NewJob>,
    /// Its audit row's entry (the target is the job's id, filled in when known).
    pub(crate) entry: AuditEntry,
}

/// A backend's way of writing several submissions at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bulk {
    /// Writes them all, in order, each as `one` would and with its audit row; the answers in
    /// the same order. An error leaves what it wrote to be rolled back by the caller.
    pub(crate) many: fn(&dyn Conn, &[Submission]) -> Result<Vec<Changed>>,
    /// Writes one submission alone (the change as any other).
    pub(crate) one: fn(&dyn Conn, Change, AuditEntry) -> Result<Changed>,
}

/// Most requests folded into one commit.
const MAX_BATCH: usize = 1024;

/// Handle to the writer thread; dropping it lets the thread finish its queue and exit.
#[derive(Debug)]
pub(crate) struct Writer {
    sender: Mutex<Option<mpsc::Sender<Op>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    /// Starts the thread; `begin` opens each group's transaction (`BEGIN IMMEDIATE` on SQLite:
    /// take the write lock first); `bulk`, when the backend has one, writes runs of
    /// submissions.
    pub(crate) fn start<C: Conn + Send + 'static>(
        conn: C,
        begin: &'static str,
        bulk: Option<Bulk>,
    ) -> Result<Self> {
        let (sender, receiver) = mpsc::channel::<Op>();
        let thread = std::thread::Builder::new()
            .name("gantry-store-writer".into())
            .spawn(move || run(&conn, begin, bulk, receiver))
            .map_err(|source| StoreError::Open { path: "writer thread".into(), source })?;
        Ok(Self { sender: Mutex::new(Some(sender)), thread: Mutex::new(Some(thread)) })
    }

    /// Writes a submission in the next group transaction, with the submissions queued beside
    /// it; returns once that transaction is committed. Only for a writer started with a
    /// [`Bulk`].
    pub(crate) fn submit(&self, submission: Submission) -> Result<Changed> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Op::Submit(submission, tx))?;
        rx.recv().map_err(|_| StoreError::Closed)?
    }

    fn send(&self, op: Op) -> Result<()> {
        let sender = self.sender.lock().map_err(|_| StoreError::Closed)?.clone();
        sender.ok_or(StoreError::Closed)?.send(op).map_err(|_| StoreError::Closed)
    }

    /// Runs `f` in the next group transaction; returns once that transaction is committed.
    pub(crate) fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Conn) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        let op = Op::One(Box::new(move |conn| {
            let result = match conn {
                Some(conn) => in_savepoint(conn, f),
                None => Err(StoreError::Closed),
            };
            Box::new(move |commit| {
                let result = match (result, commit) {
                    (Ok(value), Ok(())) => Ok(value),
                    (Err(e), _) => Err(e),
                    (Ok(_), Err(message)) => {
                        Err(StoreError::Unavailable(format!("commit failed: {message}")))
                    }
                };
                // The caller may have given up waiting; nothing to do then.
                let _ = tx.send(result);
            })
        }));
        self.send(op)?;
        rx.recv().map_err(|_| StoreError::Closed)?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.close();
    }
}

impl Writer {
    /// Lets the thread finish what is queued, and waits for it; later writes get `Closed`.
    pub(crate) fn close(&self) {
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
        if let Ok(mut thread) = self.thread.lock()
            && let Some(handle) = thread.take()
        {
            let _ = handle.join();
        }
    }
}

fn in_savepoint<T>(conn: &dyn Conn, f: impl FnOnce(&dyn Conn) -> Result<T>) -> Result<T> {
    conn.batch("SAVEPOINT op")?;
    match f(conn) {
        Ok(value) => {
            conn.batch("RELEASE op")?;
            Ok(value)
        }
        Err(e) => {
            conn.batch("ROLLBACK TO op; RELEASE op")?;
            Err(e)
        }
    }
}

fn run(conn: &dyn Conn, begin: &str, bulk: Option<Bulk>, receiver: mpsc::Receiver<Op>) {
    while let Ok(first) = receiver.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let began = conn.batch(begin).map_err(|e| e.to_string());
        let target = began.is_ok().then_some(conn);
        let mut replies: Vec<Reply> = Vec::with_capacity(batch.len());
        let mut ops = batch.into_iter().peekable();
        while let Some(op) = ops.next() {
            match op {
                Op::One(f) => replies.push(f(target)),
                Op::Submit(first, tx) => {
                    let mut run = vec![(first, tx)];
                    while let Some(Op::Submit(..)) = ops.peek() {
                        if let Some(Op::Submit(s, tx)) = ops.next() {
                            run.push((s, tx));
                        }
                    }
                    submissions(target, bulk, run, &mut replies);
                }
            }
        }
        let committed = began.and_then(|()| conn.batch("COMMIT").map_err(|e| e.to_string()));
        if let Err(message) = &committed {
            tracing::error!(%message, "store commit failed");
            let _ = conn.batch("ROLLBACK");
        }
        for reply in replies {
            reply(committed.clone());
        }
    }
}

/// The answer to a submission, once its group's commit is known.
fn reply(result: Result<Changed>, tx: mpsc::SyncSender<Result<Changed>>) -> Reply {
    Box::new(move |commit| {
        let result = match (result, commit) {
            (Ok(value), Ok(())) => Ok(value),
            (Err(e), _) => Err(e),
            (Ok(_), Err(message)) => Err(StoreError::Unavailable(format!("commit failed: {message}"))),
        };
        let _ = tx.send(result);
    })
}

/// Writes a run of submissions: in bulk under one savepoint when there are several, else (or
/// when the bulk write fails) each under its own.
fn submissions(
    conn: Option<&dyn Conn>,
    bulk: Option<Bulk>,
    run: Vec<(Submission, mpsc::SyncSender<Result<Changed>>)>,
    replies: &mut Vec<Reply>,
) {
    let (Some(conn), Some(bulk)) = (conn, bulk) else {
        let why =
            || if conn.is_none() { StoreError::Closed } else { StoreError::Corrupt("no bulk writer".into()) };
        replies.extend(run.into_iter().map(|(_, tx)| reply(Err(why()), tx)));
        return;
    };
    if run.len() > 1 {
        let (items, txs): (Vec<Submission>, Vec<_>) = run.into_iter().unzip();
        match in_savepoint(conn, |c| {
            let answers = (bulk.many)(c, &items)?;
            if answers.len() == items.len() {
                Ok(answers)
            } else {
                Err(StoreError::Corrupt(format!("{} answers to {} submissions", answers.len(), items.len())))
            }
        }) {
            Ok(answers) => {
                replies.extend(answers.into_iter().zip(txs).map(|(a, tx)| reply(Ok(a), tx)));
            }
            Err(e) => {
                tracing::debug!(error = %e, n = items.len(), "bulk submission failed; writing each alone");
                for (s, tx) in items.into_iter().zip(txs) {
                    let result = in_savepoint(conn, |c| (bulk.one)(c, Change::Submit(s.job), s.entry));
                    replies.push(reply(result, tx));
                }
            }
        }
        return;
    }
    for (s, tx) in run {
        let result = in_savepoint(conn, |c| (bulk.one)(c, Change::Submit(s.job), s.entry));
        replies.push(reply(result, tx));
    }
}
