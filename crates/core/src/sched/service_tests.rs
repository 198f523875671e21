//! The serving rules of `super::service`: replicas spread over nodes, never two on one whole GPU,
//! victims that are not replicas first and at most one replica of a service per pass.

use gantry_api::model::{Gpu, GpuHealth, GpuInfo, Job, JobRequest, JobState, Node, NodeState};

use super::{Held, Holder, NodeRoom, Plan, Shape, Snapshot, find_room, plan_grouped};
use crate::queue::Victim;
use crate::{PolicyKind, SplitMix64};

pub(super) fn node(id: &str, gpus: u32) -> (Node, Vec<Gpu>) {
    let node = Node {
        id: id.into(),
        hostname: id.into(),
        advertise_addr: None,
        network: Default::default(),
        state: NodeState::Ready,
        scheduling: Default::default(),
        drain_at: None,
        epoch: 1,
        cpu_milli: 64_000,
        memory_mib: 512_000,
        last_heartbeat: 0,
        job_defaults: None,
        labels: Default::default(),
    };
    let gpus = (0..gpus)
        .map(|i| Gpu {
            info: GpuInfo {
                uuid: format!("{id}-{i}"),
                index: i,
                model: "A100-80GB".into(),
                memory_mib: 81_920,
            },
            node_id: id.into(),
            health: GpuHealth::Healthy,
            sample: None,
        })
        .collect();
    (node, gpus)
}

pub(super) fn cluster(sizes: &[u32]) -> Snapshot {
    let mut s = Snapshot { at: 1_000_000, ..Snapshot::default() };
    for (i, gpus) in sizes.iter().enumerate() {
        let (n, g) = node(&format!("n{i}"), *gpus);
        s.nodes.push(n);
        s.gpus.extend(g);
    }
    s
}

pub(super) fn job(id: i64, gpus: u32, gpu_memory_mib: u64, priority: i32) -> Job {
    Job {
        id,
        team: "ml".into(),
        name: format!("j{id}"),
        priority,
        command: vec!["true".into()],
        request: JobRequest { gpus, gpu_memory_mib, ..JobRequest::default() },
        state: JobState::Pending,
        submitted_at: id,
        ..Job::default()
    }
}

/// Job `j` running on `gpus` of `node` (whole GPUs).
pub(super) fn running(s: &mut Snapshot, mut j: Job, node: &str, gpus: &[u32]) {
    j.state = JobState::Running;
    j.node_id = Some(node.into());
    j.started_at = Some(s.at - 60_000);
    j.gpu_uuids = gpus.iter().map(|g| format!("{node}-{g}")).collect();
    for uuid in &j.gpu_uuids {
        let id = s.held.len() as i64 + 1;
        s.held.push(Held { id, job_id: j.id, gpu_uuid: uuid.clone(), share_milli: 1000, memory_mib: 81_920 });
    }
    s.active.push(j);
}

fn replicas(s: &mut Snapshot, ids: &[i64], service: &str) {
    for id in ids {
        s.services.insert(*id, service.into());
    }
}

pub(super) fn pass(s: &Snapshot) -> Plan {
    plan_grouped(s, PolicyKind::Gantry, &mut SplitMix64::new(7))
}

fn nodes_of(p: &Plan) -> Vec<&str> {
    p.placements.iter().map(|p| p.node_id.as_str()).collect()
}

#[test]
fn replicas_of_one_service_spread_over_nodes_where_packing_would_stack_them() {
    let mut s = cluster(&[4, 4]);
    s.pending = vec![job(1, 1, 0, 0), job(2, 1, 0, 0)];
    assert_eq!(nodes_of(&pass(&s)), ["n0", "n0"], "plain jobs pack onto the fullest node");
    replicas(&mut s, &[1, 2], "ml/llm");
    assert_eq!(nodes_of(&pass(&s)), ["n0", "n1"]);
}

#[test]
fn a_replica_goes_where_its_service_has_none_yet_running_replicas_included() {
    let mut s = cluster(&[4, 4]);
    running(&mut s, job(1, 1, 0, 0), "n1", &[0]);
    s.pending = vec![job(2, 1, 0, 0)];
    assert_eq!(nodes_of(&pass(&s)), ["n1"], "the fullest node");
    replicas(&mut s, &[1, 2], "ml/llm");
    assert_eq!(nodes_of(&pass(&s)), ["n0"]);
}

#[test]
fn two_replicas_never_share_a_gpu_unless_they_asked_for_a_slice() {
    // One node: spreading cannot help, so the rule on GPUs is what remains.
    let mut s = cluster(&[2]);
    s.pending = vec![job(1, 1, 0, 0), job(2, 1, 0, 0)];
    replicas(&mut s, &[1, 2], "ml/llm");
    let p = pass(&s);
    let gpus: Vec<&str> = p.placements.iter().flat_map(|p| &p.grants).map(|g| g.uuid.as_str()).collect();
    assert_eq!(gpus, ["n0-0", "n0-1"]);
    // Slices of 10 GB may share a GPU: that is what they asked for.
    let mut s = cluster(&[1]);
    s.pending = vec![job(1, 0, 10_240, 0), job(2, 0, 10_240, 0)];
    replicas(&mut s, &[1, 2], "ml/llm");
    let p = pass(&s);
    let gpus: Vec<&str> = p.placements.iter().flat_map(|p| &p.grants).map(|g| g.uuid.as_str()).collect();
    assert_eq!(gpus, ["n0-0", "n0-0"]);
}

#[test]
fn a_pass_stops_at_most_one_replica_of_a_service() {
    // A full node of two low-priority replicas; two higher-priority jobs of the same team wait.
    let mut s = cluster(&[2]);
    running(&mut s, job(1, 1, 0, 0), "n0", &[0]);
    running(&mut s, job(2, 1, 0, 0), "n0", &[1]);
    s.pending = vec![job(3, 1, 0, 5), job(4, 1, 0, 5)];
    let victims = |p: &Plan| p.preemptions.iter().map(|v| v.job_id).collect::<Vec<_>>();
    assert_eq!(victims(&pass(&s)), [1, 2], "plain jobs are both stopped");
    replicas(&mut s, &[1, 2], "ml/llm");
    assert_eq!(victims(&pass(&s)), [1]);
}

#[test]
fn when_the_cheapest_victims_are_two_replicas_a_batch_job_goes_with_one_of_them() {
    // A full node: a batch job that has run 10 minutes and two replicas that have run one (the
    // queue demotes the replicas, the least GPU time lost). A job of the team wants two GPUs.
    let mut s = cluster(&[3]);
    running(&mut s, job(1, 1, 0, 0), "n0", &[0]);
    s.active[0].started_at = Some(s.at - 600_000);
    running(&mut s, job(2, 1, 0, 0), "n0", &[1]);
    running(&mut s, job(3, 1, 0, 0), "n0", &[2]);
    replicas(&mut s, &[2, 3], "ml/llm");
    s.pending = vec![job(4, 2, 0, 50)];
    let p = pass(&s);
    let mut victims: Vec<i64> = p.preemptions.iter().map(|v| v.job_id).collect();
    victims.sort_unstable();
    assert!(
        victims == [1, 2] || victims == [1, 3],
        "the batch job and one replica: {victims:?} {:?}",
        p.waiting
    );
    assert!(p.preemptions.iter().all(|v| v.by == Some(4)));
}

fn holder(id: u64, gpus: u32, lost_gpu_s: f64, service: Option<u32>) -> Holder {
    let victim = Victim { id, priority: 0, gpus, lost_gpu_s };
    Holder { node: 0, victim, cpu_milli: 0, memory_mib: 0, service }
}

fn room(idle: u32) -> NodeRoom {
    NodeRoom { eligible: true, idle, freeing: 0, cpu_free: 64_000, memory_free: 512_000 }
}

fn shape(gpus: u32) -> Shape {
    Shape { workers: 1, per_worker: gpus, cpu_milli: 0, memory_mib: 0, priority: 5 }
}

#[test]
fn victims_that_are_not_replicas_go_first_even_when_a_replica_is_cheaper() {
    let holders = [holder(1, 1, 10.0, Some(0)), holder(2, 1, 1_000.0, None)];
    let got = find_room(&shape(1), &[room(0)], &holders, &[(0, 1)]).expect("room");
    assert_eq!(got.victims, [2]);
}

#[test]
fn room_that_needs_two_replicas_of_one_service_is_not_found_but_two_services_give_one_each() {
    let same = [holder(1, 1, 1.0, Some(0)), holder(2, 1, 2.0, Some(0))];
    assert_eq!(find_room(&shape(2), &[room(0)], &same, &[(0, 2)]), None);
    let two = [holder(1, 1, 1.0, Some(0)), holder(2, 1, 2.0, Some(1))];
    let got = find_room(&shape(2), &[room(0)], &two, &[(0, 2)]).expect("one of each");
    let mut victims = got.victims;
    victims.sort_unstable();
    assert_eq!(victims, [1, 2]);
}

#[test]
fn an_elastic_victim_frees_its_whole_width_so_a_higher_priority_job_of_its_team_preempts_it() {
    // One node of two GPUs, both held by an elastic job (1..2 GPUs) at priority 0. A job of the
    // same team at priority 10 needs both: shrinking frees one, stopping the elastic job frees two.
    let mut s = cluster(&[2]);
    let mut elastic = job(1, 1, 0, 0);
    elastic.request.gpus_max = Some(2);
    running(&mut s, elastic, "n0", &[0, 1]);
    s.pending = vec![job(2, 2, 0, 10)];
    let p = pass(&s);
    let victims: Vec<i64> = p.preemptions.iter().map(|v| v.job_id).collect();
    assert_eq!(victims, [1], "{p:?}");
    assert!(p.resizes.is_empty(), "{p:?}");
}
