//! The writer thread and its group commit, for either backend: one connection, one thread;
//! every write queued while the previous commit was syncing runs under its own savepoint in the
//! next transaction, which commits once before any of them is answered.

use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::db::Conn;
use crate::{Result, StoreError};

type Reply = Box<dyn FnOnce(std::result::Result<(), String>) + Send>;
type Op = Box<dyn FnOnce(Option<&dyn Conn>) -> Reply + Send>;

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
    /// take the write lock first).
    pub(crate) fn start<C: Conn + Send + 'static>(conn: C, begin: &'static str) -> Result<Self> {
        let (sender, receiver) = mpsc::channel::<Op>();
        let thread = std::thread::Builder::new()
            .name("gantry-store-writer".into())
            .spawn(move || run(&conn, begin, receiver))
            .map_err(|source| StoreError::Open { path: "writer thread".into(), source })?;
        Ok(Self { sender: Mutex::new(Some(sender)), thread: Mutex::new(Some(thread)) })
    }

    /// Runs `f` in the next group transaction; returns once that transaction is committed.
    pub(crate) fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Conn) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        let op: Op = Box::new(move |conn| {
            let result = match conn {
                Some(conn) => in_savepoint(conn, f),
                None => Err(StoreError::Closed),
            };
            Box::new(move |commit| {
                let result = match (result, commit) {
                    (Ok(value), Ok(())) => Ok(value),
                    (Err(e), _) => Err(e),
                    (Ok(_), Err(message)) => Err(StoreError::Conflict(format!("commit failed: {message}"))),
                };
                // The caller may have given up waiting; nothing to do then.
                let _ = tx.send(result);
            })
        });
        let sender = self.sender.lock().map_err(|_| StoreError::Closed)?.clone();
        sender.ok_or(StoreError::Closed)?.send(op).map_err(|_| StoreError::Closed)?;
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

fn run(conn: &dyn Conn, begin: &str, receiver: mpsc::Receiver<Op>) {
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
        let replies: Vec<Reply> = batch.into_iter().map(|op| op(target)).collect();
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
