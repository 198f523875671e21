//! The data's term of `super::locality`: a job goes where its inputs are cached when nodes are
//! otherwise equal, waits for a busy node only while the copy saved outweighs the wait, and a
//! queued job is staged ahead.

use gantry_api::inputs::Input;

use super::service_tests::{cluster, job, running};
use super::{Cached, Plan, Snapshot, Staging, plan_grouped};
use crate::{PolicyKind, SplitMix64};

const GB: u64 = 1_000_000_000;

fn with_input(id: i64, gpus: u32) -> gantry_api::model::Job {
    let mut j = job(id, gpus, 0, 0);
    j.inputs = vec![Input::new("data", "s3://bucket/imagenet")];
    j
}

/// `bytes` of the job's dataset in `node`'s cache, for team `team`.
fn cached(s: &mut Snapshot, node: &str, team: &str, bytes: u64) {
    let url = "s3://bucket/imagenet".into();
    let (node, team, version) = (node.into(), team.into(), "etag-1".into());
    s.locality.cached.push(Cached { node, team, url, version, bytes, last_used_ms: 0 });
}

fn pass(s: &Snapshot) -> Plan {
    plan_grouped(s, PolicyKind::Gantry, &mut SplitMix64::new(7))
}

fn staged_on(p: &Plan, id: i64) -> Vec<(&str, bool)> {
    p.stages.iter().filter(|st| st.job_id == id).map(|st| (st.node_id.as_str(), st.ahead)).collect()
}

#[test]
fn a_job_goes_to_the_node_that_caches_its_inputs_when_nodes_are_otherwise_equal() {
    let mut s = cluster(&[8, 8]);
    s.pending = vec![with_input(1, 2)];
    assert_eq!(staged_on(&pass(&s), 1), [("n0", false)], "nothing cached: the first node");
    cached(&mut s, "n1", "ml", 150 * GB);
    assert_eq!(staged_on(&pass(&s), 1), [("n1", false)], "the copy of 300 s it saves");
}

#[test]
fn another_teams_cache_and_a_few_seconds_of_copying_do_not_move_a_job() {
    let mut s = cluster(&[8, 8]);
    s.pending = vec![with_input(1, 2)];
    cached(&mut s, "n1", "vision", 150 * GB);
    assert_eq!(staged_on(&pass(&s), 1), [("n0", false)], "another team's copy is not the job's");
    s.locality.cached.clear();
    cached(&mut s, "n1", "ml", GB);
    assert_eq!(staged_on(&pass(&s), 1), [("n0", false)], "2 s of copying never overrides packing");
}

#[test]
fn a_job_waits_for_a_busy_node_holding_its_inputs_only_while_the_copy_saved_outweighs_the_wait() {
    let mut s = cluster(&[8, 8]);
    // n1 is full with a job that has run for a minute: room is expected in about a minute.
    running(&mut s, job(9, 8, 0, 0), "n1", &[0, 1, 2, 3, 4, 5, 6, 7]);
    s.pending = vec![with_input(1, 2)];
    cached(&mut s, "n1", "ml", 150 * GB);
    let p = pass(&s);
    assert_eq!(staged_on(&p, 1), [("n1", false)], "{p:?}");
    assert!(p.placements.is_empty(), "{p:?}");
    let why = p.waiting.iter().find(|w| w.0 == 1).map(|w| w.1.as_str());
    assert_eq!(why, Some("waiting for room on n1, which holds its inputs"));
    // Once it has run for an hour, an hour's wait costs more than 300 s of copying.
    s.active[0].started_at = Some(s.at - 3_600_000);
    assert_eq!(staged_on(&pass(&s), 1), [("n0", false)]);
    // Its staging is done on n1 and n1 is still full: copied again on n0 rather than waiting.
    s.staging.insert(1, Staging { node: "n1".into(), done: true, reason: String::new() });
    assert_eq!(staged_on(&pass(&s), 1), [("n0", false)]);
    // A young job on n1: it waits there, where its inputs are.
    s.active[0].started_at = Some(s.at - 60_000);
    let p = pass(&s);
    assert!(p.stages.is_empty() && p.placements.is_empty(), "{p:?}");
}

#[test]
fn a_job_the_queue_keeps_waiting_is_staged_ahead_where_it_would_be_ready_soonest() {
    let mut s = cluster(&[4, 4]);
    // n0 is held by a job an hour old, n1 by one a minute old: n1 is expected to free first.
    running(&mut s, job(8, 4, 0, 0), "n0", &[0, 1, 2, 3]);
    s.active[0].started_at = Some(s.at - 3_600_000);
    running(&mut s, job(9, 4, 0, 0), "n1", &[0, 1, 2, 3]);
    s.pending = vec![with_input(1, 4)];
    let p = pass(&s);
    assert_eq!(staged_on(&p, 1), [("n1", true)], "{p:?}");
    assert!(p.placements.is_empty());
    // Staging recorded: it is not ordered again.
    s.staging.insert(1, Staging { node: "n1".into(), done: false, reason: String::new() });
    assert!(pass(&s).stages.is_empty());
}
