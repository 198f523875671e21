use gantry_store::*;

use crate::{new_job, open, register, whole};

#[test]
fn a_lost_node_requeues_its_jobs_and_fails_them_once_retries_are_spent() {
    let (_dir, store) = open();
    let mut epoch = register(&*store, 1);
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    // max_retries = 1: the first loss requeues, the second spends the budget.
    for attempt in 1..=2 {
        store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
        let running = JobReport { job_id: id, attempt, exit: None };
        let hb = Heartbeat { logs: vec![], node_id: "n1".into(), epoch, gpus: vec![], jobs: vec![running] };
        store.heartbeat(&hb, 20).expect("heartbeat");
        assert_eq!(store.expire_nodes(1_000, 1_000).expect("expire"), vec!["n1".to_owned()]);
        epoch = register(&*store, 1);
    }
    let job = store.job(id).expect("get").expect("exists");
    assert_eq!(job.state, JobState::Failed);
    assert!(job.reason.unwrap_or_default().contains("retry budget"));
}

#[test]
fn a_placement_that_never_started_does_not_spend_the_retry_budget() {
    let (_dir, store) = open();
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    for _ in 0..5 {
        let epoch = register(&*store, 1);
        store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
    }
    register(&*store, 1);
    let job = store.job(id).expect("get").expect("exists");
    assert_eq!((job.state, job.attempt), (JobState::Pending, 5));
}

#[test]
fn a_stale_epoch_heartbeat_is_refused_and_registering_again_requeues_old_work() {
    let (_dir, store) = open();
    let old = register(&*store, 1);
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    store.place(&whole(id, old, &["GPU-0"])).expect("place");
    let new = register(&*store, 1);
    assert_eq!(new, old + 1);
    let hb = Heartbeat { logs: vec![], node_id: "n1".into(), epoch: old, gpus: vec![], jobs: vec![] };
    assert!(matches!(store.heartbeat(&hb, 50), Err(StoreError::StaleEpoch { .. })));
    assert_eq!(store.job(id).expect("get").map(|j| j.state), Some(JobState::Pending));
    assert!(store.allocations(true).expect("held").is_empty());
}

#[test]
fn an_unhealthy_gpu_asks_its_jobs_to_stop_and_requeues_them_when_they_end() {
    let (_dir, store) = open();
    let epoch = register(&*store, 1);
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
    let report = GpuReport { uuid: "GPU-0".into(), health: GpuHealth::Unhealthy, sample: None };
    let mut hb = Heartbeat {
        logs: vec![],
        node_id: "n1".into(),
        epoch,
        gpus: vec![report],
        jobs: vec![JobReport { job_id: id, attempt: 1, exit: None }],
    };
    assert!(store.heartbeat(&hb, 60).expect("heartbeat").is_empty(), "job is no longer assigned");
    hb.jobs[0].exit = Some(JobExit { exit_code: None, reason: Some("killed".into()), timed_out: false });
    store.heartbeat(&hb, 60).expect("heartbeat");
    assert_eq!(store.job(id).expect("get").map(|j| j.state), Some(JobState::Pending));
    let (other, _) = store.submit(&new_job("b", 1, 0)).expect("submit");
    assert!(store.place(&whole(other, epoch, &["GPU-0"])).is_err(), "unhealthy GPU takes no work");
}

#[test]
fn a_preempted_job_is_stopped_and_requeued_without_spending_its_retry_budget() {
    let (_dir, store) = open();
    let epoch = register(&*store, 1);
    let mut job = new_job("a", 1, 0);
    job.spec.max_retries = Some(0);
    let (id, _) = store.submit(&job).expect("submit");
    store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
    assert!(store.preempt(id, "preempted by job 9", 50).is_err(), "a scheduled job is not running yet");
    let mut hb = Heartbeat {
        logs: vec![],
        node_id: "n1".into(),
        epoch,
        gpus: vec![],
        jobs: vec![JobReport { job_id: id, attempt: 1, exit: None }],
    };
    store.heartbeat(&hb, 60).expect("heartbeat");
    store.preempt(id, "preempted by job 9 (priority 100 over 0)", 70).expect("preempt");
    assert!(store.preempt(id, "again", 71).is_err(), "already stopping");
    assert!(store.heartbeat(&hb, 60).expect("heartbeat").is_empty(), "the job is no longer assigned");
    hb.jobs[0].exit = Some(JobExit { exit_code: Some(143), reason: None, timed_out: false });
    store.heartbeat(&hb, 60).expect("heartbeat");
    let job = store.job(id).expect("get").expect("exists");
    assert_eq!(job.state, JobState::Pending, "requeued although its retry budget is zero");
    assert_eq!(job.reason.as_deref(), Some("preempted by job 9 (priority 100 over 0)"));
    assert!(store.allocations(true).expect("held").is_empty());
}

#[test]
fn a_silent_node_is_not_responding_keeps_its_jobs_and_is_ready_again_at_its_next_heartbeat() {
    let (_dir, store) = open();
    let epoch = register(&*store, 1);
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
    let beat = || Heartbeat {
        logs: vec![],
        node_id: "n1".into(),
        epoch,
        gpus: vec![],
        jobs: vec![JobReport { job_id: id, attempt: 1, exit: None }],
    };
    store.heartbeat(&beat(), 20).expect("heartbeat");
    assert_eq!(store.mark_not_responding(1_000, 1_000).expect("mark"), vec!["n1".to_owned()]);
    let state = |store: &dyn Store| store.nodes().expect("nodes")[0].state;
    assert_eq!(state(&*store), NodeState::NotResponding);
    let job = store.job(id).expect("get").expect("exists");
    assert_eq!((job.state, job.attempt), (JobState::Running, 1), "nothing requeued while not responding");
    assert_eq!(store.allocations(true).expect("held").len(), 1, "its GPU stays held");
    // A second mark finds nothing new; the heartbeat of the same epoch is taken.
    assert!(store.mark_not_responding(2_000, 2_000).expect("mark").is_empty());
    store.heartbeat(&beat(), 2_100).expect("a not-responding node's heartbeat is accepted");
    assert_eq!(state(&*store), NodeState::Ready);
    let job = store.job(id).expect("get").expect("exists");
    assert_eq!((job.state, job.attempt), (JobState::Running, 1));
}

#[test]
fn a_node_silent_past_the_lost_deadline_is_lost_from_not_responding_too() {
    let (_dir, store) = open();
    let epoch = register(&*store, 1);
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
    store.mark_not_responding(i64::MAX, 10).expect("mark");
    assert_eq!(store.expire_nodes(i64::MAX, 20).expect("expire"), vec!["n1".to_owned()]);
    assert_eq!(store.nodes().expect("nodes")[0].state, NodeState::Lost);
    assert_eq!(store.job(id).expect("get").map(|j| j.state), Some(JobState::Pending));
}

#[test]
fn a_node_keeps_the_network_mode_it_registered_last() {
    let (_dir, store) = open();
    register(&*store, 1);
    let network = |store: &dyn Store| store.nodes().expect("nodes")[0].network;
    assert_eq!(network(&*store), NodeNetwork::Shared, "an agent that does not say shares the node's network");
    let reg = NodeRegistration {
        request: RegisterRequest {
            attempts: Vec::new(),
            node_id: "n1".into(),
            hostname: "h".into(),
            advertise_addr: None,
            network: NodeNetwork::Cni,
            job_defaults: None,
            labels: Default::default(),
            cpu_milli: 8000,
            memory_mib: 1000,
            gpus: Vec::new(),
        },
        at: 20,
    };
    store.register_node(&reg).expect("register again");
    assert_eq!(network(&*store), NodeNetwork::Cni);
}
