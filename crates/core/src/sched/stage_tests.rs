//! The staging step of `super::stage`: a job with inputs is staged before it is placed, waits
//! with its progress, then goes to the node that holds them, and only there.

use gantry_api::inputs::Input;

use super::service_tests::{cluster, job};
use super::{Plan, Staging, plan_grouped};
use crate::{PolicyKind, SplitMix64};

fn with_input(id: i64, gpus: u32) -> gantry_api::model::Job {
    let mut j = job(id, gpus, 0, 0);
    j.inputs = vec![Input::new("data", "s3://bucket/data")];
    j
}

fn pass(s: &super::Snapshot) -> Plan {
    plan_grouped(s, PolicyKind::Gantry, &mut SplitMix64::new(7))
}

#[test]
fn a_job_with_inputs_is_staged_on_a_node_before_it_holds_any_gpu() {
    let mut s = cluster(&[8]);
    s.pending = vec![with_input(1, 2), job(2, 6, 0, 0)];
    let p = pass(&s);
    assert_eq!(p.stages.len(), 1, "{p:?}");
    assert_eq!((p.stages[0].job_id, p.stages[0].node_id.as_str()), (1, "n0"));
    assert!(p.placements.iter().all(|pl| pl.job_id != 1), "no GPU is allocated to it: {p:?}");
    assert!(p.placements.iter().any(|pl| pl.job_id == 2), "the other job still starts: {p:?}");
    let why = p.waiting.iter().find(|w| w.0 == 1).map(|w| w.1.as_str());
    assert_eq!(why, Some("staging its inputs on n0"));
}

#[test]
fn a_staging_job_waits_with_its_progress_and_starts_only_where_its_inputs_are() {
    let mut s = cluster(&[8, 8]);
    s.pending = vec![with_input(1, 2)];
    let progress = "staging 1.0 of 2.0 GiB, 100 MiB/s on n1".to_owned();
    s.staging.insert(1, Staging { node: "n1".into(), done: false, reason: progress.clone() });
    let p = pass(&s);
    assert!(p.placements.is_empty() && p.stages.is_empty(), "{p:?}");
    assert_eq!(p.waiting, [(1, progress)]);
    s.staging.insert(1, Staging { node: "n1".into(), done: true, reason: String::new() });
    let p = pass(&s);
    assert_eq!(p.placements.len(), 1, "{p:?}");
    assert_eq!(p.placements[0].node_id, "n1", "the node that holds its inputs, not the fuller one");
}

#[test]
fn a_staging_on_a_node_that_left_is_staged_again_elsewhere() {
    let mut s = cluster(&[8]);
    s.pending = vec![with_input(1, 2)];
    s.staging.insert(1, Staging { node: "gone".into(), done: true, reason: String::new() });
    let p = pass(&s);
    assert_eq!(p.stages.iter().map(|st| st.node_id.as_str()).collect::<Vec<_>>(), ["n0"]);
}
