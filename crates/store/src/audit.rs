//! The audit log's hash chain: how a row's hash is computed and how a chain is checked.
//!
//! Each row's hash is SHA-256 over the previous row's hash and this row's fields (as a JSON
//! array, so no field can bleed into the next). Editing a byte of any row changes its hash, which
//! then no longer matches the row's stored hash or the next row's `prev_hash`; removing or
//! reordering rows breaks the id sequence or the links; removing rows from the end leaves the
//! stored head pointing past the last row. What a chain cannot catch is someone with write
//! access to the database rewriting every row after the one they changed, head included: for
//! that, keep a copy of the head elsewhere (`gantry audit verify` prints it).

use sha2::{Digest, Sha256};

use crate::model::AuditRecord;

/// `prev_hash` of the first row.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hash a row must carry, given the previous row's hash.
pub fn row_hash(prev_hash: &str, r: &AuditRecord) -> String {
    let fields = (r.id, r.at, &r.actor, &r.role, &r.team, &r.action, &r.target, &r.outcome, &r.peer);
    let body = serde_json::to_string(&fields).unwrap_or_default();
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(b"\n");
    h.update(body.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// A row's id is not the one after its predecessor's (a row was removed or moved).
    #[error("row {found} follows row {after}: rows were removed or reordered")]
    Gap {
        /// The previous row's id.
        after: i64,
        /// This row's id.
        found: i64,
    },
    /// A row does not point at its predecessor's hash.
    #[error("row {0} does not link to the row before it")]
    Link(i64),
    /// A row's contents do not match its hash.
    #[error("row {0} was changed after it was written")]
    Edited(i64),
    /// The head names a row or hash that the chain does not end with.
    #[error("the chain ends at row {last} but its head says {head}: rows were removed from the end")]
    Head {
        /// The last row present.
        last: i64,
        /// The head's row id.
        head: i64,
    },
}

/// Checks a whole chain, oldest row first, against its stored head (`None`: an empty log).
pub fn verify(rows: &[AuditRecord], head: Option<(i64, &str)>) -> Result<(), ChainError> {
    let mut prev_id = 0;
    let mut prev_hash = GENESIS.to_owned();
    for r in rows {
        if r.id != prev_id + 1 {
            return Err(ChainError::Gap { after: prev_id, found: r.id });
        }
        if r.prev_hash != prev_hash {
            return Err(ChainError::Link(r.id));
        }
        if row_hash(&prev_hash, r) != r.hash {
            return Err(ChainError::Edited(r.id));
        }
        prev_id = r.id;
        prev_hash.clone_from(&r.hash);
    }
    match head {
        None if prev_id == 0 => Ok(()),
        Some((id, hash)) if id == prev_id && hash == prev_hash => Ok(()),
        Some((id, _)) => Err(ChainError::Head { last: prev_id, head: id }),
        None => Err(ChainError::Head { last: prev_id, head: 0 }),
    }
}
