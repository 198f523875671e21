//! The store's error type.

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database engine failed (I/O, corruption, constraint).
    #[error("database error: {0}")]
    Database(#[from] rusqlite::Error),
    /// PostgreSQL failed (connection, I/O, constraint, a trigger refusing a write).
    #[error("database error: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// A query for a row that must exist found none.
    #[error("database error: the query returned no row")]
    NoRow,
    /// Opening the store's directory or file failed.
    #[error("cannot open store at {path}: {source}")]
    Open {
        /// The path that was being opened.
        path: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// A row held a value this version cannot read.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The named thing does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The write would break an invariant (double allocation, stale epoch, wrong state).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The agent's epoch is older than the node's: it must register again.
    #[error("stale epoch {got} for node {node}; current is {current}")]
    StaleEpoch {
        /// The node.
        node: String,
        /// The epoch the agent sent.
        got: u64,
        /// The node's current epoch.
        current: u64,
    },
    /// A leader's write refused: this replica does not lead, or no longer under its epoch.
    #[error("fenced: {0}")]
    Fenced(String),
    /// The writer thread is gone (the store is shutting down).
    #[error("store is closed")]
    Closed,
}
