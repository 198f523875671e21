use super::*;
use crate::resources::{ModelSet, NodeSpec, WHOLE_GPU};
use crate::rng::SplitMix64;

fn node(name: &str, cpu: u64, gpus: u32) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        cpu_milli: cpu,
        memory_mib: 1 << 20,
        gpus,
        gpu_model: Some("G2".into()),
        gpu_memory_mib: 0,
    }
}

fn slice(milli: u32) -> Request {
    Request::new(1000, 1024, 1, milli, 0, ModelSet::Any).expect("valid request")
}

#[test]
fn ties_go_to_the_earliest_node_in_the_order() {
    let cluster = Cluster::new(vec![node("a", 8000, 2), node("b", 8000, 2)]).expect("cluster");
    let mut rng = SplitMix64::new(1);
    let req = slice(500);
    let p = PolicyKind::Packing.build(Arc::default()).place(&cluster, &req, &[1, 0], &mut rng);
    assert_eq!(p.map(|p| p.node), Some(1));
}

#[test]
fn best_fit_gpu_takes_the_fullest_gpu_that_fits() {
    let mut cluster = Cluster::new(vec![node("a", 64000, 4)]).expect("cluster");
    cluster.allocate(1, &slice(600), &Placement { node: 0, gpus: vec![2] }).expect("fits");
    cluster.allocate(2, &slice(300), &Placement { node: 0, gpus: vec![1] }).expect("fits");
    let gpu = best_fit_gpu(&cluster.nodes()[0], &slice(300));
    assert_eq!(gpu, Some(2));
}

#[test]
fn whole_gpu_requests_take_the_lowest_idle_gpus() {
    let mut cluster = Cluster::new(vec![node("a", 64000, 4)]).expect("cluster");
    cluster.allocate(1, &slice(100), &Placement { node: 0, gpus: vec![0] }).expect("fits");
    let req = Request::new(1000, 0, 2, 1000, 0, ModelSet::Any).expect("valid");
    for kind in PolicyKind::ALL {
        let mut policy = kind.build(Arc::new(TypicalPods::from_requests(&[req, slice(500)], 0.95)));
        let p = policy.place(&cluster, &req, &[0], &mut SplitMix64::new(2)).expect("fits");
        assert_eq!(p.gpus, vec![1, 2], "{}", kind.as_str());
    }
}

#[test]
fn no_policy_places_what_does_not_fit() {
    let cluster = Cluster::new(vec![node("a", 1000, 1)]).expect("cluster");
    let too_big = Request::new(2000, 0, 1, 100, 0, ModelSet::Any).expect("valid");
    for kind in PolicyKind::ALL {
        let mut policy = kind.build(Arc::default());
        assert_eq!(
            policy.place(&cluster, &too_big, &[0], &mut SplitMix64::new(3)),
            None,
            "{}",
            kind.as_str()
        );
    }
}

#[test]
fn fgd_prefers_the_gpu_whose_remainder_stays_usable() {
    // Typical pods all want 500 milli. On GPU 0 (700 free) a 500 slice would leave a 200
    // sliver; on GPU 1 (500 free) or the idle GPU 2 nothing is wasted, and GPU 1 comes first.
    let mut cluster = Cluster::new(vec![node("a", 64000, 3)]).expect("cluster");
    cluster.allocate(1, &slice(300), &Placement { node: 0, gpus: vec![0] }).expect("fits");
    cluster.allocate(2, &slice(500), &Placement { node: 0, gpus: vec![1] }).expect("fits");
    let typical = Arc::new(TypicalPods::from_requests(&[slice(500)], 0.95));
    let mut fgd = PolicyKind::Fgd.build(typical);
    let p = fgd.place(&cluster, &slice(500), &[0], &mut SplitMix64::new(4)).expect("fits");
    assert_eq!(p.gpus, vec![1]);
}

#[test]
fn policy_names_parse_back() {
    for kind in PolicyKind::ALL {
        assert_eq!(kind.as_str().parse::<PolicyKind>(), Ok(kind));
    }
    assert!("firstfit".parse::<PolicyKind>().is_err());
}

fn one_gpu(placement: crate::resources::Preference) -> Request {
    let req = Request::new(1000, 1024, 1, WHOLE_GPU, 0, ModelSet::Any).expect("valid request");
    Request { placement, ..req }
}

/// Four 1-GPU requests on two 4-GPU nodes, placed one after another by `kind`; GPUs per node.
fn four_on_two(kind: PolicyKind, placement: crate::resources::Preference) -> Vec<usize> {
    let mut cluster = Cluster::new(vec![node("a", 64000, 4), node("b", 64000, 4)]).expect("cluster");
    let typical = Arc::new(crate::frag::TypicalPods::from_requests(&[one_gpu(placement)], 0.95));
    let mut policy = kind.build(typical);
    let mut rng = SplitMix64::new(7);
    for id in 0..4 {
        let req = one_gpu(placement);
        let p = policy.place(&cluster, &req, &[0, 1], &mut rng).expect("room");
        cluster.allocate(id, &req, &p).expect("fits");
    }
    cluster.nodes().iter().map(|n| n.gpu_free.len() - n.idle_gpus()).collect()
}

#[test]
fn spread_requests_land_two_and_two_where_packing_puts_all_four_on_one_node() {
    use crate::resources::Preference::{Pack, Spread};
    for kind in [PolicyKind::Gantry, PolicyKind::Fgd, PolicyKind::Packing, PolicyKind::Bestfit] {
        assert_eq!(four_on_two(kind, Pack), [4, 0], "{kind:?} packs");
        assert_eq!(four_on_two(kind, Spread), [2, 2], "{kind:?} honours a spread request");
    }
}

#[test]
fn a_spread_cpu_only_request_leaves_the_cpu_that_idle_gpus_need() {
    // a: 8 idle GPUs, 64 cores free; b: CPU only, 16 cores free. Balancing free CPU alone picks
    // a and takes cores its GPUs' jobs need; the CPU beyond the GPUs' share picks b.
    let cluster = Cluster::new(vec![node("a", 64000, 8), node("b", 16000, 0)]).expect("cluster");
    let req = Request { placement: crate::resources::Preference::Spread, ..Request::cpu_only(4000, 1024) };
    let p = Spread.place(&cluster, &req, &[0, 1], &mut SplitMix64::new(1)).expect("room");
    assert_eq!(p.node, 1);
}

#[test]
fn a_spread_slice_takes_the_least_used_gpu_of_the_least_allocated_node() {
    let mut cluster = Cluster::new(vec![node("a", 64000, 2), node("b", 64000, 2)]).expect("cluster");
    cluster.allocate(1, &slice(500), &Placement { node: 0, gpus: vec![0] }).expect("fits");
    cluster.allocate(2, &slice(300), &Placement { node: 1, gpus: vec![0] }).expect("fits");
    cluster.allocate(3, &slice(100), &Placement { node: 1, gpus: vec![1] }).expect("fits");
    let req = Request { placement: crate::resources::Preference::Spread, ..slice(200) };
    let p = Spread.place(&cluster, &req, &[0, 1], &mut SplitMix64::new(1)).expect("room");
    assert_eq!((p.node, p.gpus), (1, vec![1]), "a has 1.5 GPUs free, b 1.6: b, and its GPU with 0.9 free");
}

#[test]
fn a_request_limited_to_tagged_nodes_never_lands_elsewhere() {
    let mut cluster = Cluster::new(vec![node("a", 64000, 4), node("b", 64000, 4)]).expect("cluster");
    cluster.set_tags(1, 0b1).expect("node b");
    let req = Request { nodes: crate::resources::NodeSet::Only(0b1), ..one_gpu(Default::default()) };
    for kind in PolicyKind::ALL {
        let typical = Arc::new(crate::frag::TypicalPods::from_requests(&[req], 0.95));
        let p = kind.build(typical).place(&cluster, &req, &[0, 1], &mut SplitMix64::new(3));
        assert_eq!(p.map(|p| p.node), Some(1), "{kind:?}");
    }
    assert_eq!(
        cluster.nodes()[0].why_not(&req),
        Some("not in the job's pool or does not match its node selector")
    );
}
