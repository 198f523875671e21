//! Leadership on one database: the lease's epoch grows at every election, and a leader whose
//! lease another replica took over commits nothing more (its writes are refused in their own
//! transaction), while the new leader's stand. Two stores on one database are two replicas.

use gantry_store::*;

use crate::{new_job, open, register, reopen, whole};

const TTL: i64 = 15_000;

fn lead(store: &dyn Store, holder: &str, at: i64) -> Lease {
    let lease = store.campaign(holder, TTL, at).expect("campaign");
    if lease.leader {
        store.set_fence(Fence::Leader { holder: holder.into(), epoch: lease.epoch });
    } else {
        store.set_fence(Fence::Follower);
    }
    lease
}

#[test]
fn a_leader_whose_lease_lapsed_and_was_taken_over_cannot_commit_a_placement() {
    let (dir, a) = open();
    let b = reopen(&dir);
    let first = lead(&*a, "a", 0);
    assert_eq!((first.leader, first.epoch), (true, 1));
    let epoch = register(&*a, 2);
    let (j1, _) = a.submit(&new_job("j1", 1, 0)).expect("submit");
    let (j2, _) = a.submit(&new_job("j2", 1, 0)).expect("submit");
    a.place(&whole(j1, epoch, &["GPU-0"])).expect("the leader places");
    assert!(!lead(&*b, "b", 5_000).leader, "a's lease still runs");
    // `a` stops (SIGSTOP) past its lease; `b` is elected under the next epoch.
    let second = lead(&*b, "b", TTL + 1);
    assert_eq!((second.leader, second.epoch), (true, 2));
    // `a` comes back still believing it leads under epoch 1: the database refuses it.
    let refused = a.place(&whole(j2, epoch, &["GPU-1"])).expect_err("a stale leader's placement");
    assert!(matches!(refused, StoreError::Fenced(_)), "{refused}");
    assert!(matches!(a.preempt(j1, "stale", 20_000), Err(StoreError::Fenced(_))));
    assert!(matches!(a.expire_nodes(i64::MAX, 20_000), Err(StoreError::Fenced(_))));
    assert_eq!(
        b.job(j2).expect("get").map(|j| j.state),
        Some(JobState::Pending),
        "nothing of it was written"
    );
    assert_eq!(b.nodes().expect("nodes")[0].state, NodeState::Ready);
    // The new leader's placement stands; `a` learns it follows at its next campaign.
    b.place(&whole(j2, epoch, &["GPU-1"])).expect("the new leader places");
    let seen = lead(&*a, "a", TTL + 2);
    assert_eq!((seen.leader, seen.holder.as_str(), seen.epoch), (false, "b", 2));
    assert!(matches!(a.place(&whole(j2, epoch, &["GPU-0"])), Err(StoreError::Fenced(_))), "a follower");
    assert_eq!(b.allocations(true).expect("held").len(), 2);
}

#[test]
fn renewing_keeps_the_epoch_and_every_election_increases_it() {
    let (_dir, store) = open();
    assert_eq!(store.lease().expect("lease"), None);
    assert_eq!(lead(&*store, "a", 0).epoch, 1);
    assert_eq!(lead(&*store, "a", 10_000).epoch, 1, "a renewal");
    assert!(!lead(&*store, "b", 20_000).leader, "renewed until 25 000");
    assert_eq!(lead(&*store, "b", 25_001).epoch, 2, "b takes over a lapsed lease");
    assert_eq!(lead(&*store, "a", 50_000).epoch, 3, "and a takes it back once b's lapsed");
    let lease = store.lease().expect("lease").expect("one");
    assert_eq!((lease.holder.as_str(), lease.epoch, lease.expires_at), ("a", 3, 50_000 + TTL));
}

#[test]
fn an_unfenced_store_places_as_before() {
    let (_dir, store) = open();
    let epoch = register(&*store, 1);
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    store.place(&whole(id, epoch, &["GPU-0"])).expect("no election, no fence");
}

#[test]
fn every_election_is_a_term_and_each_fenced_placement_carries_the_epoch_it_was_written_under() {
    let (dir, a) = open();
    let b = reopen(&dir);
    let epoch = register(&*a, 3);
    let (j1, _) = a.submit(&new_job("j1", 1, 0)).expect("submit");
    let (j2, _) = a.submit(&new_job("j2", 1, 0)).expect("submit");
    let (j3, _) = a.submit(&new_job("j3", 1, 0)).expect("submit");
    a.place(&whole(j3, epoch, &["GPU-0"])).expect("unfenced");
    lead(&*a, "a", 0);
    lead(&*a, "a", 5_000);
    a.place(&whole(j1, epoch, &["GPU-1"])).expect("a leads");
    lead(&*b, "b", 5_000 + TTL + 1);
    assert!(a.place(&whole(j2, epoch, &["GPU-2"])).is_err(), "a is stale");
    b.place(&whole(j2, epoch, &["GPU-2"])).expect("the new leader places");
    let history = a.leadership_history().expect("history");
    let terms: Vec<(u64, &str)> = history.terms.iter().map(|t| (t.epoch, t.holder.as_str())).collect();
    assert_eq!(terms, [(1, "a"), (2, "b")], "a renewal is no election");
    assert!(history.terms[0].elected_at <= history.terms[1].elected_at);
    let placed: Vec<(i64, Option<u64>)> =
        history.placements.iter().map(|p| (p.job_id, p.leader_epoch)).collect();
    assert_eq!(placed, [(j1, Some(1)), (j2, Some(2)), (j3, None)]);
    let stamped = &history.placements[1];
    assert!(stamped.recorded_at.is_some_and(|at| at >= history.terms[1].elected_at), "{history:?}");
}
