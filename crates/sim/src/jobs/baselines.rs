//! The published baselines: `fifo`, `srtf` (an oracle bound) and `tiresias` exactly as the Pollux
//! artifact implements it (`tiresias.py`).
//!
//! **Tiresias** (discretized two-dimensional least-attained-service). Two FIFO queues; a job
//! enters the tail of Q0 when first seen and moves to the tail of Q1 once its running wall time
//! × requested GPUs reaches 16 GPU-hours (restarts and idle tails count); it never returns.
//! Each round walks Q0 then Q1 with a budget of all GPUs: a job that fits by GPU count runs, one
//! that does not is preempted or stays pending, and later jobs may still run (skip-ahead). Jobs
//! that keep running keep exactly their GPUs; each newly admitted job then takes GPUs node by
//! node from the node with the most free GPUs (lowest index on ties), so it may spread.
//! Starvation promotion is off, as in the artifact.
//!
//! **fifo**: arrival order, no preemption, strict head-of-line blocking (the first job that does
//! not fit stops admission), most-free-node placement.
//!
//! **srtf**: preemptive shortest *remaining service* first (remaining seconds alone on a packed
//! placement × GPUs), with skip-ahead and the same placement; it reads the simulator's oracle, so
//! it is a bound to compare against, not a policy one could deploy.

use std::collections::HashMap;

use super::engine::{ClusterShape, JobPolicy, JobView};

/// Tiresias's queue threshold: 16 GPU-hours in GPU-seconds.
pub const TIRESIAS_THRESHOLD_GPU_S: u64 = 57_600;

/// Free GPUs per node after the allocations of `kept` jobs.
fn free_after(shape: &ClusterShape, kept: &[&[usize]]) -> Vec<u32> {
    let mut free = vec![shape.gpus_per_node; shape.nodes as usize];
    for alloc in kept {
        for node in *alloc {
            free[*node] = free[*node].saturating_sub(1);
        }
    }
    free
}

/// Takes `gpus` GPUs node by node, each time from the node with the most free GPUs (lowest index
/// on ties): Python's `Counter.most_common(1)` over nodes that had free GPUs to begin with.
pub fn most_free_first(free: &mut [u32], gpus: u32) -> Vec<usize> {
    let mut out = Vec::with_capacity(gpus as usize);
    let mut need = gpus;
    while need > 0 {
        let Some((node, count)) = free
            .iter()
            .enumerate()
            .filter(|(_, f)| **f > 0)
            .max_by_key(|(i, f)| (**f, std::cmp::Reverse(*i)))
        else {
            break;
        };
        let take = (*count).min(need);
        out.extend(std::iter::repeat_n(node, take as usize));
        free[node] -= take;
        need -= take;
    }
    out
}

/// Admission in `order` (indices into `jobs`) with skip-ahead, then placement: kept jobs keep
/// their GPUs, admitted jobs without GPUs get most-free-first. `strict` stops at the first job
/// that does not fit (and never preempts, so running jobs are walked first).
fn admit_and_place(
    jobs: &[JobView<'_>],
    order: &[usize],
    shape: &ClusterShape,
    strict: bool,
) -> Vec<Vec<usize>> {
    let mut budget = shape.total_gpus();
    let mut running = vec![false; jobs.len()];
    for k in order {
        let need = jobs[*k].row.replicas;
        if need <= budget {
            running[*k] = true;
            budget -= need;
        } else if strict {
            break;
        }
    }
    let kept: Vec<&[usize]> = (0..jobs.len()).filter(|k| running[*k]).map(|k| jobs[k].alloc).collect();
    let mut free = free_after(shape, &kept);
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    for k in order {
        if !running[*k] {
            continue;
        }
        out[*k] = if jobs[*k].alloc.is_empty() {
            most_free_first(&mut free, jobs[*k].row.replicas)
        } else {
            jobs[*k].alloc.to_vec()
        };
    }
    out
}

/// Strict FIFO without preemption.
#[derive(Debug, Default)]
pub struct Fifo;

impl JobPolicy for Fifo {
    fn schedule(&mut self, _now: u64, jobs: &[JobView<'_>], shape: &ClusterShape) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        // Running jobs first (they are never preempted), then the queue in arrival order.
        order.sort_by_key(|k| (jobs[*k].alloc.is_empty(), jobs[*k].id));
        admit_and_place(jobs, &order, shape, true)
    }
}

/// Preemptive shortest-remaining-service first, with oracle knowledge of remaining time.
#[derive(Debug, Default)]
pub struct Srtf;

impl JobPolicy for Srtf {
    fn schedule(&mut self, _now: u64, jobs: &[JobView<'_>], shape: &ClusterShape) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        let service = |k: usize| jobs[k].oracle_remaining_s * f64::from(jobs[k].row.replicas);
        order.sort_by(|a, b| service(*a).total_cmp(&service(*b)).then(jobs[*a].id.cmp(&jobs[*b].id)));
        admit_and_place(jobs, &order, shape, false)
    }
}

#[derive(Debug, Clone, Copy)]
struct TiresiasJob {
    running: bool,
    executed: u64,
    last_check: u64,
}

/// Tiresias as the Pollux artifact implements it.
#[derive(Debug, Default)]
pub struct Tiresias {
    q0: Vec<usize>,
    q1: Vec<usize>,
    state: HashMap<usize, TiresiasJob>,
}

impl JobPolicy for Tiresias {
    fn schedule(&mut self, now: u64, jobs: &[JobView<'_>], shape: &ClusterShape) -> Vec<Vec<usize>> {
        let index: HashMap<usize, usize> = jobs.iter().enumerate().map(|(k, j)| (j.id, k)).collect();
        self.q0.retain(|id| index.contains_key(id));
        self.q1.retain(|id| index.contains_key(id));
        self.state.retain(|id, _| index.contains_key(id));
        for job in jobs {
            if !self.state.contains_key(&job.id) {
                self.q0.push(job.id);
                self.state.insert(job.id, TiresiasJob { running: false, executed: 0, last_check: now });
            }
        }
        for job in jobs {
            let s = self.state.get_mut(&job.id).expect("every active job was registered above");
            if s.running {
                s.executed += now - s.last_check;
                let demote = s.executed * u64::from(job.row.replicas) >= TIRESIAS_THRESHOLD_GPU_S;
                if demote && let Some(pos) = self.q0.iter().position(|id| *id == job.id) {
                    self.q0.remove(pos);
                    self.q1.push(job.id);
                }
            }
            s.last_check = now;
        }
        let order: Vec<usize> = self.q0.iter().chain(&self.q1).map(|id| index[id]).collect();
        let out = admit_and_place(jobs, &order, shape, false);
        for (k, alloc) in out.iter().enumerate() {
            if let Some(s) = self.state.get_mut(&jobs[k].id) {
                s.running = !alloc.is_empty();
            }
        }
        out
    }
}
