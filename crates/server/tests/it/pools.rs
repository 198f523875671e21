//! Node pools in a scheduling pass: a selector is a filter, a pool's placement a scoring term,
//! a team a pool does not admit waits with the reason.

use gantry_core::PolicyKind;
use gantry_server::scheduler::{Snapshot, plan};
use gantry_store::*;

use super::scheduling::{job, node};

/// Nodes n0 (pool `inference`) and n1 (no pool label: `default`), 4 GPUs each.
fn two_pools() -> Snapshot {
    let mut s = Snapshot::default();
    for k in 0..2 {
        let (mut n, mut g) = node(4);
        n.id = format!("n{k}");
        if k == 0 {
            n.labels.insert("pool".into(), "inference".into());
        }
        for gpu in &mut g {
            gpu.node_id = n.id.clone();
            gpu.info.uuid = format!("GPU-{k}-{}", gpu.info.index);
        }
        s.nodes.push(n);
        s.gpus.extend(g);
    }
    s
}

fn in_pool(mut j: Job, pool: &str) -> Job {
    j.node_selector.insert("pool".into(), pool.into());
    j
}

#[test]
fn jobs_land_only_in_their_pool_and_jobs_naming_none_in_the_default_pool() {
    let mut s = two_pools();
    s.pending = vec![job(1, "t", 0, 1, 0), in_pool(job(2, "t", 0, 1, 0), "inference"), job(3, "t", 0, 4, 0)];
    let p = plan(&s, PolicyKind::Gantry, 1);
    let on: Vec<(i64, &str)> = p.placements.iter().map(|p| (p.job_id, p.node_id.as_str())).collect();
    assert_eq!(on, [(1, "n1"), (2, "n0")], "{p:?}");
    let (id, why) = &p.waiting[0];
    assert_eq!(*id, 3, "the default pool is full: {p:?}");
    assert!(!why.contains("pool"), "it waits for room in its pool, not for a pool: {why}");
}

#[test]
fn a_spread_pool_puts_each_job_on_its_least_allocated_node() {
    let mut s = two_pools();
    s.nodes[0].labels.clear();
    s.pools = vec![Pool { name: "default".into(), placement: PoolPlacement::Spread, teams: Vec::new() }];
    s.pending = (1..=4).map(|id| job(id, "t", 0, 1, 0)).collect();
    let p = plan(&s, PolicyKind::Gantry, 1);
    let on_n0 = p.placements.iter().filter(|p| p.node_id == "n0").count();
    assert_eq!((p.placements.len(), on_n0), (4, 2), "{p:?}");
    s.pools[0].placement = PoolPlacement::Pack;
    let p = plan(&s, PolicyKind::Gantry, 1);
    let on_n0 = p.placements.iter().filter(|p| p.node_id == "n0").count();
    assert!(on_n0 == 4 || on_n0 == 0, "pack keeps them on one node: {p:?}");
}

#[test]
fn a_team_its_pool_does_not_admit_waits_with_the_reason_and_a_selector_matching_no_node_waits_too() {
    let mut s = two_pools();
    s.pools = vec![Pool {
        name: "inference".into(),
        placement: PoolPlacement::Pack,
        teams: vec!["serving".into()],
    }];
    let mut rack = job(3, "t", 0, 1, 0);
    rack.node_selector.insert("rack".into(), "r9".into());
    s.pending = vec![
        in_pool(job(1, "vision", 0, 1, 0), "inference"),
        in_pool(job(2, "serving", 0, 1, 0), "inference"),
        rack,
    ];
    let p = plan(&s, PolicyKind::Gantry, 1);
    assert_eq!(p.placements.iter().map(|p| p.job_id).collect::<Vec<_>>(), [2], "{p:?}");
    let why = |id: i64| p.waiting.iter().find(|w| w.0 == id).map(|w| w.1.clone()).unwrap_or_default();
    assert!(why(1).contains("team vision may not use pool inference"), "{}", why(1));
    assert!(why(3).contains("pool"), "{}", why(3));
}
