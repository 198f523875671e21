//! The audit log (admin): its rows, and a check of its hash chain.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use gantry_store::AuditRecord;

use super::blocking;
use super::extract::Query;
use super::types::*;
use crate::app::App;
use crate::auth::Principal;
use crate::error::ApiError;

/// Rows read per store call while verifying.
const PAGE: u32 = 5000;

/// Audit rows, oldest first, a page at a time (`after` = the last id seen).
#[utoipa::path(get, path = "/v1/audit", params(AuditQuery), security(("bearer" = [])),
    responses((status = 200, body = Vec<AuditRecord>)))]
pub async fn rows(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Query(q): Query<AuditQuery>,
) -> Result<Json<Vec<AuditRecord>>, ApiError> {
    who.require_admin()?;
    let limit = q.limit.unwrap_or(1000).clamp(1, 10_000);
    let after = q.after.unwrap_or(0);
    Ok(Json(blocking(&app, move |s| s.audit_rows(after, q.since, limit)).await?))
}

/// Checks the whole hash chain: every row unedited, none removed or reordered.
#[utoipa::path(get, path = "/v1/audit/verify", security(("bearer" = [])),
    responses((status = 200, body = AuditVerification)))]
pub async fn verify(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<AuditVerification>, ApiError> {
    who.require_admin()?;
    let result = blocking(&app, |s| {
        let head = s.audit_head()?;
        let mut all = Vec::new();
        loop {
            let after = all.last().map_or(0, |r: &AuditRecord| r.id);
            let page = s.audit_rows(after, None, PAGE)?;
            let done = page.len() < PAGE as usize;
            all.extend(page);
            if done {
                break;
            }
        }
        let checked = gantry_store::audit::verify(&all, head.as_ref().map(|(id, h)| (*id, h.as_str())));
        let (head_id, head_hash) = head.unwrap_or((0, gantry_store::audit::GENESIS.to_owned()));
        Ok(AuditVerification {
            ok: checked.is_ok(),
            rows: all.len() as u64,
            head_id,
            head_hash,
            error: checked.err().map(|e| e.to_string()),
        })
    })
    .await?;
    Ok(Json(result))
}
