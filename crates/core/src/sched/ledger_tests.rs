//! Every running job's requests are on the ledger, with or without GPUs (issue 37, point 3):
//! over random sequences of submissions, passes, ends, deletions and restarts (the ledger built
//! afresh, as a new leader does), the jobs running on a node never ask for more CPU, memory or
//! GPU than it has. A CPU-only job holds no GPU row, and the ledger used to forget it the pass
//! after it started: ten 1.5-CPU jobs ran at once on a 2-CPU node.

use gantry_api::model::{Job, JobId, JobState};
use proptest::prelude::*;

use super::service_tests::{cluster, job};
use super::{Held, Snapshot, Standing, plan_grouped_on};
use crate::{PolicyKind, SplitMix64};

const NODE_CPU: u64 = 2_000;
const NODE_MEMORY: u64 = 24_000;

#[derive(Debug, Clone)]
enum Op {
    /// A job asking for `gpus` whole GPUs (0: CPU only), `cpu` milli-CPU and `memory` MiB.
    Submit { gpus: u32, cpu: u64, memory: u64 },
    /// A scheduling pass, its placements and preemptions carried out.
    Pass,
    /// The k-th running job ends.
    End(usize),
    /// The k-th job (pending or running) is deleted, as a deleted service's replicas are.
    Delete(usize),
    /// The scheduler restarts: its ledger is built again from the rows.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..3, 0u64..5, 0u64..5).prop_map(|(gpus, c, m)| Op::Submit { gpus, cpu: c * 500, memory: m * 5_000 }),
        4 => Just(Op::Pass),
        2 => any::<usize>().prop_map(Op::End),
        1 => any::<usize>().prop_map(Op::Delete),
        1 => Just(Op::Restart),
    ]
}

struct World {
    s: Snapshot,
    kept: Standing,
    next: JobId,
    next_alloc: i64,
}

impl World {
    fn new() -> Self {
        let mut s = cluster(&[2, 1]);
        for n in &mut s.nodes {
            (n.cpu_milli, n.memory_mib) = (NODE_CPU, NODE_MEMORY);
        }
        let kept = Standing::build(&s);
        World { s, kept, next: 1, next_alloc: 1 }
    }

    /// Tells the kept ledger what changed, as the change log does.
    fn log(&mut self, changed: &[JobId]) {
        let rows: Vec<Job> = self
            .s
            .pending
            .iter()
            .chain(&self.s.active)
            .filter(|j| changed.contains(&j.id))
            .cloned()
            .collect();
        let held: Vec<Held> = self.s.held.iter().filter(|a| changed.contains(&a.job_id)).cloned().collect();
        self.kept.apply(changed, &rows, &held);
    }

    fn remove_active(&mut self, id: JobId) {
        self.s.active.retain(|j| j.id != id);
        self.s.held.retain(|a| a.job_id != id);
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Submit { gpus, cpu, memory } => {
                let mut j = job(self.next, gpus, 0, 0);
                self.next += 1;
                (j.request.cpu_milli, j.request.memory_mib) = (cpu, memory);
                self.s.pending.push(j.clone());
                self.log(&[j.id]);
            }
            Op::Pass => {
                let mut rng = SplitMix64::new(11);
                let plan = plan_grouped_on(&self.s, &self.kept, PolicyKind::Gantry, &mut rng);
                let mut changed = Vec::new();
                for p in &plan.preemptions {
                    if let Some(mut j) = self.s.active.iter().find(|j| j.id == p.job_id).cloned() {
                        self.remove_active(j.id);
                        (j.state, j.node_id) = (JobState::Pending, None);
                        self.s.pending.push(j);
                        changed.push(p.job_id);
                    }
                }
                for p in plan.placements.iter().chain(&plan.borrows) {
                    let Some(k) = self.s.pending.iter().position(|j| j.id == p.job_id) else { continue };
                    let mut j = self.s.pending.remove(k);
                    (j.state, j.node_id) = (JobState::Running, Some(p.node_id.clone()));
                    j.gpu_uuids = p.grants.iter().map(|g| g.uuid.clone()).collect();
                    for g in &p.grants {
                        let id = self.next_alloc;
                        self.next_alloc += 1;
                        let (share_milli, memory_mib) = (g.share_milli, g.memory_mib);
                        self.s.held.push(Held {
                            id,
                            job_id: j.id,
                            gpu_uuid: g.uuid.clone(),
                            share_milli,
                            memory_mib,
                        });
                    }
                    self.s.active.push(j);
                    changed.push(p.job_id);
                }
                changed.sort_unstable();
                changed.dedup();
                self.log(&changed);
            }
            Op::End(k) if !self.s.active.is_empty() => {
                let id = self.s.active[k % self.s.active.len()].id;
                self.remove_active(id);
                self.log(&[id]);
            }
            Op::Delete(k) => {
                let all: Vec<JobId> = self.s.pending.iter().chain(&self.s.active).map(|j| j.id).collect();
                if let Some(&id) = all.get(k % all.len().max(1)) {
                    self.s.pending.retain(|j| j.id != id);
                    self.remove_active(id);
                    self.log(&[id]);
                }
            }
            Op::Restart => self.kept = Standing::build(&self.s),
            Op::End(_) => {}
        }
    }

    /// What the running jobs ask of each node, against what it has.
    fn overcommitted(&self) -> Option<String> {
        for n in &self.s.nodes {
            let on: Vec<&Job> =
                self.s.active.iter().filter(|j| j.node_id.as_deref() == Some(&n.id)).collect();
            let cpu: u64 = on.iter().map(|j| j.request.cpu_milli).sum();
            let memory: u64 = on.iter().map(|j| j.request.memory_mib).sum();
            if cpu > n.cpu_milli || memory > n.memory_mib {
                return Some(format!(
                    "{}: {cpu} mCPU, {memory} MiB of {} and {}",
                    n.id, n.cpu_milli, n.memory_mib
                ));
            }
        }
        for g in &self.s.gpus {
            let used: u32 =
                self.s.held.iter().filter(|a| a.gpu_uuid == g.info.uuid).map(|a| a.share_milli).sum();
            if used > 1000 {
                return Some(format!("{}: {used} milli-GPU", g.info.uuid));
            }
        }
        None
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn the_jobs_running_on_a_node_never_ask_for_more_than_it_has(ops in prop::collection::vec(op(), 1..48)) {
        let mut world = World::new();
        for (i, op) in ops.iter().enumerate() {
            world.apply(op);
            if let Some(over) = world.overcommitted() {
                prop_assert!(false, "after {:?}: {over}", &ops[..=i]);
            }
            prop_assert!(world.kept == Standing::build(&world.s), "the kept ledger drifted after {:?}", &ops[..=i]);
        }
    }
}

#[test]
fn ten_one_and_a_half_cpu_jobs_on_a_two_cpu_node_run_one_at_a_time() {
    let mut world = World::new();
    world.s.nodes.truncate(1);
    world.s.gpus.retain(|g| g.node_id == "n0");
    world.kept = Standing::build(&world.s);
    for _ in 0..10 {
        world.apply(&Op::Submit { gpus: 0, cpu: 1_500, memory: 2_000 });
    }
    for _ in 0..5 {
        world.apply(&Op::Pass);
        assert_eq!(world.s.active.len(), 1, "one at a time: {:?}", world.overcommitted());
    }
    world.apply(&Op::Restart);
    world.apply(&Op::Pass);
    assert_eq!(world.s.active.len(), 1, "and after a restart");
    world.apply(&Op::End(0));
    world.apply(&Op::Pass);
    assert_eq!(world.s.active.len(), 1, "the next starts once the first ended");
}
