//! Elastic jobs: the GPU range survives the store, and a resize requeues the job at no cost.

use gantry_store::*;

use super::{new_job, open, register, reopen, whole};

fn elastic(key: &str, min: u32, max: u32) -> NewJob {
    let mut job = new_job(key, min, 0);
    job.spec.gpus.max = Some(max);
    job
}

#[test]
fn an_elastic_range_survives_a_round_trip_and_a_rigid_job_has_none() {
    let (dir, store) = open();
    let (id, _) = store.submit(&elastic("e", 2, 8)).expect("submit");
    let (rigid, _) = store.submit(&new_job("r", 2, 0)).expect("submit");
    drop(store);
    let store = reopen(&dir);
    let job = store.job(id).expect("get").expect("exists");
    assert_eq!((job.request.gpus, job.request.gpus_max), (2, Some(8)));
    assert_eq!(job.request.gpu_range().to_string(), "2..8");
    let listed = store.jobs(&JobFilter::default()).expect("list");
    assert_eq!(listed.iter().find(|j| j.id == id).map(|j| j.request.gpus_max), Some(Some(8)));
    assert_eq!(store.job(rigid).expect("get").expect("exists").request.gpus_max, None);
}

#[test]
fn an_elastic_job_is_placed_only_within_its_range() {
    let (_dir, store) = open();
    let epoch = register(&*store, 4);
    let (id, _) = store.submit(&elastic("e", 2, 3)).expect("submit");
    assert!(store.place(&whole(id, epoch, &["GPU-0"])).is_err(), "below the minimum");
    assert!(
        store.place(&whole(id, epoch, &["GPU-0", "GPU-1", "GPU-2", "GPU-3"])).is_err(),
        "above the maximum"
    );
    store.place(&whole(id, epoch, &["GPU-0", "GPU-1", "GPU-2"])).expect("three is in 2..3");
    assert_eq!(store.job(id).expect("get").expect("exists").gpu_uuids.len(), 3);
    // Placed above its minimum: the transition and an event say why, and what then.
    let placed = store.transitions(id).expect("transitions");
    let why = placed.last().and_then(|t| t.reason.clone()).unwrap_or_default();
    assert!(
        why.contains("started on 3 GPUs, above its minimum of 2") && why.contains("shrinks back"),
        "{why}"
    );
    let events = store.events(&EventFilter { limit: 10, ..EventFilter::default() }).expect("events");
    assert!(events.iter().any(|e| e.kind == "job.widened"), "{events:?}");
}

#[test]
fn a_resize_stops_the_job_and_requeues_it_without_spending_a_retry_with_an_event() {
    let (_dir, store) = open();
    let epoch = register(&*store, 4);
    let mut job = elastic("e", 1, 4);
    job.spec.max_retries = Some(0);
    let (id, _) = store.submit(&job).expect("submit");
    let (rigid, _) = store.submit(&new_job("r", 1, 0)).expect("submit");
    store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
    assert!(store.resize(id, "resized 1 → 4 GPUs: idle GPUs", 30).is_err(), "not running yet");
    let mut hb = Heartbeat {
        logs: vec![],
        node_id: "n1".into(),
        epoch,
        gpus: vec![],
        jobs: vec![JobReport { job_id: id, attempt: 1, exit: None }],
    };
    store.heartbeat(&hb, 40).expect("heartbeat");
    assert!(store.resize(rigid, "resized", 45).is_err(), "a rigid job is not resized");
    store.resize(id, "resized 1 → 4 GPUs: idle GPUs", 50).expect("resize");
    assert!(store.resize(id, "again", 51).is_err(), "already stopping");
    hb.jobs[0].exit = Some(JobExit { exit_code: Some(143), reason: None, timed_out: false });
    store.heartbeat(&hb, 40).expect("heartbeat");
    let job = store.job(id).expect("get").expect("exists");
    assert_eq!(job.state, JobState::Pending, "requeued although its retry budget is zero");
    assert_eq!(job.reason.as_deref(), Some("resized 1 → 4 GPUs: idle GPUs"));
    let events = store.events(&EventFilter { limit: 10, ..EventFilter::default() }).expect("events");
    assert!(events.iter().any(|e| e.kind == "job.resized" && e.subject == format!("job/{id}")), "{events:?}");
    store.place(&whole(id, epoch, &["GPU-0", "GPU-1", "GPU-2", "GPU-3"])).expect("second attempt, 4 wide");
    let attempts = store.attempts(id).expect("attempts");
    assert_eq!(attempts.iter().map(|a| a.gpu_uuids.len()).collect::<Vec<_>>(), [1, 4]);
}
