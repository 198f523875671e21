//! The audit log: rows are appended with the change they record, and the hash chain catches an
//! edited, removed or reordered row.

use gantry_store::audit::{ChainError, verify};
use gantry_store::*;

use crate::{new_job, open, raw, reopen};

fn entry(actor: &str, action: &str) -> AuditEntry {
    let actor = Actor { name: actor.into(), role: "member".into(), team: Some("default".into()), peer: None };
    AuditEntry { actor, action: action.into(), target: String::new(), at: 42, credential: None }
}

fn chain(store: &dyn Store) -> std::result::Result<(), ChainError> {
    let rows = store.audit_rows(0, None, 10_000).expect("rows");
    let head = store.audit_head().expect("head");
    verify(&rows, head.as_ref().map(|(id, h)| (*id, h.as_str())))
}

fn history(store: &dyn Store) {
    for i in 0..5 {
        store
            .apply(Change::Submit(Box::new(new_job(&format!("k{i}"), 0, 0))), entry("alice", "job.submit"))
            .expect("apply");
    }
    store.audit_refusal(entry("mallory", "job.cancel"), "denied: not visible".into()).expect("refusal");
}

#[test]
fn each_change_is_recorded_with_its_target_and_a_failed_one_with_its_error() {
    let (_dir, store) = open();
    let Changed::Submitted { id, .. } = store
        .apply(Change::Submit(Box::new(new_job("a", 0, 0))), entry("alice", "job.submit"))
        .expect("apply")
    else {
        panic!("not a submission")
    };
    let err = store.apply(Change::Cancel(999), entry("alice", "job.cancel"));
    assert!(err.is_err());
    let rows = store.audit_rows(0, None, 100).expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].target.as_str(), rows[0].outcome.as_str()), (format!("job/{id}").as_str(), "ok"));
    assert!(rows[1].outcome.starts_with("error:"), "{:?}", rows[1]);
    assert_eq!(chain(&*store), Ok(()));
}

#[test]
fn changing_one_byte_of_one_row_breaks_the_chain() {
    let (dir, store) = open();
    history(&*store);
    assert_eq!(chain(&*store), Ok(()));
    raw(&dir, "UPDATE audit SET actor = 'blice' WHERE id = 3").expect("tamper");
    assert_eq!(chain(&*store), Err(ChainError::Edited(3)));
}

#[test]
fn removing_or_reordering_rows_breaks_the_chain() {
    let (dir, store) = open();
    history(&*store);
    raw(&dir, "DELETE FROM audit WHERE id = 2").expect("remove");
    assert_eq!(chain(&*store), Err(ChainError::Gap { after: 1, found: 3 }));

    let (dir, store) = open();
    history(&*store);
    raw(&dir, "DELETE FROM audit WHERE id = 6").expect("truncate");
    assert_eq!(chain(&*store), Err(ChainError::Head { last: 5, head: 6 }));

    let (dir, store) = open();
    history(&*store);
    raw(
        &dir,
        "UPDATE audit SET id = 100 WHERE id = 2; UPDATE audit SET id = 2 WHERE id = 3; \
         UPDATE audit SET id = 3 WHERE id = 100;",
    )
    .expect("swap");
    assert_eq!(chain(&*store), Err(ChainError::Link(2)));
}

#[test]
fn two_replicas_appending_at_once_each_follow_the_others_rows_in_one_chain() {
    let (dir, a) = open();
    a.apply(Change::Submit(Box::new(new_job("first", 0, 0))), entry("alice", "job.submit")).expect("apply");
    let b = reopen(&dir);
    let submit = |store: &dyn Store, who: &str| {
        for i in 0..40 {
            // A refusal appends and locks nothing else first.
            store
                .audit_refusal(entry(who, "job.cancel"), format!("denied {i}"))
                .expect("every append commits");
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| submit(&*a, "a"));
        s.spawn(|| submit(&*b, "b"));
    });
    assert_eq!(a.audit_rows(0, None, 1000).expect("rows").len(), 81);
    chain(&*a).expect("one unbroken chain");
}
