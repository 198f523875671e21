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

/// A gang of `replicas` workers of `gpus` each, ids `id` (the gang) and `id + 1 + rank`, with
/// an input.
fn gang_with_input(id: i64, replicas: u32, gpus: u32) -> Vec<gantry_api::model::Job> {
    let gang = gantry_api::model::Gang {
        id,
        replicas,
        rank: None,
        local_rank: None,
        master_addr: None,
        master_port: None,
    };
    let mut out = vec![gantry_api::model::Job { gang: Some(gang.clone()), ..with_input(id, gpus) }];
    for rank in 0..replicas {
        let g = gantry_api::model::Gang { rank: Some(rank), ..gang.clone() };
        let mut w = with_input(id + 1 + i64::from(rank), gpus);
        w.submitted_at = id;
        w.gang = Some(g);
        out.push(w);
    }
    out
}

fn staged(node: &str, done: bool) -> Staging {
    Staging { node: node.into(), done, reason: String::new() }
}

#[test]
fn a_gang_with_inputs_is_staged_once_on_each_of_its_nodes_before_it_holds_any_gpu() {
    // Two workers of 8 GPUs: one on each node; a third job still finds no room on the ledger.
    let mut s = cluster(&[8, 8]);
    s.pending = gang_with_input(10, 2, 8);
    s.pending.push(job(20, 8, 0, 0));
    let p = pass(&s);
    assert!(p.gangs.is_empty(), "no worker is placed while its inputs are not staged: {p:?}");
    let mut stages: Vec<(i64, &str)> = p.stages.iter().map(|st| (st.job_id, st.node_id.as_str())).collect();
    stages.sort_unstable();
    assert_eq!(stages.len(), 2, "one per node: {p:?}");
    let nodes: std::collections::BTreeSet<&str> = stages.iter().map(|s| s.1).collect();
    assert_eq!(nodes.len(), 2, "{stages:?}");
    assert!(stages.iter().all(|(id, _)| (11..=12).contains(id)), "named by a worker: {stages:?}");
    let why = p.waiting.iter().find(|w| w.0 == 10).map(|w| w.1.clone()).unwrap_or_default();
    assert!(why.starts_with("staging its inputs on n"), "{why}");
    assert!(p.placements.iter().all(|pl| pl.job_id != 20), "the gang's GPUs are kept on the ledger: {p:?}");

    // Two workers of 2 GPUs fit on one node: one staging, not two.
    let mut s = cluster(&[8, 8]);
    s.pending = gang_with_input(10, 2, 2);
    let p = pass(&s);
    assert_eq!(p.stages.len(), 1, "both workers on one node stage once: {p:?}");
}

#[test]
fn a_gang_waits_until_every_node_is_staged_and_then_starts_only_there() {
    let mut s = cluster(&[8, 8, 8]);
    s.pending = gang_with_input(10, 2, 8);
    s.staging.insert(11, staged("n1", true));
    let progress = "staging 1.0 of 2.0 GiB, 100 MiB/s on n2".to_owned();
    s.staging.insert(12, Staging { node: "n2".into(), done: false, reason: progress.clone() });
    let p = pass(&s);
    assert!(p.gangs.is_empty() && p.stages.is_empty(), "{p:?}");
    assert_eq!(p.waiting, [(10, progress)]);

    s.staging.insert(12, staged("n2", true));
    let p = pass(&s);
    assert!(p.stages.is_empty(), "{p:?}");
    assert_eq!(p.gangs.len(), 1, "{p:?}");
    let mut nodes: Vec<&str> = p.gangs[0].workers.iter().map(|w| w.node_id.as_str()).collect();
    nodes.sort_unstable();
    assert_eq!(nodes, ["n1", "n2"], "the nodes that hold its inputs, not n0");
}

#[test]
fn a_staged_gang_waits_for_room_on_its_nodes_and_is_staged_again_when_one_left() {
    let mut s = cluster(&[8, 8, 8]);
    s.pending = gang_with_input(10, 2, 8);
    s.staging.insert(11, staged("n1", true));
    s.staging.insert(12, staged("n2", true));
    super::service_tests::running(&mut s, job(30, 8, 0, 100), "n2", &[0, 1, 2, 3, 4, 5, 6, 7]);
    let p = pass(&s);
    assert!(p.gangs.is_empty() && p.stages.is_empty(), "{p:?}");
    let why = p.waiting.iter().find(|w| w.0 == 10).map(|w| w.1.as_str());
    assert_eq!(why, Some("waiting for room on n1, n2, where its inputs are staged"));

    // n2 left: n1 alone cannot hold the gang, so it is staged again where it fits.
    let mut s = cluster(&[8, 8]);
    s.pending = gang_with_input(10, 2, 8);
    s.staging.insert(11, staged("n1", true));
    s.staging.insert(12, staged("gone", true));
    let p = pass(&s);
    assert!(p.gangs.is_empty(), "{p:?}");
    let mut nodes: Vec<&str> = p.stages.iter().map(|st| st.node_id.as_str()).collect();
    nodes.sort_unstable();
    assert_eq!(nodes, ["n0", "n1"], "{p:?}");
}

#[test]
fn a_gang_without_inputs_is_placed_at_once() {
    let mut s = cluster(&[8, 8]);
    s.pending = gang_with_input(10, 2, 8);
    for j in &mut s.pending {
        j.inputs.clear();
    }
    let p = pass(&s);
    assert!(p.stages.is_empty() && p.gangs.len() == 1, "{p:?}");
}

#[test]
fn a_job_with_an_image_is_staged_so_that_its_pull_runs_before_it_holds_gpus() {
    let mut s = cluster(&[8, 8]);
    let mut j = job(1, 2, 0, 0);
    j.image = Some(gantry_api::model::JobImage {
        reference: "registry.internal/ml/trainer:v3".into(),
        digest: None,
        secret: None,
        entrypoint: None,
        workdir: None,
    });
    s.pending = vec![j];
    let p = pass(&s);
    assert_eq!(p.stages.len(), 1, "the pull is a staging: {p:?}");
    let why = p.waiting.iter().find(|w| w.0 == 1).map(|w| w.1.clone());
    assert_eq!(why, Some(format!("pulling its image on {}", p.stages[0].node_id)));
    assert!(p.placements.is_empty(), "no GPU is held while it pulls: {p:?}");
    let node = p.stages[0].node_id.clone();
    s.staging.insert(1, Staging { node: node.clone(), done: false, reason: String::new() });
    let p = pass(&s);
    let why = p.waiting.iter().find(|w| w.0 == 1).map(|w| w.1.clone());
    assert_eq!(why, Some(format!("pulling its image on {node}")));
    s.staging.insert(1, Staging { node: node.clone(), done: true, reason: String::new() });
    let p = pass(&s);
    assert_eq!(p.placements.len(), 1, "{p:?}");
    assert_eq!(p.placements[0].node_id, node, "it starts where its image is");
}
