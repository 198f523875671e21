//! The invariants the database keeps by itself (migration 17), against a writer that goes
//! around the store's rules: SQL written behind its back is refused.

use gantry_store::*;

use crate::{new_job, open, raw, register, whole};

const ALLOCATE: &str = "INSERT INTO allocations (job_id, attempt, node_id, epoch, gpu_uuid, share_milli, memory_mib, \
     created_at) VALUES";

#[test]
fn the_database_refuses_an_allocation_that_does_not_fit_beside_what_its_gpu_holds() {
    let (dir, store) = open();
    let epoch = register(&*store, 1);
    let (a, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    let (b, _) = store.submit(&new_job("b", 1, 0)).expect("submit");
    store.place(&whole(a, epoch, &["GPU-0"])).expect("place");
    let second = format!("{ALLOCATE} ({b}, 1, 'n1', {epoch}, 'GPU-0', 1000, 81920, 30)");
    let refused = raw(&dir, &second).expect_err("a second whole-GPU holder");
    assert!(refused.contains("no room left"), "{refused}");
    let too_big = format!("{ALLOCATE} ({b}, 1, 'n1', {epoch}, 'GPU-0', 0, 90000, 30)");
    assert!(raw(&dir, &too_big).is_err(), "more memory than the GPU has");
    let unknown = format!("{ALLOCATE} ({b}, 1, 'n1', {epoch}, 'GPU-9', 0, 1, 30)");
    assert!(raw(&dir, &unknown).is_err(), "a GPU the store does not know");
    assert_eq!(store.allocations(true).expect("held").len(), 1);
    assert!(
        history::conflicts(&store.allocations(false).expect("history"), &store.gpus().expect("gpus"))
            .is_empty()
    );
}

#[test]
fn the_database_refuses_to_move_a_node_epoch_back() {
    let (dir, store) = open();
    register(&*store, 1);
    let epoch = register(&*store, 1);
    let refused = raw(&dir, "UPDATE nodes SET epoch = 1 WHERE id = 'n1'").expect_err("back to epoch 1");
    assert!(refused.contains("epoch"), "{refused}");
    assert_eq!(store.nodes().expect("nodes")[0].epoch, epoch);
    raw(&dir, &format!("UPDATE nodes SET epoch = {} WHERE id = 'n1'", epoch + 1)).expect("forward is fine");
}

#[test]
fn the_database_refuses_an_audit_row_that_does_not_follow_the_head() {
    let (dir, store) = open();
    let entry = AuditEntry {
        actor: Actor::default(),
        action: "job.submit".into(),
        target: String::new(),
        at: 1,
        credential: None,
    };
    store.apply(Change::Submit(Box::new(new_job("a", 0, 0))), entry).expect("apply");
    let (head, hash) = store.audit_head().expect("head").expect("one row");
    let insert = |id: i64, prev: &str| {
        format!(
            "INSERT INTO audit (id, at, actor, role, team, action, target, outcome, peer, prev_hash, hash) \
             VALUES ({id}, 2, 'mallory', 'admin', NULL, 'x', 'y', 'ok', NULL, '{prev}', 'h')"
        )
    };
    assert!(raw(&dir, &insert(head + 5, &hash)).is_err(), "a gap in the ids");
    assert!(raw(&dir, &insert(head + 1, "forged")).is_err(), "a link to another hash");
    assert_eq!(store.audit_rows(0, None, 10).expect("rows").len(), 1);
}
