//! Property: whatever order placements, exits, losses and re-registrations come in, the store
//! never lets a GPU's held share or memory exceed it (checked by replaying the history).

use gantry_store::*;
use proptest::prelude::*;

use crate::{new_job, open, register};

#[derive(Debug, Clone)]
enum Op {
    Submit { gpus: u32, slice_mib: u64 },
    Place { job: usize, first_gpu: u32, slice: bool },
    Exit { job: usize },
    LoseNode,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..3, prop_oneof![Just(0u64), Just(20_000), Just(40_000), Just(70_000)])
            .prop_map(|(gpus, slice_mib)| Op::Submit { gpus, slice_mib }),
        (0usize..12, 0u32..3, any::<bool>()).prop_map(|(job, first_gpu, slice)| Op::Place {
            job,
            first_gpu,
            slice
        }),
        (0usize..12).prop_map(|job| Op::Exit { job }),
        Just(Op::LoseNode),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn no_sequence_of_operations_over_allocates_a_gpu(ops in proptest::collection::vec(op(), 1..40)) {
        let (_dir, store) = open();
        let mut epoch = register(&*store, 3);
        let mut jobs: Vec<JobId> = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Submit { gpus, slice_mib } => {
                    let memory = if gpus == 0 { slice_mib.max(1) } else { 0 };
                    jobs.push(store.submit(&new_job(&format!("k{i}"), gpus, memory)).expect("submit").0);
                }
                Op::Place { job, first_gpu, slice } => {
                    let Some(&id) = jobs.get(job) else { continue };
                    let grants = (0..2u32)
                        .map(|k| Grant {
                            uuid: format!("GPU-{}", (first_gpu + k) % 3),
                            share_milli: if slice { 300 } else { 1000 },
                            memory_mib: if slice { 30_000 } else { 81_920 },
                        })
                        .take(if slice { 1 } else { 2 })
                        .collect();
                    // Refusals are fine; over-allocation is not.
                    let _ = store.place(&Placement { job_id: id, node_id: "n1".into(), epoch, grants, at: 1 });
                }
                Op::Exit { job } => {
                    let Some(j) = jobs.get(job).and_then(|id| store.job(*id).expect("get")) else { continue };
                    let exit = Some(JobExit { exit_code: Some(0), reason: None, timed_out: false });
                    let report = JobReport { job_id: j.id, attempt: j.attempt, exit };
                    let hb = Heartbeat { logs: vec![], node_id: "n1".into(), epoch, gpus: vec![], jobs: vec![report] };
                    store.heartbeat(&hb, 2).expect("heartbeat");
                }
                Op::LoseNode => {
                    store.expire_nodes(i64::MAX, 3).expect("expire");
                    epoch = register(&*store, 3);
                }
            }
        }
        let history = store.allocations(false).expect("history");
        let gpus = store.gpus().expect("gpus");
        prop_assert!(history::conflicts(&history, &gpus).is_empty());
    }
}
