//! Placement prefers the data (issue 22): what the agents report of their caches
//! (`POST /v1/agent/staging`, kept in `gantry_server::staging`) is what the pass weighs.

use gantry_api::inputs::{CacheEntry, Input};
use gantry_core::PolicyKind;
use gantry_server::scheduler::{Snapshot, plan};
use gantry_server::staging::Staging;
use gantry_store::*;

use super::scheduling::{hold, job};

const URL: &str = "s3://datasets/imagenet";

/// Nodes n0 and n1 of eight GPUs each, the pass at one hour.
fn two_nodes(pending: Vec<Job>) -> Snapshot {
    let mut s = Snapshot { pending, at: 3_600_000, ..Snapshot::default() };
    for n in 0..2 {
        let (mut node, mut gpus) = super::scheduling::node(8);
        node.id = format!("n{n}");
        for g in &mut gpus {
            g.node_id = node.id.clone();
            g.info.uuid = format!("GPU-{n}-{}", g.info.index);
        }
        s.nodes.push(node);
        s.gpus.extend(gpus);
    }
    s
}

fn with_input(id: JobId) -> Job {
    Job { inputs: vec![Input::new("data", URL)], ..job(id, "ml", 0, 2, 0) }
}

/// n1's agent reports 150 GB of the job's dataset in its cache, for team ml.
fn n1_caches_the_dataset() -> Staging {
    let table = Staging::default();
    let entry = CacheEntry {
        node: String::new(),
        team: "ml".into(),
        url: URL.into(),
        version: "\"etag-1\"".into(),
        bytes: 150_000_000_000,
        last_used_ms: 1,
        hits: 0,
        in_use: 0,
    };
    let _ = table.report("n1", Vec::new(), vec![entry]);
    table
}

fn staged_on(s: &Snapshot) -> Vec<String> {
    plan(s, PolicyKind::Gantry, 1).stages.into_iter().map(|st| st.node_id).collect()
}

#[test]
fn a_job_whose_input_is_cached_on_one_of_two_equal_nodes_is_staged_there() {
    let mut s = two_nodes(vec![with_input(1)]);
    assert_eq!(staged_on(&s), ["n0"], "nothing cached: the first of two equal nodes");
    s.locality = n1_caches_the_dataset().locality();
    assert_eq!(staged_on(&s), ["n1"], "n1 holds its 150 GB");
}

#[test]
fn a_job_does_not_wait_for_the_node_caching_its_input_when_that_wait_is_much_longer() {
    let mut s = two_nodes(vec![with_input(1)]);
    s.locality = n1_caches_the_dataset().locality();
    // n1 is full with a job that started a minute ago: room is expected soon, worth waiting.
    hold(&mut s, job(9, "ml", 0, 8, 0), 1, 0, 8, 3_540_000);
    let p = plan(&s, PolicyKind::Gantry, 1);
    assert_eq!(p.stages.iter().map(|st| st.node_id.as_str()).collect::<Vec<_>>(), ["n1"]);
    assert!(p.placements.is_empty(), "{p:?}");
    // The job on n1 has run for an hour: waiting costs far more than 300 s of copying.
    s.active[0].started_at = Some(0);
    assert_eq!(staged_on(&s), ["n0"]);
}
