//! The store's error type.

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database engine failed (I/O, corruption, constraint).
    #[error("database error: {0}")]
    Database(#[from] rusqlite::Error),
    /// PostgreSQL failed (connection, I/O, constraint, a trigger refusing a write).
    #[error("database error: {}", postgres_cause(.0))]
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
    /// The write would take a team past one of its limits (its pending jobs): a sentence.
    #[error("{0}")]
    LimitReached(String),
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
    /// The caller's credential no longer allows the change (revoked, expired, or its user's role
    /// or teams changed since the server checked it): a sentence.
    #[error("{0}")]
    CredentialChanged(String),
    /// The writer thread is gone (the store is shutting down).
    #[error("store is closed")]
    Closed,
    /// The database broke the transaction off or cannot be reached now (a restart, a terminated
    /// connection): nothing of it was written, or, for a connection lost during its `COMMIT`,
    /// perhaps all of it. Worth repeating where repeating is safe.
    #[error("database unavailable: {0}")]
    Unavailable(String),
}

impl StoreError {
    /// Whether the failure was the database's state at the time, not the request: unreachable,
    /// restarting, the connection closed, or the transaction broken off as a deadlock victim or
    /// by a serialization failure (another replica's transaction). The request may be repeated.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Unavailable(_) => true,
            StoreError::Postgres(e) => match e.code() {
                Some(code) => {
                    let code = code.code();
                    code.starts_with("08") || code.starts_with("57P") || code == "40P01" || code == "40001"
                }
                // tokio-postgres names its connection failures only in its message.
                None => {
                    let text = e.to_string();
                    e.is_closed()
                        || ["error connecting", "error communicating", "connection closed", "timeout"]
                            .iter()
                            .any(|m| text.starts_with(m))
                }
            },
            _ => false,
        }
    }
}

/// A PostgreSQL error with what the server said (tokio-postgres's own text is only `db error`).
fn postgres_cause(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}
