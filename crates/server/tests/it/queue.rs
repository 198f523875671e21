//! The server's pass runs the core queue: preemption for priority and for a team's guarantee,
//! and the same decisions as the simulator's queue for the same jobs and cluster.

use std::collections::HashMap;

use gantry_core::PolicyKind;
use gantry_core::queue::{self, Decision, QueuedJob, Usage};
use gantry_core::sched::GangPlace;
use gantry_server::scheduler::{QueueInput, Snapshot, held, plan};
use gantry_store::*;
use proptest::prelude::*;

use super::scheduling::{hold, job, node, snapshot};

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
fn run_on(s: &mut Snapshot, j: Job, node: usize, first_gpu: u32) {
    let (width, started_at) = (j.request.gpus, j.submitted_at);
    hold(s, j, node, first_gpu, width, started_at);
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
    s.teams = vec![Team { name: "b".into(), gpu_quota: Some(1), ..Team::default() }];
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
        s.teams = quotas.iter().enumerate().map(|(t, q)| Team { name: format!("t{t}"), gpu_quota: *q, ..Team::default() }).collect();
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
        let decisions = queue::plan(&QueueInput::default().weights, &teams, &jobs, &Usage::default(), &capacity);
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

/// A pending gang of `replicas` workers of `gpus` GPUs (ids `id`, then `id + 1 + rank`).
fn gang(s: &mut Snapshot, id: JobId, team: &str, priority: i32, replicas: u32, gpus: u32) {
    let mut g = job(id, team, priority, gpus, 0);
    g.gang = Some(Gang { id, replicas, rank: None, local_rank: None, master_addr: None, master_port: None });
    for rank in 0..replicas {
        let mut w = job(id + 1 + i64::from(rank), team, priority, gpus, 0);
        w.gang = Some(Gang { rank: Some(rank), ..g.gang.clone().expect("set above") });
        s.pending.push(w);
    }
    s.pending.push(g);
}

/// Marks the pending gang `id` running where its placement put it.
fn run_gang(s: &mut Snapshot, id: JobId, placement: &GangPlace) {
    let mut moved: Vec<Job> = Vec::new();
    s.pending.retain(|j| {
        let mine = j.id == id || j.gang.as_ref().is_some_and(|g| g.id == id);
        if mine {
            moved.push(j.clone());
        }
        !mine
    });
    for mut j in moved {
        j.state = JobState::Running;
        j.started_at = Some(j.submitted_at);
        if let Some(p) = placement.workers.iter().find(|p| p.job_id == j.id) {
            j.node_id = Some(p.node_id.clone());
            j.epoch = Some(p.epoch);
            for g in &p.grants {
                j.gpu_uuids.push(g.uuid.clone());
                s.held.push(held(&Allocation {
                    id: s.held.len() as i64 + 1,
                    job_id: j.id,
                    attempt: 1,
                    node_id: p.node_id.clone(),
                    epoch: p.epoch,
                    gpu_uuid: g.uuid.clone(),
                    share_milli: 1000,
                    memory_mib: 81920,
                    released_after: None,
                }));
            }
        }
        s.active.push(j);
    }
}

fn nodes_of(p: &GangPlace) -> Vec<(JobId, String)> {
    p.workers.iter().map(|w| (w.job_id, w.node_id.clone())).collect()
}

#[test]
fn a_gang_of_two_two_gpu_workers_spans_two_two_gpu_nodes_in_rank_order() {
    let mut s = cluster(2, 2);
    gang(&mut s, 10, "t", 0, 2, 2);
    let p = plan(&s, PolicyKind::Gantry, 1);
    assert!(p.placements.is_empty(), "workers are placed only as a gang: {p:?}");
    assert_eq!(p.gangs.len(), 1, "{p:?}");
    let mut nodes: Vec<String> = nodes_of(&p.gangs[0]).into_iter().map(|(_, n)| n).collect();
    assert_eq!(p.gangs[0].workers.iter().map(|w| w.job_id).collect::<Vec<_>>(), vec![11, 12], "by rank");
    assert!(p.gangs[0].workers.iter().all(|w| w.grants.len() == 2));
    nodes.sort();
    assert_eq!(nodes, vec!["n0", "n1"]);
}

#[test]
fn a_gang_that_fits_one_node_goes_to_one_node() {
    let mut s = cluster(2, 8);
    run_on(&mut s, job(1, "t", 0, 4, 0), 1, 0);
    gang(&mut s, 10, "t", 0, 2, 2);
    let p = plan(&s, PolicyKind::Gantry, 1);
    let nodes = nodes_of(&p.gangs[0]);
    assert_eq!(nodes, vec![(11, "n1".to_owned()), (12, "n1".to_owned())], "the fullest node that holds it");
}

#[test]
fn a_gang_larger_than_the_idle_gpus_waits_whole_and_small_jobs_do_not_overtake_it() {
    let mut s = cluster(2, 2);
    run_on(&mut s, job(1, "t", 0, 1, 0), 0, 0);
    gang(&mut s, 10, "t", 0, 2, 2);
    s.pending.push(job(20, "t", 0, 1, 0));
    s.at = 1_000;
    let p = plan(&s, PolicyKind::Gantry, 1);
    assert!(p.gangs.is_empty(), "{p:?}");
    assert!(p.placements.is_empty(), "job 20 would delay the gang: {p:?}");
    assert!(p.preemptions.is_empty(), "equal priority: job 1 keeps running");
}

#[test]
fn preempting_a_gang_preempts_it_as_a_whole_for_a_higher_priority_job() {
    let mut s = cluster(2, 2);
    gang(&mut s, 10, "t", 0, 2, 2);
    let first = plan(&s, PolicyKind::Gantry, 1);
    run_gang(&mut s, 10, &first.gangs[0]);
    s.pending.push(job(30, "t", 100, 2, 0));
    s.at = 60_000;
    let p = plan(&s, PolicyKind::Gantry, 1);
    assert_eq!(p.preemptions.len(), 1, "{p:?}");
    assert_eq!((p.preemptions[0].job_id, p.preemptions[0].by), (10, Some(30)), "the gang, not a worker");
    assert!(p.placements.is_empty() && p.gangs.is_empty());
}

#[test]
fn only_the_victims_the_started_job_needs_are_stopped_and_none_more_while_they_stop() {
    // One 4-GPU node, four 1-GPU jobs of priority 0 (the queue keeps the two submitted first);
    // a priority-5 job needs 2 GPUs: the two that lost their place are stopped, no more.
    let mut s = cluster(1, 4);
    for (i, started) in [(1, 0), (2, 50_000), (3, 10_000), (4, 90_000)] {
        let mut j = job(i, "t", 0, 1, 0);
        j.submitted_at = i;
        run_on(&mut s, j, 0, (i - 1) as u32);
        s.active.last_mut().expect("just pushed").started_at = Some(started);
    }
    s.pending.push(job(9, "t", 5, 2, 0));
    s.at = 100_000;
    let p = plan(&s, PolicyKind::Gantry, 1);
    let mut victims: Vec<JobId> = p.preemptions.iter().map(|v| v.job_id).collect();
    victims.sort_unstable();
    assert_eq!(victims.len(), 2, "{p:?}");
    assert!(p.preemptions.iter().all(|v| v.by == Some(9)));
    // A second pass while they stop asks for nobody else.
    for v in &victims {
        s.active.iter_mut().filter(|j| j.id == *v).for_each(|j| j.stop = Some("preempt".into()));
    }
    let again = plan(&s, PolicyKind::Gantry, 1);
    assert!(again.preemptions.is_empty(), "{again:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_server_places_gangs_where_the_simulators_queue_does(
        nodes in 1usize..5,
        pending in prop::collection::vec((0i32..3, 1u32..4, prop::sample::select(vec![1u32, 2, 4])), 1..10),
    ) {
        let mut s = cluster(nodes, 8);
        s.at = 1_000_000;
        let mut id = 1;
        for (prio, replicas, gpus) in &pending {
            if *replicas == 1 {
                s.pending.push(job(id, "t", *prio, *gpus, 0));
            } else {
                gang(&mut s, id, "t", *prio, *replicas, *gpus);
            }
            id += 1 + i64::from(*replicas);
        }
        let server = plan(&s, PolicyKind::Gantry, 7);
        // The simulator's queue, fed the same jobs (a gang as one job split only between workers).
        let queued: Vec<&Job> = s.pending.iter().filter(|j| !j.gang.as_ref().is_some_and(|g| g.is_worker())).collect();
        let jobs: Vec<QueuedJob> = queued.iter().enumerate().map(|(k, j)| {
            let replicas = j.gang.as_ref().map_or(1, |g| g.replicas);
            QueuedJob {
                id: k as u64, team: 0, priority: j.priority, submitted_s: j.submitted_at as f64 / 1000.0,
                gpus: j.request.gpus * replicas, worker_gpus: j.request.gpus, attained_gpu_s: 0.0,
                waited_s: (s.at - j.submitted_at) as f64 / 1000.0, held: Vec::new(), preemptible: true,
            }
        }).collect();
        let teams = vec![queue::Team { guaranteed_gpus: 0, weight: 1.0 }];
        let decisions = queue::plan(&QueueInput::default().weights, &teams, &jobs, &Usage::default(), &vec![8; nodes]);
        let mut expected: Vec<(JobId, Vec<(String, u32)>)> = decisions.iter().filter_map(|d| match d {
            Decision::Start { job, nodes } => {
                Some((queued[*job as usize].id, nodes.iter().map(|(n, g)| (format!("n{n}"), *g)).collect()))
            }
            _ => None,
        }).collect();
        let mut got: Vec<(JobId, Vec<(String, u32)>)> =
            server.placements.iter().map(|p| (p.job_id, vec![(p.node_id.clone(), p.grants.len() as u32)])).collect();
        for g in &server.gangs {
            let mut parts: Vec<(String, u32)> = Vec::new();
            for w in &g.workers {
                match parts.iter_mut().find(|(n, _)| *n == w.node_id) {
                    Some((_, n)) => *n += w.grants.len() as u32,
                    None => parts.push((w.node_id.clone(), w.grants.len() as u32)),
                }
            }
            got.push((g.gang_id, parts));
        }
        expected.sort();
        got.sort();
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn two_gangs_never_deadlock_in_the_server_every_placed_gang_is_whole(
        nodes in 1usize..4,
        a in (2u32..5, prop::sample::select(vec![1u32, 2, 4])),
        b in (2u32..5, prop::sample::select(vec![1u32, 2, 4])),
    ) {
        let mut s = cluster(nodes, 4);
        s.at = 1_000;
        gang(&mut s, 1, "t", 1, a.0, a.1);
        gang(&mut s, 100, "t", 0, b.0, b.1);
        let p = plan(&s, PolicyKind::Gantry, 5);
        for g in &p.gangs {
            let replicas = if g.gang_id == 1 { a.0 } else { b.0 };
            prop_assert_eq!(g.workers.len() as u32, replicas, "all workers or none");
        }
        let mut idle = vec![4u32; nodes];
        if queue::place_workers(&mut idle, a.0, a.1).is_some() {
            prop_assert!(p.gangs.iter().any(|g| g.gang_id == 1), "the first gang fits alone and starts: {:?}", p);
        }
        prop_assert!(p.preemptions.is_empty());
    }

    #[test]
    fn the_server_never_preempts_a_job_of_equal_or_higher_priority_except_to_reclaim_a_guarantee(
        running in prop::collection::vec((0usize..2, 0i32..3, prop::sample::select(vec![1u32, 2])), 0..8),
        pending in prop::collection::vec((0usize..2, 0i32..4, prop::sample::select(vec![1u32, 2, 4])), 1..6),
        quota in prop::option::of(0u32..8),
    ) {
        let mut s = cluster(2, 4);
        s.at = 10_000_000;
        s.teams = vec![Team { name: "t0".into(), gpu_quota: quota, ..Team::default() }];
        let mut free = [4u32, 4];
        let mut id = 1;
        for (team, prio, gpus) in running {
            if let Some(node) = (0..2).find(|n| free[*n] >= gpus) {
                run_on(&mut s, job(id, &format!("t{team}"), prio, gpus, 0), node, 4 - free[node]);
                free[node] -= gpus;
            }
            id += 1;
        }
        for (team, prio, gpus) in pending {
            s.pending.push(job(id, &format!("t{team}"), prio, gpus, 0));
            id += 1;
        }
        let p = plan(&s, PolicyKind::Gantry, 3);
        for v in &p.preemptions {
            let victim = s.active.iter().find(|j| j.id == v.job_id).expect("a running job");
            let by = s.pending.iter().find(|j| Some(j.id) == v.by).expect("a job it makes room for");
            let reclaim = v.reason.contains("reclaims") && by.team != victim.team && by.priority >= victim.priority;
            prop_assert!(by.priority > victim.priority || reclaim, "{v:?}: {by:?} over {victim:?}");
        }
    }
}

#[test]
fn a_higher_priority_job_of_another_team_waits_behind_its_running_jobs_when_no_guarantee_is_set() {
    let mut s = cluster(1, 1);
    run_on(&mut s, job(1, "a", 0, 1, 0), 0, 0);
    s.pending = vec![job(2, "b", 100, 1, 0)];
    s.at = 10_000;
    let p = plan(&s, PolicyKind::Gantry, 1);
    assert!(p.preemptions.is_empty(), "priority preempts only within a team: {p:?}");
    let why = p.waiting.iter().find(|(id, _)| *id == 2).map(|(_, w)| w.as_str()).unwrap_or_default();
    assert!(why.contains("may not preempt"), "{p:?}");
    // The same job of team a preempts its teammate.
    s.pending = vec![job(2, "a", 100, 1, 0)];
    assert_eq!(plan(&s, PolicyKind::Gantry, 1).preemptions.len(), 1);
}

#[test]
fn a_team_an_admin_lets_preempt_other_teams_preempts_by_priority_across_teams() {
    let mut s = cluster(1, 1);
    run_on(&mut s, job(1, "a", 0, 1, 0), 0, 0);
    s.pending = vec![job(2, "b", 100, 1, 0)];
    s.teams = vec![Team { name: "b".into(), preempt_other_teams: Some(true), ..Team::default() }];
    s.at = 10_000;
    let p = plan(&s, PolicyKind::Gantry, 1);
    assert_eq!(p.preemptions.iter().map(|v| (v.job_id, v.by)).collect::<Vec<_>>(), [(1, Some(2))], "{p:?}");
    assert!(p.preemptions[0].reason.contains("priority 100 over 0"), "{p:?}");
}

#[test]
fn a_gang_that_waits_for_gpus_running_jobs_hold_names_them_and_an_elastic_one_at_its_minimum() {
    // One 4-GPU node: an elastic 2..4 job at its minimum and a rigid job hold 3; a gang of two
    // 2-GPU workers needs all 4 at once.
    let mut s = cluster(1, 4);
    let mut elastic = job(1, "t", 0, 2, 0);
    elastic.request.gpus_max = Some(4);
    hold(&mut s, elastic, 0, 0, 2, 0);
    hold(&mut s, job(2, "t", 0, 1, 0), 0, 2, 1, 0);
    gang(&mut s, 10, "t", 0, 2, 2);
    let p = plan(&s, PolicyKind::Gantry, 1);
    assert!(p.gangs.is_empty() && p.preemptions.is_empty(), "{p:?}");
    let why = p.waiting.iter().find(|(id, _)| *id == 10).map(|(_, w)| w.clone()).unwrap_or_default();
    assert!(why.contains("needs 4 GPUs at once, 1 idle"), "{why}");
    assert!(
        why.contains("job 1 (2 GPUs, elastic at its minimum)") && why.contains("job 2 (1 GPUs)"),
        "{why}"
    );
    assert!(!why.contains("jobs ahead in the queue"), "nothing is ahead of it: {why}");
}
