//! The server's pass runs the core queue: preemption for priority and for a team's guarantee,
//! and the same decisions as the simulator's queue for the same jobs and cluster.

use std::collections::HashMap;

use gantry_core::PolicyKind;
use gantry_core::queue::{self, Decision, QueueWeights, QueuedJob, Usage};
use gantry_server::scheduler::{Snapshot, plan};
use gantry_store::*;
use proptest::prelude::*;

use super::scheduling::{job, node, snapshot};

/// `n` nodes of `gpus` GPUs, named n0, n1, …
fn cluster(n: usize, gpus: u32) -> Snapshot {
    let mut s = Snapshot::default();
    for k in 0..n {
        let (mut nd, mut g) = node(gpus);
        nd.id = format!("n{k}");
        for gpu in &mut g {
            gpu.node_id = nd.id.clone();
            gpu.info.uuid = format!("GPU-{k}-{}", gpu.info.index);
        }
        s.nodes.push(nd);
        s.gpus.extend(g);
    }
    s
}

/// Marks `j` running on `node`, holding its first idle GPUs there.
fn run_on(s: &mut Snapshot, mut j: Job, node: usize, first_gpu: u32) {
    j.state = JobState::Running;
    j.node_id = Some(format!("n{node}"));
    j.epoch = Some(3);
    j.started_at = Some(j.submitted_at);
    for i in first_gpu..first_gpu + j.request.gpus {
        let uuid = format!("GPU-{node}-{i}");
        j.gpu_uuids.push(uuid.clone());
        s.held.push(Allocation {
            id: s.held.len() as i64 + 1,
            job_id: j.id,
            attempt: 1,
            node_id: format!("n{node}"),
            epoch: 3,
            gpu_uuid: uuid,
            share_milli: 1000,
            memory_mib: 81920,
            released_after: None,
        });
    }
    s.active.push(j);
}

#[test]
fn a_priority_hundred_job_preempts_a_priority_zero_job_and_says_so() {
    let mut s = snapshot(1, vec![job(2, "t", 100, 1, 0)]);
    for g in &mut s.gpus {
        g.info.uuid = format!("GPU-0-{}", g.info.index);
    }
    s.nodes[0].id = "n0".into();
    s.gpus[0].node_id = "n0".into();
    run_on(&mut s, job(1, "t", 0, 1, 0), 0, 0);
    let p = plan(&s, PolicyKind::Gantry, 1);
    assert!(p.placements.is_empty(), "the GPU is still held until the victim stops");
    assert_eq!(p.preemptions.len(), 1, "{p:?}");
    assert_eq!((p.preemptions[0].job_id, p.preemptions[0].by), (1, Some(2)));
    assert!(p.preemptions[0].reason.contains("preempted by job 2 (priority 100 over 0)"), "{p:?}");
}

#[test]
fn a_job_of_equal_priority_never_preempts_a_running_one() {
    let mut s = cluster(1, 1);
    s.pending = vec![job(2, "t", 0, 1, 0)];
    run_on(&mut s, job(1, "t", 0, 1, 0), 0, 0);
    assert!(plan(&s, PolicyKind::Gantry, 1).preemptions.is_empty());
}

#[test]
fn a_team_under_its_guarantee_reclaims_gpus_a_borrower_holds() {
    let mut s = cluster(1, 2);
    s.teams = vec![Team { name: "b".into(), gpu_quota: Some(1) }];
    run_on(&mut s, job(1, "a", 0, 1, 0), 0, 0);
    run_on(&mut s, job(2, "a", 0, 1, 0), 0, 1);
    s.pending = vec![job(3, "b", 0, 1, 0)];
    s.at = 10_000;
    let p = plan(&s, PolicyKind::Gantry, 1);
    assert_eq!(p.preemptions.len(), 1, "{p:?}");
    assert!(p.preemptions[0].reason.contains("team b reclaims GPUs team a borrowed"), "{p:?}");
}

/// The simulator's view of the same snapshot: pending jobs first, then running ones, teams in
/// order of appearance, guarantees from the quotas.
fn core_input(s: &Snapshot) -> (Vec<queue::Team>, Vec<QueuedJob>, Vec<u32>) {
    let mut names: Vec<String> = Vec::new();
    let mut jobs = Vec::new();
    let index = |names: &mut Vec<String>, team: &str| -> usize {
        names.iter().position(|n| n == team).unwrap_or_else(|| {
            names.push(team.to_owned());
            names.len() - 1
        })
    };
    for j in s.pending.iter().chain(&s.active) {
        let node = j.node_id.as_ref().map(|n| n[1..].parse::<usize>().expect("node names are n<k>"));
        jobs.push(QueuedJob {
            id: jobs.len() as u64,
            team: index(&mut names, &j.team),
            priority: j.priority,
            submitted_s: j.submitted_at as f64 / 1000.0,
            gpus: j.request.gpus,
            worker_gpus: j.request.gpus,
            attained_gpu_s: 0.0,
            waited_s: (j.started_at.unwrap_or(s.at) - j.submitted_at) as f64 / 1000.0,
            held: node.map(|n| vec![(n, j.request.gpus)]).unwrap_or_default(),
            preemptible: true,
        });
    }
    let quota: HashMap<&str, u32> =
        s.teams.iter().filter_map(|t| Some((t.name.as_str(), t.gpu_quota?))).collect();
    let teams = names
        .iter()
        .map(|n| queue::Team { guaranteed_gpus: quota.get(n.as_str()).copied().unwrap_or(0), weight: 1.0 })
        .collect();
    (teams, jobs, vec![8; s.nodes.len()])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_server_starts_the_jobs_the_simulators_queue_starts_on_the_same_nodes(
        nodes in 1usize..5,
        pending in prop::collection::vec((0usize..3, 0i32..3, prop::sample::select(vec![1u32, 2, 4, 8])), 1..24),
        running in prop::collection::vec((0usize..3, 0i32..3, prop::sample::select(vec![1u32, 2, 4])), 0..6),
        quotas in prop::collection::vec(prop::option::of(0u32..12), 3),
    ) {
        let mut s = cluster(nodes, 8);
        s.at = 1_000_000;
        s.teams = quotas.iter().enumerate().map(|(t, q)| Team { name: format!("t{t}"), gpu_quota: *q }).collect();
        let mut free = vec![8u32; nodes];
        let mut id = 1;
        for (team, prio, gpus) in running {
            if let Some(node) = (0..nodes).find(|n| free[*n] >= gpus) {
                run_on(&mut s, job(id, &format!("t{team}"), prio, gpus, 0), node, 8 - free[node]);
                free[node] -= gpus;
            }
            id += 1;
        }
        for (team, prio, gpus) in pending {
            s.pending.push(job(id, &format!("t{team}"), prio, gpus, 0));
            id += 1;
        }
        let server = plan(&s, PolicyKind::Gantry, 7);
        let (teams, jobs, capacity) = core_input(&s);
        let decisions = queue::plan(&QueueWeights::default(), &teams, &jobs, &Usage::default(), &capacity);
        let all: Vec<&Job> = s.pending.iter().chain(&s.active).collect();
        let preempts: Vec<JobId> = decisions.iter().filter_map(|d| match d {
            Decision::Preempt { job, .. } => Some(all[*job as usize].id),
            _ => None,
        }).collect();
        for p in &server.preemptions {
            prop_assert!(preempts.contains(&p.job_id), "the server preempts only what the queue preempts");
        }
        prop_assume!(preempts.is_empty());
        let mut expected: Vec<(JobId, String)> = decisions.iter().filter_map(|d| match d {
            Decision::Start { job, nodes } if nodes.len() == 1 => Some((all[*job as usize].id, format!("n{}", nodes[0].0))),
            _ => None,
        }).collect();
        let mut got: Vec<(JobId, String)> = server.placements.iter().map(|p| (p.job_id, p.node_id.clone())).collect();
        expected.sort();
        got.sort();
        prop_assert_eq!(got, expected);
    }
}
