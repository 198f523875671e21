//! The kept ledger ([`super::Standing`]): changes applied one batch at a time leave it equal to
//! the ledger built afresh from the snapshot they lead to, and a pass on it decides what a pass
//! on the bare snapshot decides.

use gantry_api::model::{GpuHealth, Job, JobId, JobState};
use proptest::prelude::*;

use super::service_tests::{cluster, job};
use super::{Held, Snapshot, Standing, plan_grouped, plan_grouped_on};
use crate::{PolicyKind, SplitMix64};

/// One change of the jobs, as the store's change log reports it.
#[derive(Debug, Clone)]
enum Op {
    /// A job starts on a node: `gpus` whole GPUs, or a slice of `slice` milli-GPU when 0.
    Start { node: usize, gpus: u32, slice: u32 },
    /// The k-th active job ends.
    End(usize),
    /// The k-th active job is requeued (pending, its GPUs released).
    Requeue(usize),
    /// The k-th pending job is placed on a node with room.
    Place(usize, usize),
    /// A job is submitted.
    Submit(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..4, 0u32..3, prop::sample::select(vec![250u32, 500])).prop_map(|(node, gpus, slice)| Op::Start { node, gpus, slice }),
        2 => any::<usize>().prop_map(Op::End),
        1 => any::<usize>().prop_map(Op::Requeue),
        2 => (any::<usize>(), 0usize..4).prop_map(|(k, n)| Op::Place(k, n)),
        2 => (0u32..3).prop_map(Op::Submit),
    ]
}

/// The store the log follows: a snapshot whose held allocations never exceed a GPU.
struct World {
    s: Snapshot,
    next: JobId,
    next_alloc: i64,
}

impl World {
    fn new(sick: &[(usize, u32)]) -> Self {
        let mut s = cluster(&[4, 4, 2, 8]);
        for (node, gpu) in sick {
            let uuid = format!("n{node}-{gpu}");
            if let Some(g) = s.gpus.iter_mut().find(|g| g.info.uuid == uuid) {
                g.health = GpuHealth::Unhealthy;
            }
        }
        World { s, next: 1, next_alloc: 1 }
    }

    /// Free share of each GPU of `node` in the store's allocations.
    fn free(&self, node: usize) -> Vec<(String, u32)> {
        let prefix = format!("n{node}-");
        self.s
            .gpus
            .iter()
            .filter(|g| g.info.uuid.starts_with(&prefix))
            .map(|g| {
                let used: u32 =
                    self.s.held.iter().filter(|a| a.gpu_uuid == g.info.uuid).map(|a| a.share_milli).sum();
                (g.info.uuid.clone(), 1000 - used)
            })
            .collect()
    }

    /// Holds GPUs of `node` for `j` when they are free; whether it did.
    fn hold(&mut self, j: &mut Job, node: usize, gpus: u32, slice: u32) -> bool {
        let free = self.free(node);
        let (take, share): (Vec<String>, u32) = if gpus > 0 {
            let idle: Vec<String> = free.iter().filter(|f| f.1 == 1000).map(|f| f.0.clone()).collect();
            (idle.into_iter().take(gpus as usize).collect(), 1000)
        } else {
            (free.iter().find(|f| f.1 >= slice).map(|f| f.0.clone()).into_iter().collect(), slice)
        };
        if take.len() != gpus.max(1) as usize {
            return false;
        }
        for uuid in take {
            let memory_mib = u64::from(share) * 81_920 / 1000;
            let id = self.next_alloc;
            self.next_alloc += 1;
            self.s.held.push(Held { id, job_id: j.id, gpu_uuid: uuid, share_milli: share, memory_mib });
        }
        j.request.gpus = gpus;
        j.request.gpu_memory_mib = if gpus > 0 { 0 } else { u64::from(slice) * 81_920 / 1000 };
        j.request.cpu_milli = 1_000;
        j.node_id = Some(format!("n{node}"));
        j.state = JobState::Running;
        true
    }

    /// Carries `op` out; the jobs it changed.
    fn apply(&mut self, op: &Op) -> Vec<JobId> {
        match *op {
            Op::Start { node, gpus, slice } => {
                let mut j = job(self.next, 0, 0, 0);
                self.next += 1;
                if !self.hold(&mut j, node, gpus, slice) {
                    return Vec::new();
                }
                self.s.active.push(j.clone());
                vec![j.id]
            }
            Op::End(k) | Op::Requeue(k) if !self.s.active.is_empty() => {
                let mut j = self.s.active.remove(k % self.s.active.len());
                self.s.held.retain(|a| a.job_id != j.id);
                if matches!(op, Op::Requeue(_)) {
                    (j.state, j.node_id) = (JobState::Pending, None);
                    self.s.pending.push(j.clone());
                }
                vec![j.id]
            }
            Op::Place(k, node) if !self.s.pending.is_empty() => {
                let k = k % self.s.pending.len();
                let mut j = self.s.pending[k].clone();
                let (gpus, slice) = (j.request.gpus, 500);
                if !self.hold(&mut j, node, gpus, slice) {
                    return Vec::new();
                }
                self.s.pending.remove(k);
                self.s.active.push(j.clone());
                vec![j.id]
            }
            Op::Submit(gpus) => {
                let j = job(self.next, gpus, if gpus == 0 { 20_480 } else { 0 }, 0);
                self.next += 1;
                self.s.pending.push(j.clone());
                vec![j.id]
            }
            _ => Vec::new(),
        }
    }

    /// What the change log carries for `changed`: the rows as they are now, their allocations.
    fn log(&self, changed: &[JobId]) -> (Vec<Job>, Vec<Held>) {
        let rows = self.s.pending.iter().chain(&self.s.active).filter(|j| changed.contains(&j.id)).cloned();
        let held = self.s.held.iter().filter(|a| changed.contains(&a.job_id)).cloned();
        (rows.collect(), held.collect())
    }
}

fn decided(s: &Snapshot, kept: Option<&Standing>) -> String {
    let mut rng = SplitMix64::new(7);
    let p = match kept {
        Some(kept) => plan_grouped_on(s, kept, PolicyKind::Gantry, &mut rng),
        None => plan_grouped(s, PolicyKind::Gantry, &mut rng),
    };
    format!("{:?} {:?} {:?} {:?}", p.placements, p.gangs, p.preemptions, p.waiting)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_kept_ledger_applied_change_by_change_equals_one_built_afresh_and_plans_the_same(
        sick in prop::collection::vec((0usize..4, 0u32..4), 0..3),
        batches in prop::collection::vec(prop::collection::vec(op(), 1..4), 1..24),
    ) {
        let mut world = World::new(&sick);
        let mut kept = Standing::build(&world.s);
        for batch in &batches {
            let mut changed: Vec<JobId> = batch.iter().flat_map(|op| world.apply(op)).collect();
            changed.sort_unstable();
            changed.dedup();
            let (rows, held) = world.log(&changed);
            kept.apply(&changed, &rows, &held);
            prop_assert!(kept == Standing::build(&world.s), "after {batch:?}");
        }
        prop_assert_eq!(decided(&world.s, Some(&kept)), decided(&world.s, None));
    }
}

#[test]
fn a_job_ending_on_a_node_with_a_sick_gpu_leaves_that_gpu_blocked() {
    let mut world = World::new(&[(0, 1)]);
    let ids = world.apply(&Op::Start { node: 0, gpus: 2, slice: 0 });
    let mut kept = Standing::build(&world.s);
    let ended = world.apply(&Op::End(0));
    assert_eq!(ids, ended);
    let (rows, held) = world.log(&ended);
    kept.apply(&ended, &rows, &held);
    let n = &kept.cluster.nodes()[0];
    assert_eq!(n.gpu_free, vec![1000, 0, 1000, 1000], "the sick GPU takes nothing new once its job ended");
    assert!(kept == Standing::build(&world.s));
}
