//! Elastic jobs in the server's pass: admitted at the minimum, grown onto idle GPUs when nothing
//! waits, shrunk (never below the minimum) for a waiting job, at most once per resize interval.

use std::collections::HashSet;

use gantry_core::PolicyKind;
use gantry_server::scheduler::{Plan, Snapshot, plan};
use gantry_store::*;
use proptest::prelude::*;

use super::scheduling::{hold, job, node};

const GAP_MS: i64 = 60_000;
const NOW: i64 = 1_000_000;

/// `n` nodes of `gpus` GPUs, named n0, n1, …, at time `NOW`.
fn cluster(sizes: &[u32]) -> Snapshot {
    let mut s = Snapshot { at: NOW, ..Snapshot::default() };
    s.queue.resize_gap_ms = GAP_MS;
    for (k, gpus) in sizes.iter().enumerate() {
        let (mut nd, mut g) = node(*gpus);
        nd.id = format!("n{k}");
        for gpu in &mut g {
            gpu.node_id = nd.id.clone();
            gpu.info.uuid = format!("GPU-{k}-{}", gpu.info.index);
        }
        s.nodes.push(nd);
        s.gpus.extend(g);
    }
    s
}

fn elastic(id: JobId, min: u32, max: u32) -> Job {
    let mut j = job(id, "t", 0, min, 0);
    j.request.gpus_max = Some(max);
    j
}

/// Marks `j` running on `node` on `width` GPUs from `first_gpu`, started `ran_ms` ago.
fn run_on(s: &mut Snapshot, j: Job, node: usize, first_gpu: u32, width: u32, ran_ms: i64) {
    hold(s, j, node, first_gpu, width, NOW - ran_ms);
}

fn go(s: &Snapshot) -> Plan {
    plan(s, PolicyKind::Gantry, 1)
}

#[test]
fn an_elastic_job_on_an_idle_node_starts_as_wide_as_its_maximum_allows() {
    let mut s = cluster(&[4]);
    s.pending = vec![elastic(1, 1, 4)];
    let p = go(&s);
    assert_eq!(p.placements.len(), 1, "{p:?}");
    assert_eq!(p.placements[0].grants.len(), 4, "grown before it starts: no restart needed");
    let mut s = cluster(&[8]);
    s.pending = vec![elastic(1, 2, 3)];
    assert_eq!(go(&s).placements[0].grants.len(), 3, "never above its maximum");
}

#[test]
fn an_elastic_job_starts_at_its_minimum_while_another_job_waits() {
    let mut s = cluster(&[4]);
    s.pending = vec![elastic(1, 2, 4), job(2, "t", 0, 3, 0)];
    let p = go(&s);
    assert_eq!(p.placements.iter().map(|p| (p.job_id, p.grants.len())).collect::<Vec<_>>(), [(1, 2)]);
    assert_eq!(p.waiting.iter().map(|w| w.0).collect::<Vec<_>>(), [2]);
}

#[test]
fn an_elastic_job_moves_to_the_node_where_it_gets_the_most_gpus_before_it_starts() {
    let mut s = cluster(&[2, 4]);
    run_on(&mut s, job(9, "t", 0, 1, 0), 0, 0, 1, 0);
    s.pending = vec![elastic(1, 1, 4)];
    let p = go(&s);
    assert_eq!((p.placements[0].node_id.as_str(), p.placements[0].grants.len()), ("n1", 4), "{p:?}");
}

#[test]
fn an_elastic_job_grows_only_onto_a_node_with_a_gpu_model_it_accepts() {
    let mut s = cluster(&[2, 4]);
    s.gpus.iter_mut().filter(|g| g.node_id == "n1").for_each(|g| g.info.model = "H100-80GB".into());
    let mut j = elastic(1, 1, 4);
    j.gpu_models = vec!["A100".into()];
    s.pending = vec![j];
    let p = go(&s);
    assert_eq!((p.placements[0].node_id.as_str(), p.placements[0].grants.len()), ("n0", 2), "{p:?}");
}

#[test]
fn a_settled_elastic_job_grows_onto_idle_gpus_when_nothing_waits() {
    let mut s = cluster(&[4]);
    run_on(&mut s, elastic(1, 1, 4), 0, 0, 1, GAP_MS);
    let p = go(&s);
    assert_eq!(p.resizes.len(), 1, "{p:?}");
    assert_eq!((p.resizes[0].job_id, p.resizes[0].from, p.resizes[0].to), (1, 1, 4));
    assert_eq!(p.resizes[0].reason, "resized 1 → 4 GPUs: idle GPUs");
    assert!(p.preemptions.is_empty());
}

#[test]
fn an_elastic_job_is_not_resized_again_within_its_resize_interval() {
    let mut s = cluster(&[4]);
    run_on(&mut s, elastic(1, 1, 4), 0, 0, 1, GAP_MS - 1);
    assert!(go(&s).resizes.is_empty(), "restarted too recently to grow");
}

#[test]
fn an_elastic_job_shrinks_for_a_waiting_job_at_once_the_interval_damps_growth_only() {
    let mut s = cluster(&[4]);
    run_on(&mut s, elastic(1, 1, 4), 0, 0, 4, 1_000);
    s.pending = vec![job(2, "t", 0, 2, 0)];
    let p = go(&s);
    assert_eq!(p.resizes.iter().map(|r| (r.job_id, r.from, r.to)).collect::<Vec<_>>(), [(1, 4, 2)], "{p:?}");
    assert!(p.preemptions.is_empty(), "{p:?}");
}

/// The snapshot `ms` later, once the resized job 1 stopped (requeued, its GPUs free).
fn requeued(s: &Snapshot, p: &Plan, ms: i64) -> Snapshot {
    let mut next = s.clone();
    next.at += ms;
    next.held.retain(|a| a.job_id != 1);
    let k = next.active.iter().position(|j| j.id == 1).expect("job 1 runs");
    let mut j = next.active.remove(k);
    (j.state, j.node_id, j.epoch, j.started_at, j.stop) = (JobState::Pending, None, None, None, None);
    j.gpu_uuids.clear();
    next.pending.insert(0, j);
    for r in &p.resizes {
        next.queue.widths.insert(r.job_id, r.to);
    }
    next
}

#[test]
fn a_team_under_its_guarantee_gets_a_borrowed_gpu_back_within_five_seconds_and_the_resize_names_the_new_width()
 {
    let mut s = cluster(&[4]);
    s.queue.resize_gap_ms = 300_000;
    s.teams = vec![Team { name: "b".into(), gpu_quota: Some(1), ..Team::default() }];
    let mut borrower = elastic(1, 1, 4);
    borrower.team = "a".into();
    // Team a borrows the whole node; it started a second ago, well within its resize interval.
    run_on(&mut s, borrower, 0, 0, 4, 1_000);
    let mut owner = job(2, "b", 0, 1, 0);
    owner.submitted_at = NOW;
    let mut wide = job(3, "a", 0, 4, 0);
    wide.submitted_at = NOW;
    s.pending = vec![owner, wide];
    let first = go(&s);
    assert_eq!(first.resizes.len(), 1, "the borrower shrinks in the next pass: {first:?}");
    assert_eq!(first.resizes[0].reason, "shrunk 4 → 3 GPUs: job 2 needed them");
    let second = go(&requeued(&s, &first, 2_000));
    let placed: Vec<(JobId, usize)> = second.placements.iter().map(|p| (p.job_id, p.grants.len())).collect();
    assert!(placed.contains(&(2, 1)), "team b runs 2 s after it asked: {second:?}");
    assert!(
        placed.contains(&(1, 3)),
        "the new attempt is as wide as the resize said, job 3 waiting or not: {second:?}"
    );
}

#[test]
fn a_pending_rigid_job_gets_its_gpus_back_from_a_grown_elastic_job() {
    let mut s = cluster(&[4]);
    run_on(&mut s, elastic(1, 1, 4), 0, 0, 4, GAP_MS);
    s.pending = vec![job(17, "t", 0, 2, 0)];
    let p = go(&s);
    assert!(p.preemptions.is_empty(), "shrinking is enough: nobody is preempted: {p:?}");
    assert_eq!(p.resizes.len(), 1, "{p:?}");
    assert_eq!((p.resizes[0].from, p.resizes[0].to), (4, 2));
    assert_eq!(p.resizes[0].reason, "shrunk 4 → 2 GPUs: job 17 needed them");
    let why = &p.waiting.iter().find(|w| w.0 == 17).expect("job 17 waits").1;
    assert!(why.contains("elastic job 1 shrinks"), "{why}");
}

#[test]
fn a_job_waiting_for_a_shrinking_elastic_job_asks_for_nothing_more() {
    let mut s = cluster(&[4]);
    let mut stopping = elastic(1, 1, 4);
    stopping.stop = Some("preempt".into());
    run_on(&mut s, stopping, 0, 0, 4, GAP_MS);
    s.pending = vec![job(17, "t", 0, 2, 0)];
    let p = go(&s);
    assert!(p.resizes.is_empty() && p.preemptions.is_empty(), "{p:?}");
}

#[test]
fn an_elastic_job_at_its_minimum_is_not_shrunk_and_a_higher_priority_job_preempts_it_instead() {
    let mut s = cluster(&[2]);
    run_on(&mut s, elastic(1, 2, 4), 0, 0, 2, GAP_MS);
    s.pending = vec![job(2, "t", 100, 2, 0)];
    let p = go(&s);
    assert!(p.resizes.is_empty(), "{p:?}");
    assert_eq!(p.preemptions.iter().map(|p| p.job_id).collect::<Vec<_>>(), [1]);
}

/// A random cluster with running elastic and rigid jobs and a random queue.
fn scenario() -> impl Strategy<Value = Snapshot> {
    let nodes = prop::collection::vec(1u32..=8, 1..=3);
    let running = prop::collection::vec((any::<bool>(), 1u32..=4, 0u32..=4, 0u32..=8, any::<bool>()), 0..=6);
    let pending = prop::collection::vec((any::<bool>(), 1u32..=6, 0u32..=4, -1i32..=1), 0..=6);
    (nodes, running, pending).prop_map(|(sizes, running, pending)| {
        let mut s = cluster(&sizes);
        let mut free: Vec<u32> = sizes.clone();
        let mut next = 100;
        for (elastic_job, min, extra, want, settled) in running {
            let node = (next as usize) % sizes.len();
            next += 1;
            let width = if elastic_job { min + extra.min(want) } else { min };
            if width > free[node] {
                continue;
            }
            let first = sizes[node] - free[node];
            free[node] -= width;
            let j = if elastic_job { elastic(next, min, min + extra) } else { job(next, "t", 0, min, 0) };
            run_on(&mut s, j, node, first, width, if settled { GAP_MS } else { 0 });
        }
        for (elastic_job, min, extra, priority) in pending {
            next += 1;
            let mut j = if elastic_job { elastic(next, min, min + extra) } else { job(next, "t", 0, min, 0) };
            j.priority = priority;
            j.submitted_at = next;
            s.pending.push(j);
        }
        s
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn elastic_jobs_stay_within_their_range_and_take_only_free_gpus(s in scenario()) {
        let p = go(&s);
        let jobs: Vec<&Job> = s.pending.iter().chain(&s.active).collect();
        let find = |id: JobId| jobs.iter().find(|j| j.id == id).copied().expect("a known job");
        for placed in &p.placements {
            let j = find(placed.job_id);
            let width = placed.grants.len() as u32;
            match j.request.gpus_max {
                Some(max) => prop_assert!((j.request.gpus..=max).contains(&width), "{placed:?} of {j:?}"),
                None => prop_assert_eq!(width, j.request.gpus),
            }
        }
        for r in &p.resizes {
            let j = find(r.job_id);
            let max = j.request.gpus_max.expect("only elastic jobs are resized");
            prop_assert_eq!(r.from as usize, j.gpu_uuids.len());
            prop_assert!(r.to != r.from && (j.request.gpus..=max).contains(&r.to), "{r:?} of {j:?}");
            // Only growth waits for the gap; a shrink for a waiting job is at once.
            let settled = j.started_at.is_some_and(|t| s.at - t >= GAP_MS);
            prop_assert!(r.to < r.from || settled, "grown within its gap: {r:?}");
        }
        // Never more GPUs than free: no GPU held or granted twice.
        let mut taken: HashSet<&str> = s.held.iter().map(|a| a.gpu_uuid.as_str()).collect();
        for g in p.placements.iter().flat_map(|p| &p.grants) {
            prop_assert!(taken.insert(g.uuid.as_str()), "{} granted twice: {p:?}", g.uuid);
        }
        // A job grows only when no job that could run waits for GPUs.
        let largest = s.nodes.iter().map(|n| s.gpus.iter().filter(|g| g.node_id == n.id).count()).max();
        let largest = largest.unwrap_or(0) as u32;
        let widened = p.placements.iter().any(|pl| pl.grants.len() as u32 > find(pl.job_id).request.gpus);
        let grows = widened || p.resizes.iter().any(|r| r.to > r.from);
        let waits = p.waiting.iter().any(|(id, _)| find(*id).request.gpus <= largest);
        prop_assert!(!(grows && waits), "grew while a job waits: {p:?}");
        // A job is resized or preempted, never both.
        let resized: HashSet<JobId> = p.resizes.iter().map(|r| r.job_id).collect();
        prop_assert!(p.preemptions.iter().all(|v| !resized.contains(&v.job_id)), "{p:?}");
    }
}
