//! A job's declared outputs and where each upload stands (issue 22, stage-out).
//!
//! Kept as one JSON column beside the job's inputs, written with them
//! ([`super::inputs::save`]) and again each time the agent of the node an ended attempt ran on
//! reports its uploads. A report for an older attempt than the one an output last heard of
//! changes nothing: a late report of attempt 1 never hides attempt 2's upload.

use gantry_api::outputs::Output;

use super::rows;
use crate::db::{Conn, params};
use crate::model::JobId;
use crate::{Result, StoreError};

/// Records what the upload of `attempt`'s outputs did; names and URLs must be the job's.
/// Returns the job's outputs as they now stand.
pub(super) fn reported(c: &dyn Conn, id: JobId, attempt: u32, found: &[Output]) -> Result<Vec<Output>> {
    let text: Option<Option<String>> = c
        .prepare_cached("SELECT outputs FROM jobs WHERE id = ?1")?
        .query_map(params![id], |r| r.get(0))?
        .next()
        .transpose()?;
    let Some(text) = text else { return Err(StoreError::NotFound(format!("job {id}"))) };
    let mut outputs: Vec<Output> = text.map(|t| rows::json("outputs", &t)).transpose()?.unwrap_or_default();
    for o in &mut outputs {
        if o.attempt.is_some_and(|a| a > attempt) {
            continue;
        }
        if let Some(f) = found.iter().find(|f| f.name == o.name && f.url == o.url) {
            *o = Output { attempt: Some(attempt), ..f.clone() };
        }
    }
    c.prepare_cached("UPDATE jobs SET outputs = ?2 WHERE id = ?1")?
        .execute(params![id, rows::to_json(&outputs)?])?;
    Ok(outputs)
}
