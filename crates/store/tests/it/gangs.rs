//! Gangs in the store: placed all at once, ended and requeued as one job, each worker touched
//! only by reports from its own node.

use gantry_store::*;

use crate::{new_job, open};

/// Registers node `id` (hostname `host-<id>`) with `gpus` GPUs named `GPU-<id>-<i>`.
fn register(store: &dyn Store, id: &str, gpus: u32) -> u64 {
    let gpus = (0..gpus)
        .map(|i| GpuInfo { uuid: format!("GPU-{id}-{i}"), index: i, model: "A100".into(), memory_mib: 81920 })
        .collect();
    let reg = NodeRegistration {
        request: RegisterRequest {
            attempts: Vec::new(),
            node_id: id.into(),
            hostname: format!("host-{id}"),
            advertise_addr: None,
            network: Default::default(),
            job_defaults: None,
            labels: Default::default(),
            cpu_milli: 8000,
            memory_mib: 1000,
            gpus,
        },
        at: 10,
    };
    store.register_node(&reg).expect("register")
}

fn on(job_id: JobId, node: &str, epoch: u64, gpus: &[u32]) -> Placement {
    let grants = gpus
        .iter()
        .map(|i| Grant { uuid: format!("GPU-{node}-{i}"), share_milli: 1000, memory_mib: 81920 })
        .collect();
    Placement { job_id, node_id: node.into(), epoch, grants, at: 20 }
}

fn hb(node: &str, epoch: u64, jobs: Vec<JobReport>) -> Heartbeat {
    Heartbeat { logs: vec![], node_id: node.into(), epoch, gpus: vec![], jobs }
}

fn state(store: &dyn Store, id: JobId) -> JobState {
    store.job(id).expect("get").expect("exists").state
}

fn exit(code: i32) -> Option<JobExit> {
    Some(JobExit { exit_code: Some(code), reason: None, timed_out: false })
}

/// A 2 × 2-GPU gang on nodes a and b (2 GPUs each), placed: (gang, worker 0, worker 1, epoch).
fn placed_gang(store: &dyn Store) -> (JobId, JobId, JobId, u64) {
    let epoch = register(store, "a", 2);
    assert_eq!(register(store, "b", 2), epoch);
    let (gang, _) = store.submit(&gang("g", 2, 2)).expect("submit");
    let (w0, w1) = (gang + 1, gang + 2);
    let gp = GangPlacement {
        gang_id: gang,
        workers: vec![on(w0, "a", epoch, &[0, 1]), on(w1, "b", epoch, &[0, 1])],
        at: 20,
    };
    store.place_gang(&gp).expect("place gang");
    (gang, w0, w1, epoch)
}

fn start(store: &dyn Store, w0: JobId, w1: JobId, epoch: u64, attempt: u32) {
    store.heartbeat(&hb("a", epoch, vec![JobReport { job_id: w0, attempt, exit: None }]), 30).expect("hb a");
    store.heartbeat(&hb("b", epoch, vec![JobReport { job_id: w1, attempt, exit: None }]), 30).expect("hb b");
}

#[test]
fn a_gang_is_one_job_with_one_worker_per_replica_each_knowing_its_rank() {
    let (_dir, store) = open();
    let (gang, w0, w1, epoch) = placed_gang(&*store);
    let g = store.job(gang).expect("get").expect("gang");
    assert_eq!(g.gang.as_ref().map(|x| (x.id, x.replicas, x.rank)), Some((gang, 2, None)));
    assert_eq!(g.state, JobState::Scheduled);
    let assigned = store.heartbeat(&hb("b", epoch, vec![]), 25).expect("hb");
    assert_eq!(assigned.len(), 1, "node b runs only its own worker");
    let worker = assigned[0].gang.clone().expect("a worker");
    assert_eq!((assigned[0].id, worker.rank, worker.local_rank), (w1, Some(1), Some(0)));
    assert_eq!(worker.master_addr.as_deref(), Some("host-a"), "rank 0's node");
    let w0_gang = store.job(w0).expect("get").expect("w0").gang.expect("worker");
    assert_eq!(w0_gang.master_port, worker.master_port);
    assert!(worker.master_port.is_some_and(|p| (29_500..30_000).contains(&p)));
    let counts = store.job_counts().expect("counts");
    assert_eq!(counts.iter().map(|c| c.2).sum::<u64>(), 1, "a gang counts once: {counts:?}");
}

#[test]
fn a_gang_placement_with_one_bad_worker_places_nothing() {
    let (_dir, store) = open();
    let epoch = register(&*store, "a", 2);
    let (gang, _) = store.submit(&gang("g", 2, 2)).expect("submit");
    let bad = GangPlacement {
        gang_id: gang,
        workers: vec![on(gang + 1, "a", epoch, &[0, 1]), on(gang + 2, "a", epoch, &[0, 1])],
        at: 20,
    };
    assert!(matches!(store.place_gang(&bad), Err(StoreError::Conflict(_))), "the same GPUs twice");
    assert!(store.allocations(true).expect("held").is_empty());
    assert_eq!([state(&*store, gang), state(&*store, gang + 1)], [JobState::Pending; 2]);
    assert!(store.place(&on(gang + 1, "a", epoch, &[0])).is_err(), "a worker is never placed alone");
    let short = GangPlacement { gang_id: gang, workers: vec![on(gang + 1, "a", epoch, &[0, 1])], at: 20 };
    assert!(store.place_gang(&short).is_err(), "every worker or none");
}

#[test]
fn one_failed_worker_stops_the_others_and_the_gang_is_requeued_then_fails_when_retries_are_spent() {
    let (_dir, store) = open();
    let (gang, w0, w1, epoch) = placed_gang(&*store);
    start(&*store, w0, w1, epoch, 1);
    assert_eq!(state(&*store, gang), JobState::Running);
    // Node a reports worker 0 failed; node b is then told to stop worker 1 (no longer assigned).
    store
        .heartbeat(&hb("a", epoch, vec![JobReport { job_id: w0, attempt: 1, exit: exit(1) }]), 40)
        .expect("hb");
    assert_eq!(state(&*store, w0), JobState::Failed);
    assert!(
        store
            .heartbeat(&hb("b", epoch, vec![JobReport { job_id: w1, attempt: 1, exit: None }]), 41)
            .expect("hb")
            .is_empty()
    );
    assert_eq!(state(&*store, gang), JobState::Running, "the gang waits for its last worker to stop");
    let killed =
        Some(JobExit { exit_code: None, reason: Some("killed by signal 15".into()), timed_out: false });
    store
        .heartbeat(&hb("b", epoch, vec![JobReport { job_id: w1, attempt: 1, exit: killed }]), 42)
        .expect("hb");
    let g = store.job(gang).expect("get").expect("gang");
    assert_eq!(g.state, JobState::Pending, "{g:?}");
    assert!(g.reason.unwrap_or_default().contains("worker 0"), "says which worker ended it");
    assert_eq!([state(&*store, w0), state(&*store, w1)], [JobState::Pending; 2]);
    assert!(store.allocations(true).expect("held").is_empty());
    // Second attempt (max_retries = 1): the failure spends the budget.
    let gp = GangPlacement {
        gang_id: gang,
        workers: vec![on(w0, "a", epoch, &[0, 1]), on(w1, "b", epoch, &[0, 1])],
        at: 50,
    };
    store.place_gang(&gp).expect("place again");
    start(&*store, w0, w1, epoch, 2);
    store
        .heartbeat(&hb("b", epoch, vec![JobReport { job_id: w1, attempt: 2, exit: exit(3) }]), 60)
        .expect("hb");
    store
        .heartbeat(&hb("a", epoch, vec![JobReport { job_id: w0, attempt: 2, exit: exit(143) }]), 61)
        .expect("hb");
    let g = store.job(gang).expect("get").expect("gang");
    assert_eq!((g.state, g.exit_code), (JobState::Failed, Some(3)), "{g:?}");
    assert!(g.reason.unwrap_or_default().contains("retry budget"));
}

#[test]
fn a_node_reports_only_its_own_workers() {
    let (_dir, store) = open();
    let (gang, w0, w1, epoch) = placed_gang(&*store);
    start(&*store, w0, w1, epoch, 1);
    // Node a claims node b's worker failed, and the gang itself succeeded: both ignored.
    let forged = vec![
        JobReport { job_id: w1, attempt: 1, exit: exit(1) },
        JobReport { job_id: gang, attempt: 1, exit: exit(0) },
    ];
    store.heartbeat(&hb("a", epoch, forged), 40).expect("hb");
    assert_eq!([state(&*store, gang), state(&*store, w1)], [JobState::Running; 2]);
}

#[test]
fn every_worker_succeeding_is_the_gang_succeeding() {
    let (_dir, store) = open();
    let (gang, w0, w1, epoch) = placed_gang(&*store);
    start(&*store, w0, w1, epoch, 1);
    store
        .heartbeat(&hb("a", epoch, vec![JobReport { job_id: w0, attempt: 1, exit: exit(0) }]), 40)
        .expect("hb");
    assert_eq!(state(&*store, gang), JobState::Running);
    store
        .heartbeat(&hb("b", epoch, vec![JobReport { job_id: w1, attempt: 1, exit: exit(0) }]), 41)
        .expect("hb");
    assert_eq!(state(&*store, gang), JobState::Succeeded);
}

#[test]
fn cancelling_a_worker_cancels_the_whole_gang() {
    let (_dir, store) = open();
    let (gang, w0, w1, epoch) = placed_gang(&*store);
    start(&*store, w0, w1, epoch, 1);
    store.cancel(w1, 40).expect("cancel");
    assert!(
        store
            .heartbeat(&hb("a", epoch, vec![JobReport { job_id: w0, attempt: 1, exit: None }]), 41)
            .expect("hb")
            .is_empty()
    );
    // Neither node reports its worker any more: the agents stopped them.
    store.heartbeat(&hb("a", epoch, vec![]), 42).expect("hb");
    store.heartbeat(&hb("b", epoch, vec![]), 42).expect("hb");
    assert_eq!([state(&*store, gang), state(&*store, w0), state(&*store, w1)], [JobState::Cancelled; 3]);
}

#[test]
fn a_preempted_gang_is_requeued_whole_without_spending_a_retry_and_a_lost_node_spends_one() {
    let (_dir, store) = open();
    let (gang, w0, w1, epoch) = placed_gang(&*store);
    start(&*store, w0, w1, epoch, 1);
    store.preempt(w0, "preempted by job 99 (priority 100 over 0)", 40).expect("preempt via a worker");
    store.heartbeat(&hb("a", epoch, vec![]), 41).expect("hb");
    store.heartbeat(&hb("b", epoch, vec![]), 41).expect("hb");
    let g = store.job(gang).expect("get").expect("gang");
    assert_eq!(g.state, JobState::Pending);
    assert!(g.reason.unwrap_or_default().contains("priority 100 over 0"));
    // Placed again; node b is lost: the gang is requeued (one retry spent), then fails on the next.
    for (attempt, expected) in [(2, JobState::Pending), (3, JobState::Failed)] {
        let epoch_b = register(&*store, "b", 2);
        let epoch_a = store.nodes().expect("nodes").iter().find(|n| n.id == "a").expect("a").epoch;
        let gp = GangPlacement {
            gang_id: gang,
            workers: vec![on(w0, "a", epoch_a, &[0, 1]), on(w1, "b", epoch_b, &[0, 1])],
            at: 50,
        };
        store.place_gang(&gp).expect("place again");
        store
            .heartbeat(&hb("a", epoch_a, vec![JobReport { job_id: w0, attempt, exit: None }]), 60)
            .expect("hb");
        store
            .heartbeat(&hb("b", epoch_b, vec![JobReport { job_id: w1, attempt, exit: None }]), 60)
            .expect("hb");
        register(&*store, "b", 2);
        assert_eq!(state(&*store, gang), JobState::Running, "worker 0 still has to stop");
        store.heartbeat(&hb("a", epoch_a, vec![]), 70).expect("hb");
        assert_eq!(state(&*store, gang), expected);
    }
}

#[test]
fn a_gangs_master_addr_is_the_address_rank_zeros_node_advertises() {
    let (_dir, store) = open();
    let epoch = register(&*store, "a", 2);
    let gpus = (0..2)
        .map(|i| GpuInfo { uuid: format!("GPU-b-{i}"), index: i, model: "A100".into(), memory_mib: 81920 })
        .collect();
    let reg = NodeRegistration {
        request: RegisterRequest {
            attempts: Vec::new(),
            node_id: "b".into(),
            hostname: "host-b".into(),
            advertise_addr: Some("10.1.2.3".into()),
            network: Default::default(),
            job_defaults: None,
            labels: Default::default(),
            cpu_milli: 8000,
            memory_mib: 1000,
            gpus,
        },
        at: 10,
    };
    assert_eq!(store.register_node(&reg).expect("register"), epoch);
    let node = store.nodes().expect("nodes").into_iter().find(|n| n.id == "b").expect("node b");
    assert_eq!(node.advertise_addr.as_deref(), Some("10.1.2.3"));
    let (gang, _) = store.submit(&gang("g", 2, 2)).expect("submit");
    let (w0, w1) = (gang + 1, gang + 2);
    let gp = GangPlacement {
        gang_id: gang,
        workers: vec![on(w0, "b", epoch, &[0, 1]), on(w1, "a", epoch, &[0, 1])],
        at: 20,
    };
    store.place_gang(&gp).expect("place gang");
    for id in [w0, w1] {
        let worker = store.job(id).expect("get").expect("worker").gang.expect("a worker");
        assert_eq!(worker.master_addr.as_deref(), Some("10.1.2.3"), "rank 0 runs on b");
    }
}

/// A gang of `replicas` workers of `gpus` GPUs each.
fn gang(key: &str, replicas: u32, gpus: u32) -> NewJob {
    let mut job = new_job(key, gpus, 0);
    job.spec.replicas = Some(replicas);
    job
}
