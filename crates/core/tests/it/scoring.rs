//! The optimised scorers (node classes, cached scores, bounds) against the straightforward ones:
//! on random clusters, requests, releases, cordons and node orders, `fgd` and `gantry` must
//! choose exactly the node and GPUs that scoring every node from scratch chooses (ties to the
//! earliest node in the order).

use std::sync::Arc;

use gantry_core::frag::TypicalPods;
use gantry_core::placement::{Fgd, Gantry, GantryParams};
use gantry_core::rng::permutation;
use gantry_core::{Cluster, ModelSet, NodeSpec, Policy, Request, SplitMix64};
use proptest::prelude::*;

/// A few node templates, so that many nodes start identical and classes form.
fn fleet(templates: &[usize]) -> Vec<NodeSpec> {
    let kinds: [(u64, u32, &str, u64); 5] = [
        (32_000, 8, "G2", 16_000),
        (96_000, 8, "G2", 16_000),
        (16_000, 2, "T4", 16_000),
        (64_000, 4, "V100", 0),
        (8_000, 0, "", 0),
    ];
    templates
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let (cpu, gpus, model, gmem) = kinds[*t];
            NodeSpec {
                name: format!("n{i}"),
                cpu_milli: cpu,
                memory_mib: 262_144,
                gpus,
                gpu_model: (gpus > 0).then(|| model.to_owned()),
                gpu_memory_mib: gmem,
            }
        })
        .collect()
}

fn request() -> impl Strategy<Value = Request> {
    (
        prop_oneof![Just(0u64), Just(4_000), Just(8_000), 1u64..40_000],
        prop_oneof![Just(0u32), Just(1), Just(1), Just(2), Just(4), Just(8)],
        prop_oneof![Just(1000u32), Just(250), Just(500), 1u32..=1000],
        prop_oneof![Just(0u64), 0u64..9_000],
        any::<bool>(),
    )
        .prop_map(|(cpu, gpus, milli, gmem, pinned)| {
            let milli = if gpus > 1 { 1000 } else { milli };
            let gmem = if gpus == 1 && milli < 1000 { gmem } else { 0 };
            let models = if pinned { ModelSet::Only(0b1) } else { ModelSet::Any };
            Request::new(cpu, 1024, gpus, milli, gmem, models).expect("generated requests are valid")
        })
}

/// One step of the scenario.
#[derive(Debug, Clone)]
enum Step {
    Place(Request),
    Release(usize),
    Cordon(usize, bool),
    Reorder(u64, bool),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => request().prop_map(Step::Place),
        2 => any::<usize>().prop_map(Step::Release),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(n, s)| Step::Cordon(n, s)),
        1 => (any::<u64>(), any::<bool>()).prop_map(|(seed, subset)| Step::Reorder(seed, subset)),
    ]
}

/// The optimised and the straightforward form of one policy.
trait Pair {
    fn fast(&mut self, c: &Cluster, r: &Request, order: &[usize]) -> Option<gantry_core::Placement>;
    fn slow(&mut self, c: &Cluster, r: &Request, order: &[usize]) -> Option<gantry_core::Placement>;
}

impl Pair for (Fgd, Fgd) {
    fn fast(&mut self, c: &Cluster, r: &Request, order: &[usize]) -> Option<gantry_core::Placement> {
        self.0.place(c, r, order, &mut SplitMix64::new(0))
    }
    fn slow(&mut self, c: &Cluster, r: &Request, order: &[usize]) -> Option<gantry_core::Placement> {
        self.1.place_exhaustive(c, r, order)
    }
}

impl Pair for (Gantry, Gantry) {
    fn fast(&mut self, c: &Cluster, r: &Request, order: &[usize]) -> Option<gantry_core::Placement> {
        self.0.place(c, r, order, &mut SplitMix64::new(0))
    }
    fn slow(&mut self, c: &Cluster, r: &Request, order: &[usize]) -> Option<gantry_core::Placement> {
        self.1.place_exhaustive(c, r, order)
    }
}

/// Runs the scenario through both forms and requires the same decision at every step.
fn same_decisions(pair: &mut dyn Pair, templates: &[usize], steps: &[Step]) -> Result<(), TestCaseError> {
    let mut cluster = Cluster::new(fleet(templates)).expect("distinct names");
    let mut order: Vec<usize> = (0..cluster.nodes().len()).collect();
    let mut held: Vec<u64> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        match s {
            Step::Place(r) => {
                let fast = pair.fast(&cluster, r, &order);
                let slow = pair.slow(&cluster, r, &order);
                prop_assert_eq!(&fast, &slow, "step {} request {:?}", i, r);
                if let Some(p) = fast {
                    cluster.allocate(i as u64, r, &p).expect("a policy only proposes what fits");
                    held.push(i as u64);
                }
            }
            Step::Release(k) if !held.is_empty() => {
                let id = held.swap_remove(k % held.len());
                cluster.release(id).expect("held");
            }
            Step::Release(_) => {}
            Step::Cordon(n, on) => cluster.set_schedulable(n % templates.len(), *on).expect("node exists"),
            Step::Reorder(seed, subset) => {
                order = permutation(templates.len(), &mut SplitMix64::new(*seed));
                if *subset {
                    order.truncate(templates.len().div_ceil(2));
                }
            }
        }
    }
    Ok(())
}

fn typical(steps: &[Step]) -> Arc<TypicalPods> {
    let mut reqs: Vec<Request> =
        steps.iter().filter_map(|s| if let Step::Place(r) = s { Some(*r) } else { None }).collect();
    // Multi-GPU shapes, so that Gantry's k-block reservation is in play.
    reqs.extend([8, 4, 2].map(|g| Request::new(8_000, 0, g, 1000, 0, ModelSet::Any).expect("valid")));
    Arc::new(TypicalPods::from_requests(&reqs, 0.95))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn optimised_fgd_places_exactly_where_scoring_every_node_does(
        templates in prop::collection::vec(0usize..5, 1..40),
        steps in prop::collection::vec(step(), 1..120),
    ) {
        let t = typical(&steps);
        same_decisions(&mut (Fgd::new(t.clone()), Fgd::new(t)), &templates, &steps)?;
    }

    #[test]
    fn optimised_gantry_places_exactly_where_scoring_every_node_does(
        templates in prop::collection::vec(0usize..5, 1..40),
        steps in prop::collection::vec(step(), 1..120),
        reservation in prop_oneof![Just(0.05), Just(0.0), Just(1.0), Just(-0.5)],
        stranding in prop_oneof![Just(0.4), Just(0.0), Just(2.0)],
    ) {
        let t = typical(&steps);
        let params = GantryParams { reservation_weight: reservation, stranding_weight: stranding, ..GantryParams::default() };
        same_decisions(&mut (Gantry::with_params(t.clone(), params), Gantry::with_params(t, params)), &templates, &steps)?;
    }
}

#[test]
fn optimised_gantry_stays_exact_after_the_ledger_drops_old_journal_entries() {
    // More changes between two decisions than the journal keeps (a cordon is recorded even when
    // it changes nothing), so the policy must fall back to looking at every node.
    let templates = [0, 0, 1, 2];
    let whole = Request::new(4_000, 0, 1, 1000, 0, ModelSet::Any).expect("valid");
    let slice = Request::new(2_000, 0, 1, 300, 0, ModelSet::Any).expect("valid");
    let mut steps = Vec::new();
    for k in 0..12 {
        steps.extend([Step::Place(whole), Step::Place(slice), Step::Release(k * 7)]);
        steps.push(Step::Cordon(k, k % 4 == 3));
        steps.extend((0..5_000).map(|i| Step::Cordon(i, true)));
    }
    let t = typical(&steps);
    same_decisions(&mut (Gantry::new(t.clone()), Gantry::new(t)), &templates, &steps)
        .expect("same decisions");
}
