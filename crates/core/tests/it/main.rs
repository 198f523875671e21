//! Property tests of the ledger and the policies: whatever the sequence of requests, no node or
//! GPU is ever over-committed, no share is handed out twice, releases restore capacity exactly,
//! and a seed fully determines every policy's decisions.

use std::sync::Arc;

use gantry_core::frag::TypicalPods;
use gantry_core::{Cluster, ModelSet, NodeSpec, Placement, PolicyKind, Request, SplitMix64};
use proptest::prelude::*;

fn nodes() -> Vec<NodeSpec> {
    let spec = |name: &str, cpu, gpus, model: &str| NodeSpec {
        name: name.into(),
        cpu_milli: cpu,
        memory_mib: 65536,
        gpus,
        gpu_model: Some(model.into()),
        gpu_memory_mib: 16000,
    };
    vec![
        spec("a", 16000, 2, "T4"),
        spec("b", 64000, 8, "G2"),
        spec("c", 32000, 4, "G2"),
        spec("d", 8000, 1, "V100"),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    (
        0u64..20_000,
        0u64..20_000,
        prop_oneof![Just(0u32), Just(1), Just(2), Just(4)],
        1u32..=1000,
        0u64..9000,
        any::<bool>(),
    )
        .prop_map(|(cpu, mem, gpus, milli, gmem, pinned)| {
            let milli = if gpus > 1 { 1000 } else { milli };
            let gmem = if gpus == 1 && milli < 1000 { gmem } else { 0 };
            let models = if pinned { ModelSet::Only(0b10) } else { ModelSet::Any };
            Request::new(cpu, mem, gpus, milli, gmem, models).expect("generated requests are valid")
        })
}

fn check_invariants(cluster: &Cluster) {
    for n in cluster.nodes() {
        assert!(n.cpu_free <= n.spec.cpu_milli);
        assert!(n.memory_free <= n.spec.memory_mib);
        for (f, m) in n.gpu_free.iter().zip(&n.gpu_memory_free) {
            assert!(*f <= 1000, "GPU share over-committed");
            assert!(*m <= n.spec.gpu_memory_mib, "GPU memory over-committed");
        }
    }
    let free: u64 = cluster.nodes().iter().map(|n| n.gpu_free_total()).sum();
    assert_eq!(free + cluster.used_milli(), cluster.capacity_milli());
}

mod scoring;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_policy_ever_over_commits_and_releases_restore_everything(
        reqs in prop::collection::vec(request(), 1..60),
        policy in 0usize..7,
        seed in any::<u64>(),
    ) {
        let mut cluster = Cluster::new(nodes()).expect("cluster");
        let typical = Arc::new(TypicalPods::from_requests(&reqs, 0.95));
        let mut policy = PolicyKind::ALL[policy].build(typical);
        let order: Vec<usize> = (0..cluster.nodes().len()).collect();
        let mut rng = SplitMix64::new(seed);
        let mut held = Vec::new();
        for (i, r) in reqs.iter().enumerate() {
            if let Some(p) = policy.place(&cluster, r, &order, &mut rng) {
                cluster.allocate(i as u64, r, &p).expect("a policy only proposes placements that fit");
                held.push(i as u64);
            }
            check_invariants(&cluster);
        }
        for id in held {
            cluster.release(id).expect("held allocations release");
            check_invariants(&cluster);
        }
        prop_assert_eq!(cluster.used_milli(), 0);
        for n in cluster.nodes() {
            prop_assert_eq!(n.cpu_free, n.spec.cpu_milli);
            prop_assert_eq!(n.classes, 0);
        }
    }

    #[test]
    fn the_ledger_refuses_double_grants_and_over_commits(
        reqs in prop::collection::vec(request(), 1..40),
        picks in prop::collection::vec((0usize..4, 0u32..8, 0u32..8), 40),
    ) {
        let mut cluster = Cluster::new(nodes()).expect("cluster");
        for (i, (r, (node, g0, g1))) in reqs.iter().zip(picks).enumerate() {
            let gpus = match r.gpus { 0 => vec![], 1 => vec![g0], _ => (0..r.gpus).map(|k| (g1 + k) % 8).collect() };
            let before = cluster.clone();
            let placement = Placement { node, gpus };
            if cluster.allocate(i as u64, r, &placement).is_err() {
                // A refused change leaves everything as it was.
                prop_assert_eq!(cluster.used_milli(), before.used_milli());
                prop_assert_eq!(cluster.allocation_count(), before.allocation_count());
            }
            check_invariants(&cluster);
            prop_assert!(cluster.allocate(i as u64, r, &placement).is_err(), "an id cannot be granted twice");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_decisions(reqs in prop::collection::vec(request(), 1..40), seed in any::<u64>(), policy in 0usize..7) {
        let run = || {
            let mut cluster = Cluster::new(nodes()).expect("cluster");
            let mut p = PolicyKind::ALL[policy].build(Arc::new(TypicalPods::from_requests(&reqs, 0.95)));
            let mut rng = SplitMix64::new(seed);
            let order: Vec<usize> = (0..cluster.nodes().len()).collect();
            let mut decisions = Vec::new();
            for (i, r) in reqs.iter().enumerate() {
                let d = p.place(&cluster, r, &order, &mut rng);
                if let Some(pl) = &d {
                    cluster.allocate(i as u64, r, pl).expect("fits");
                }
                decisions.push(d);
            }
            decisions
        };
        prop_assert_eq!(run(), run());
    }
}
