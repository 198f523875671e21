use gantry_core::PolicyKind;
use gantry_server::scheduler::{Snapshot, held, plan};
use gantry_store::*;

pub fn node(gpus: u32) -> (gantry_store::Node, Vec<Gpu>) {
    let node = gantry_store::Node {
        id: "n1".into(),
        hostname: "h".into(),
        advertise_addr: None,
        network: Default::default(),
        job_defaults: None,
        labels: Default::default(),
        state: NodeState::Ready,
        scheduling: Default::default(),
        drain_at: None,
        epoch: 3,
        cpu_milli: 64_000,
        memory_mib: 512_000,
        last_heartbeat: 0,
    };
    let gpus = (0..gpus)
        .map(|i| Gpu {
            info: GpuInfo {
                uuid: format!("GPU-{i}"),
                index: i,
                model: "A100-80GB".into(),
                memory_mib: 81920,
            },
            node_id: "n1".into(),
            health: GpuHealth::Healthy,
            sample: None,
        })
        .collect();
    (node, gpus)
}

pub fn job(id: JobId, team: &str, priority: i32, gpus: u32, slice_mib: u64) -> Job {
    Job {
        id,
        team: team.into(),
        name: format!("j{id}"),
        priority,
        command: vec!["true".into()],
        request: JobRequest { gpus, gpu_memory_mib: slice_mib, ..JobRequest::default() },
        max_retries: 3,
        submitted_at: id,
        ..Job::default()
    }
}

/// Marks `j` running (attempt 1, epoch 3) on node `n{node}`, holding `width` whole GPUs from
/// `first_gpu`, started at `started_at`.
pub fn hold(s: &mut Snapshot, mut j: Job, node: usize, first_gpu: u32, width: u32, started_at: i64) {
    j.state = JobState::Running;
    j.node_id = Some(format!("n{node}"));
    j.epoch = Some(3);
    j.attempt = 1;
    j.started_at = Some(started_at);
    for i in first_gpu..first_gpu + width {
        let uuid = format!("GPU-{node}-{i}");
        j.gpu_uuids.push(uuid.clone());
        s.held.push(held(&Allocation {
            id: s.held.len() as i64 + 1,
            job_id: j.id,
            attempt: 1,
            node_id: format!("n{node}"),
            epoch: 3,
            gpu_uuid: uuid,
            share_milli: 1000,
            memory_mib: 81920,
            released_after: None,
        }));
    }
    s.active.push(j);
}

pub fn snapshot(gpus: u32, pending: Vec<Job>) -> Snapshot {
    let (n, g) = node(gpus);
    Snapshot { nodes: vec![n], gpus: g, pending, ..Snapshot::default() }
}

#[test]
fn five_two_gpu_jobs_on_four_gpus_place_two_on_distinct_gpus() {
    let s = snapshot(4, (1..=5).map(|i| job(i, "t", 0, 2, 0)).collect());
    let placed = plan(&s, PolicyKind::Gantry, 1).placements;
    assert_eq!(placed.iter().map(|p| p.job_id).collect::<Vec<_>>(), vec![1, 2]);
    let mut uuids: Vec<&str> = placed.iter().flat_map(|p| p.grants.iter().map(|g| g.uuid.as_str())).collect();
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 4);
    assert!(placed.iter().all(|p| p.epoch == 3));
}

#[test]
fn four_twenty_gigabyte_slices_fit_on_one_eighty_gigabyte_gpu_and_the_fifth_waits() {
    let s = snapshot(1, (1..=5).map(|i| job(i, "t", 0, 0, 20_000)).collect());
    let placed = plan(&s, PolicyKind::Gantry, 1).placements;
    assert_eq!(placed.len(), 4);
    assert!(placed.iter().all(|p| p.grants.len() == 1 && p.grants[0].memory_mib == 20_000));
}

#[test]
fn higher_priority_goes_first_then_submission_order() {
    let s = snapshot(1, vec![job(1, "t", 0, 1, 0), job(2, "t", 5, 1, 0), job(3, "t", 5, 1, 0)]);
    let placed = plan(&s, PolicyKind::Gantry, 1).placements;
    assert_eq!(placed.iter().map(|p| p.job_id).collect::<Vec<_>>(), vec![2]);
}

#[test]
fn a_team_quota_is_a_guarantee_and_idle_gpus_may_be_borrowed() {
    let mut s = snapshot(4, vec![job(1, "a", 9, 1, 0), job(2, "a", 9, 1, 0), job(3, "b", 0, 1, 0)]);
    s.teams = vec![Team { name: "a".into(), gpu_quota: Some(1), ..Team::default() }];
    let placed: Vec<JobId> = plan(&s, PolicyKind::Gantry, 1).placements.iter().map(|p| p.job_id).collect();
    assert_eq!(placed, vec![1, 2, 3], "team a borrows an idle GPU beyond its guarantee of one");
}

#[test]
fn an_unhealthy_gpu_and_a_lost_node_get_no_new_work() {
    let mut s = snapshot(2, vec![job(1, "t", 0, 1, 0), job(2, "t", 0, 1, 0)]);
    s.gpus[0].health = GpuHealth::Unhealthy;
    let placed = plan(&s, PolicyKind::Gantry, 1).placements;
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].grants[0].uuid, "GPU-1");
    s.nodes[0].state = NodeState::Lost;
    assert!(plan(&s, PolicyKind::Gantry, 1).placements.is_empty());
}

#[test]
fn held_allocations_are_respected() {
    let mut s = snapshot(2, vec![job(2, "t", 0, 2, 0), job(3, "t", 0, 1, 0)]);
    let mut running = job(1, "t", 0, 1, 0);
    running.state = JobState::Running;
    running.node_id = Some("n1".into());
    running.gpu_uuids = vec!["GPU-0".into()];
    s.active = vec![running];
    s.held = vec![held(&Allocation {
        id: 1,
        job_id: 1,
        attempt: 1,
        node_id: "n1".into(),
        epoch: 3,
        gpu_uuid: "GPU-0".into(),
        share_milli: 1000,
        memory_mib: 81920,
        released_after: None,
    })];
    let placed = plan(&s, PolicyKind::Gantry, 1).placements;
    assert_eq!(placed.iter().map(|p| p.job_id).collect::<Vec<_>>(), vec![3]);
    assert_eq!(placed[0].grants[0].uuid, "GPU-1");
}

#[test]
fn a_job_that_does_not_fit_says_why_it_waits() {
    let mut s = snapshot(2, vec![job(1, "t", 0, 4, 0), job(2, "a", 0, 1, 0), job(3, "b", 0, 1, 0)]);
    s.teams = vec![Team { name: "a".into(), gpu_quota: Some(0), ..Team::default() }];
    let waiting: std::collections::HashMap<JobId, String> =
        plan(&s, PolicyKind::Gantry, 1).waiting.into_iter().collect();
    assert!(waiting[&1].contains("no node has 4 free GPUs (the most any has is 2)"), "{waiting:?}");
    assert!(!waiting.contains_key(&2) && !waiting.contains_key(&3), "{waiting:?}");
}
