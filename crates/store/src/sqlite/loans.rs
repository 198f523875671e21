//! GPUs lent by idle jobs (`gantry team idle … --action lend`) and the preemptible jobs that
//! borrow them. A loan is opened per GPU of the owner ([`lend`]), taken by a borrower the
//! scheduling pass placed ([`borrow`]: the job moves to `scheduled` on the owner's GPUs with no
//! allocation row of its own) and closed by the give-back ([`give_back`]), which preempts the
//! borrower. Whether a loan's owner and borrower still run is read from the jobs, not kept: an
//! owner or borrower that ended leaves its loan for the give-back or the next borrower.

use gantry_api::idle::Loan;

use super::{jobs, tokens};
use crate::db::{Conn, OptionalExtension, params};
use crate::model::*;
use crate::{Result, StoreError};

const MIB: u64 = 1 << 20;

/// Loans not given back, oldest first.
pub(super) fn open(c: &dyn Conn) -> Result<Vec<Loan>> {
    let mut stmt = c.prepare_cached(
        "SELECT gpu_uuid, owner_job_id, owner_attempt, borrower_job_id, borrower_attempt, memory_mib, lent_at \
         FROM gpu_loans WHERE returned_at IS NULL ORDER BY id",
    )?;
    let rows = stmt.query_map(params![], |r| {
        Ok(Loan {
            gpu_uuid: r.get(0)?,
            owner: r.get(1)?,
            owner_attempt: r.get(2)?,
            borrower: r.get(3)?,
            borrower_attempt: r.get(4)?,
            memory_mib: r.get(5)?,
            lent_at: r.get(6)?,
        })
    })?;
    rows.collect::<Result<_>>()
}

/// Lends every GPU of running job `owner`; the event names the samples.
pub(super) fn lend(c: &dyn Conn, owner: &Job, evidence: &str, at: i64) -> Result<()> {
    let open: i64 = c
        .prepare_cached("SELECT COUNT(*) FROM gpu_loans WHERE owner_job_id = ?1 AND returned_at IS NULL")?
        .query_row(params![owner.id], |r| r.get(0))?;
    if open > 0 {
        return Err(StoreError::Conflict(format!("job {} has lent its GPUs already", owner.id)));
    }
    for uuid in &owner.gpu_uuids {
        let memory = lendable_mib(c, uuid)?;
        c.prepare_cached(
            "INSERT INTO gpu_loans (gpu_uuid, owner_job_id, owner_attempt, memory_mib, evidence, lent_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![uuid, owner.id, owner.attempt, memory, evidence, at])?;
    }
    let message = format!(
        "lent: its GPUs were idle ({evidence}); preemptible jobs may use them until it computes again, \
         when they are preempted and the GPUs are its own again"
    );
    tokens::event(c, at, "job.idle-lent", &format!("job/{}", owner.id), &message, Some(&owner.team))
}

/// GPU memory a borrower may take: what the GPU's latest sample says is free (the owner's
/// processes keep theirs), else nothing beyond half the GPU.
fn lendable_mib(c: &dyn Conn, uuid: &str) -> Result<u64> {
    let row: Option<(u64, Option<String>)> = c
        .prepare_cached("SELECT memory_mib, sample FROM gpus WHERE uuid = ?1")?
        .query_row(params![uuid], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((capacity, sample)) = row else { return Err(StoreError::NotFound(format!("gpu {uuid}"))) };
    let free = sample
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v.get("sample")?.get("memory_free_bytes")?.as_u64())
        .map(|b| b / MIB);
    Ok(free.unwrap_or(capacity / 2).min(capacity))
}

/// Records a borrower the scheduling pass placed on lent GPUs: the job must be pending and
/// preemptible (priority below 0), each GPU lent by a running owner and borrowed by no running
/// job.
pub(super) fn borrow(c: &dyn Conn, p: &Placement) -> Result<()> {
    let job = jobs::require(c, p.job_id)?;
    if job.state != JobState::Pending || job.priority >= 0 || job.gang.is_some() {
        return Err(StoreError::Conflict(format!(
            "job {} is {} at priority {}: only a pending preemptible job (priority below 0) borrows",
            job.id, job.state, job.priority
        )));
    }
    let epoch: Option<(String, u64)> = c
        .prepare_cached("SELECT state, epoch FROM nodes WHERE id = ?1")?
        .query_row(params![&p.node_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if !epoch.is_some_and(|(state, epoch)| state == "ready" && epoch == p.epoch) {
        return Err(StoreError::Conflict(format!("node {} is not ready at epoch {}", p.node_id, p.epoch)));
    }
    let attempt = job.attempt + 1;
    let mut owners = Vec::new();
    for g in &p.grants {
        let (loan, owner) = open_loan(c, &g.uuid, &p.node_id)?;
        c.prepare_cached("UPDATE gpu_loans SET borrower_job_id = ?2, borrower_attempt = ?3 WHERE id = ?1")?
            .execute(params![loan, job.id, attempt])?;
        owners.push(owner);
    }
    jobs::mark_scheduled(c, job.id, attempt, p)?;
    let uuids: Vec<&str> = p.grants.iter().map(|g| g.uuid.as_str()).collect();
    owners.sort_by_key(|o: &Job| o.id);
    owners.dedup_by_key(|o| o.id);
    let lenders: Vec<String> = owners.iter().map(|o| o.id.to_string()).collect();
    let why = format!(
        "borrows {} idle GPU(s) lent by job {} ({}); preempted when the owner uses them again",
        uuids.len(),
        lenders.join(", "),
        uuids.join(", ")
    );
    jobs::record_transition(c, job.id, Some(JobState::Pending), JobState::Scheduled, Some(&why), p.at)?;
    tokens::event(c, p.at, "job.borrowing", &format!("job/{}", job.id), &why, Some(&job.team))?;
    for owner in owners {
        let message = format!("its idle GPUs are borrowed by job {} (team {})", job.id, job.team);
        tokens::event(
            c,
            p.at,
            "job.idle-borrowed",
            &format!("job/{}", owner.id),
            &message,
            Some(&owner.team),
        )?;
    }
    Ok(())
}

/// A loan's id, owner and attempt, borrower and attempt.
type LoanRow = (i64, JobId, u32, Option<JobId>, Option<u32>);

/// The open loan of `uuid` on `node` with a running owner and no running borrower: its id and
/// owner.
fn open_loan(c: &dyn Conn, uuid: &str, node: &str) -> Result<(i64, Job)> {
    let loan: Option<LoanRow> = c
        .prepare_cached(
            "SELECT id, owner_job_id, owner_attempt, borrower_job_id, borrower_attempt FROM gpu_loans \
             WHERE gpu_uuid = ?1 AND returned_at IS NULL ORDER BY id DESC LIMIT 1",
        )?
        .query_row(params![uuid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .optional()?;
    let Some((id, owner, owner_attempt, borrower, borrower_attempt)) = loan else {
        return Err(StoreError::Conflict(format!("gpu {uuid} is not lent")));
    };
    let owner = jobs::require(c, owner)?;
    if owner.state != JobState::Running
        || owner.attempt != owner_attempt
        || owner.node_id.as_deref() != Some(node)
    {
        return Err(StoreError::Conflict(format!(
            "gpu {uuid}'s owner, job {}, no longer runs there",
            owner.id
        )));
    }
    if let (Some(b), Some(attempt)) = (borrower, borrower_attempt) {
        let b = jobs::require(c, b)?;
        if b.state.is_active() && b.attempt == attempt {
            return Err(StoreError::Conflict(format!("gpu {uuid} is borrowed by job {} already", b.id)));
        }
    }
    Ok((id, owner))
}

/// Whether a job still runs (or is about to) on `uuid` as a borrower: then no allocation may
/// take the GPU, whatever its owner does.
pub(super) fn borrowed(c: &dyn Conn, uuid: &str) -> Result<Option<JobId>> {
    c.prepare_cached(
        "SELECT j.id FROM gpu_loans l JOIN jobs j ON j.id = l.borrower_job_id AND j.attempt = l.borrower_attempt \
         WHERE l.gpu_uuid = ?1 AND j.state IN ('scheduled', 'running') LIMIT 1",
    )?
    .query_row(params![uuid], |r| r.get(0))
    .optional()
}

/// Ends `owner`'s loans: each borrower still running is preempted with the reason, and the
/// owner's event names the evidence.
pub(super) fn give_back(c: &dyn Conn, owner: JobId, evidence: &str, at: i64) -> Result<()> {
    let borrowers: Vec<(JobId, u32)> = {
        let mut stmt = c.prepare_cached(
            "SELECT borrower_job_id, borrower_attempt FROM gpu_loans WHERE owner_job_id = ?1 \
             AND returned_at IS NULL AND borrower_job_id IS NOT NULL",
        )?;
        let rows = stmt.query_map(params![owner], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<Result<_>>()?
    };
    let closed = c
        .prepare_cached(
            "UPDATE gpu_loans SET returned_at = ?2, returned_why = ?3 WHERE owner_job_id = ?1 AND returned_at IS NULL",
        )?
        .execute(params![owner, at, evidence])?;
    if closed == 0 {
        return Err(StoreError::Conflict(format!("job {owner} has no GPUs lent")));
    }
    let owner_job = jobs::require(c, owner)?;
    let mut stopped = Vec::new();
    for (b, attempt) in borrowers {
        let job = jobs::require(c, b)?;
        if !job.state.is_active() || job.attempt != attempt || job.stop.is_some() || stopped.contains(&b) {
            continue;
        }
        let reason =
            format!("preempted: job {owner}, whose idle GPUs it borrowed, takes them back ({evidence})");
        c.prepare_cached("UPDATE jobs SET stop = 'preempt', reason = ?2 WHERE id = ?1")?
            .execute(params![b, reason])?;
        tokens::event(c, at, "job.preempted", &format!("job/{b}"), &reason, Some(&job.team))?;
        stopped.push(b);
    }
    let who = if stopped.is_empty() {
        "no borrower was running".to_owned()
    } else {
        let ids: Vec<String> = stopped.iter().map(ToString::to_string).collect();
        format!("borrower(s) {} preempted", ids.join(", "))
    };
    let message = format!("its lent GPUs are its own again ({evidence}); {who}");
    tokens::event(c, at, "job.idle-returned", &format!("job/{owner}"), &message, Some(&owner_job.team))
}
