//! Why a command was refused or failed, in the control plane's own terms.
//!
//! The dispatcher, the scheduler loop and the reconcilers speak [`CommandError`]: what the
//! caller may not do, what does not exist, what the state forbids now, and the store's own
//! [`StoreError`] as it came. None of it knows HTTP; the API maps each variant to a status
//! once (`api::errors`), so a loop deciding what to do with a refusal matches on the domain
//! (a placement the store refused as stale) instead of on a status code.

use gantry_store::StoreError;

/// Why a command was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The caller may not do this (its role, team or credential).
    #[error("{0}")]
    Forbidden(String),
    /// A value of the command is not acceptable (the sentence names the field).
    #[error("{0}")]
    Invalid(String),
    /// No such thing, or not one the caller may see.
    #[error("{0}")]
    NotFound(String),
    /// The command conflicts with the current state (a node that is up, a taken name).
    #[error("{0}")]
    Conflict(String),
    /// A limit of the caller's team is reached (pending jobs): wait or cancel.
    #[error("{0}")]
    LimitReached(String),
    /// The store refused or failed the write.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The task carrying the command out ended before it answered (a panic, shutdown).
    #[error("the command's task ended: {0}")]
    Aborted(String),
}

impl CommandError {
    /// Whether the store refused the write because what it was based on is out of date (a
    /// placement on GPUs taken meanwhile, a job no longer in the state the decision saw, a
    /// node's epoch moved on): the caller looks again instead of failing.
    pub fn is_stale(&self) -> bool {
        matches!(self, CommandError::Store(StoreError::Conflict(_) | StoreError::StaleEpoch { .. }))
    }
}
