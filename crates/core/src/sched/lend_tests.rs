//! Lent GPUs in a pass (`super::lend`): only preemptible jobs borrow them, one per GPU, and a
//! borrower is neither capacity nor a victim of the queue.

use gantry_api::idle::Loan;
use gantry_api::model::{Job, JobState};

use super::service_tests::{cluster, job, running};
use super::{Plan, Snapshot, plan_grouped};
use crate::{PolicyKind, SplitMix64};

fn pass(s: &Snapshot) -> Plan {
    plan_grouped(s, PolicyKind::Gantry, &mut SplitMix64::new(1))
}

fn loan(gpu: &str, owner: i64) -> Loan {
    Loan {
        gpu_uuid: gpu.into(),
        owner,
        owner_attempt: 1,
        borrower: None,
        borrower_attempt: None,
        memory_mib: 70_000,
        lent_at: 0,
    }
}

fn owner(id: i64) -> Job {
    Job { attempt: 1, ..job(id, 1, 0, 0) }
}

/// One node of one GPU, held by an idle owner (job 1) that lent it.
fn lent() -> Snapshot {
    let mut s = cluster(&[1]);
    running(&mut s, owner(1), "n0", &[0]);
    s.loans.push(loan("n0-0", 1));
    s
}

#[test]
fn a_preemptible_job_borrows_a_lent_gpu_that_an_ordinary_job_waits_for() {
    let mut s = lent();
    s.pending.push(job(2, 1, 0, 0));
    s.pending.push(job(3, 1, 0, -1));
    let p = pass(&s);
    assert!(p.placements.is_empty(), "the owner keeps its allocation: {:?}", p.placements);
    assert_eq!(p.borrows.iter().map(|b| b.job_id).collect::<Vec<_>>(), [3]);
    assert_eq!((p.borrows[0].grants[0].uuid.as_str(), p.borrows[0].grants[0].memory_mib), ("n0-0", 70_000));
    assert!(p.waiting.iter().any(|(id, _)| *id == 2), "job 2 is not preemptible: it waits");
    assert!(p.preemptions.is_empty(), "nobody is stopped for anyone");
}

#[test]
fn without_a_loan_the_same_jobs_only_wait() {
    let mut s = lent();
    s.loans.clear();
    s.pending.push(job(3, 1, 0, -1));
    let p = pass(&s);
    assert!(p.borrows.is_empty() && p.placements.is_empty());
}

#[test]
fn a_borrowed_gpu_takes_no_second_borrower_and_its_borrower_is_no_victim() {
    let mut s = lent();
    let mut b = job(3, 1, 0, -1);
    (b.state, b.attempt, b.node_id) = (JobState::Running, 1, Some("n0".into()));
    b.gpu_uuids = vec!["n0-0".into()];
    s.active.push(b);
    (s.loans[0].borrower, s.loans[0].borrower_attempt) = (Some(3), Some(1));
    s.pending.push(job(4, 1, 0, -1));
    s.pending.push(job(5, 1, 0, 10));
    let p = pass(&s);
    assert!(p.borrows.is_empty(), "one borrower per lent GPU: {:?}", p.borrows);
    assert!(p.placements.is_empty());
    assert!(!p.preemptions.iter().any(|v| v.job_id == 3), "the borrower leaves by the give-back only");
}

#[test]
fn a_loan_whose_owner_ended_lends_nothing_and_its_borrower_keeps_the_gpu() {
    let mut s = cluster(&[1]);
    let mut b = job(3, 1, 0, -1);
    (b.state, b.attempt, b.node_id) = (JobState::Running, 1, Some("n0".into()));
    b.gpu_uuids = vec!["n0-0".into()];
    s.active.push(b);
    let mut l = loan("n0-0", 1);
    (l.borrower, l.borrower_attempt) = (Some(3), Some(1));
    s.loans.push(l);
    s.pending.push(job(4, 1, 0, 0));
    s.pending.push(job(5, 1, 0, -1));
    let p = pass(&s);
    assert!(p.placements.is_empty() && p.borrows.is_empty(), "the GPU is the borrower's until it stops");
}
