use gantry_store::*;

use crate::{new_job, open, register, reopen, whole};

#[test]
fn a_retried_submission_with_the_same_key_is_one_job() {
    let (_dir, store) = open();
    let (a, new_a) = store.submit(&new_job("k1", 1, 0)).expect("submit");
    let (b, new_b) = store.submit(&new_job("k1", 1, 0)).expect("submit");
    assert_eq!((a, new_a, new_b), (b, true, false));
    assert_eq!(store.jobs(&JobFilter::default()).expect("list").len(), 1);
}

#[test]
fn submissions_survive_reopening_the_store() {
    let (dir, store) = open();
    store.submit(&new_job("k1", 1, 0)).expect("submit");
    drop(store);
    let store = reopen(&dir);
    let jobs = store.jobs(&JobFilter::default()).expect("list");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].state, JobState::Pending);
}

#[test]
fn a_gpu_held_by_one_job_cannot_be_placed_for_another() {
    let (_dir, store) = open();
    let epoch = register(&*store, 1);
    let (a, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    let (b, _) = store.submit(&new_job("b", 1, 0)).expect("submit");
    store.place(&whole(a, epoch, &["GPU-0"])).expect("first placement fits");
    let err = store.place(&whole(b, epoch, &["GPU-0"])).expect_err("second must not fit");
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    assert_eq!(store.job(b).expect("get").map(|j| j.state), Some(JobState::Pending));
}

#[test]
fn four_slices_of_twenty_gigabytes_share_one_eighty_gigabyte_gpu_and_a_fifth_does_not_fit() {
    let (_dir, store) = open();
    let epoch = register(&*store, 1);
    let slice = |id| Placement {
        job_id: id,
        node_id: "n1".into(),
        epoch,
        grants: vec![Grant { uuid: "GPU-0".into(), share_milli: 0, memory_mib: 20000 }],
        at: 5,
    };
    for i in 0..4 {
        let (id, _) = store.submit(&new_job(&format!("s{i}"), 0, 20000)).expect("submit");
        store.place(&slice(id)).expect("slice fits");
    }
    let (fifth, _) = store.submit(&new_job("s4", 0, 20000)).expect("submit");
    assert!(store.place(&slice(fifth)).is_err());
    let history = store.allocations(false).expect("history");
    assert!(history::conflicts(&history, &store.gpus().expect("gpus")).is_empty());
}

#[test]
fn a_job_runs_and_succeeds_through_agent_reports_and_releases_its_gpu() {
    let (_dir, store) = open();
    let epoch = register(&*store, 1);
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
    let mut hb = Heartbeat { logs: vec![], node_id: "n1".into(), epoch, gpus: vec![], jobs: vec![] };
    let assigned = store.heartbeat(&hb, 30).expect("heartbeat");
    assert_eq!(assigned.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);
    hb.jobs = vec![JobReport { job_id: id, attempt: 1, exit: None }];
    store.heartbeat(&hb, 30).expect("heartbeat");
    assert_eq!(store.job(id).expect("get").map(|j| j.state), Some(JobState::Running));
    hb.jobs[0].exit = Some(JobExit { exit_code: Some(0), reason: None, timed_out: false });
    assert!(store.heartbeat(&hb, 30).expect("heartbeat").is_empty());
    let job = store.job(id).expect("get").expect("exists");
    assert_eq!((job.state, job.gpu_uuids), (JobState::Succeeded, vec!["GPU-0".to_owned()]));
    assert!(store.allocations(true).expect("held").is_empty());
    let states: Vec<JobState> = store.transitions(id).expect("transitions").iter().map(|t| t.to).collect();
    assert_eq!(states, [JobState::Pending, JobState::Scheduled, JobState::Running, JobState::Succeeded]);
}

#[test]
fn cancelling_a_pending_job_ends_it_and_a_finished_job_cannot_be_cancelled() {
    let (_dir, store) = open();
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    assert_eq!(store.cancel(id, 2).expect("cancel").state, JobState::Cancelled);
    assert!(matches!(store.cancel(id, 3), Err(StoreError::Conflict(_))));
    assert!(matches!(store.cancel(999, 3), Err(StoreError::NotFound(_))));
}

#[test]
fn the_history_check_flags_two_whole_gpu_holders_at_once_but_not_one_after_the_other() {
    let gpu = Gpu {
        info: GpuInfo { uuid: "GPU-0".into(), index: 0, model: "m".into(), memory_mib: 81920 },
        node_id: "n1".into(),
        health: GpuHealth::Healthy,
        sample: None,
    };
    let alloc = |id, job_id, released_after| Allocation {
        id,
        job_id,
        attempt: 1,
        node_id: "n1".into(),
        epoch: 1,
        gpu_uuid: "GPU-0".into(),
        share_milli: 1000,
        memory_mib: 81920,
        released_after,
    };
    let sequential = [alloc(1, 10, Some(1)), alloc(2, 11, None)];
    assert!(history::conflicts(&sequential, std::slice::from_ref(&gpu)).is_empty());
    let overlapping = [alloc(1, 10, Some(2)), alloc(2, 11, None)];
    assert_eq!(history::conflicts(&overlapping, &[gpu]).len(), 1);
}

#[test]
fn a_job_that_ends_between_two_heartbeats_is_recorded_as_having_run() {
    let (_dir, store) = open();
    let epoch = register(&*store, 1);
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
    let exit = Some(JobExit { exit_code: Some(0), reason: None, timed_out: false });
    let hb = Heartbeat {
        logs: vec![],
        node_id: "n1".into(),
        epoch,
        gpus: vec![],
        jobs: vec![JobReport { job_id: id, attempt: 1, exit }],
    };
    store.heartbeat(&hb, 40).expect("heartbeat");
    let states: Vec<JobState> = store.transitions(id).expect("transitions").iter().map(|t| t.to).collect();
    assert_eq!(states, [JobState::Pending, JobState::Scheduled, JobState::Running, JobState::Succeeded]);
    assert_eq!(store.job(id).expect("get").and_then(|j| j.started_at), Some(40));
}

#[test]
fn changed_jobs_returns_each_job_that_moved_after_the_cursor_once_and_only_of_the_given_teams() {
    let (_dir, store) = open();
    let (start, none) = store.changed_jobs(None, 100, None).expect("cursor");
    assert!(none.is_empty());
    let (a, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    let mut other = new_job("b", 1, 0);
    other.team = "nlp".into();
    let (b, _) = store.submit(&other).expect("submit");
    store.cancel(a, 2).expect("cancel");
    let (after, jobs) = store.changed_jobs(Some(start), 100, None).expect("changes");
    assert_eq!(
        jobs.iter().map(|j| (j.id, j.state)).collect::<Vec<_>>(),
        [(a, JobState::Cancelled), (b, JobState::Pending)]
    );
    assert_eq!(store.changed_jobs(Some(after), 100, None).expect("none").1, vec![], "nothing new");
    let (_, mine) = store.changed_jobs(Some(start), 100, Some(vec!["nlp".into()])).expect("nlp");
    assert_eq!(mine.iter().map(|j| j.id).collect::<Vec<_>>(), [b], "only nlp's job");
    let (part, first) = store.changed_jobs(Some(start), 1, None).expect("one change");
    assert_eq!((part, first.len()), (start + 1, 1), "a limit stops at the changes read");
}

#[test]
fn each_attempt_is_kept_with_its_node_times_and_end_and_its_transitions_are_tagged() {
    let (_dir, store) = open();
    let epoch = register(&*store, 1);
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
    let mut hb = Heartbeat { logs: vec![], node_id: "n1".into(), epoch, gpus: vec![], jobs: vec![] };
    hb.jobs = vec![JobReport { job_id: id, attempt: 1, exit: None }];
    store.heartbeat(&hb, 30).expect("heartbeat");
    // The agent comes back without the attempt: it was lost, and the job is requeued.
    let epoch = register(&*store, 1);
    store.place(&Placement { at: 40, ..whole(id, epoch, &["GPU-0"]) }).expect("place again");
    let exit = Some(JobExit { exit_code: Some(4), reason: None, timed_out: false });
    hb = Heartbeat { epoch, jobs: vec![JobReport { job_id: id, attempt: 2, exit }], ..hb };
    store.heartbeat(&hb, 50).expect("heartbeat");
    let attempts = store.attempts(id).expect("attempts");
    let summary: Vec<_> = attempts
        .iter()
        .map(|a| (a.attempt, a.node_id.as_str(), a.outcome, a.exit_code, a.finished_at))
        .collect();
    assert_eq!(
        summary,
        [
            (1, "n1", Some(JobState::Pending), None, Some(10)),
            (2, "n1", Some(JobState::Failed), Some(4), Some(50))
        ]
    );
    assert_eq!((attempts[0].placed_at, attempts[0].started_at), (20, Some(30)));
    assert!(attempts[0].reason.as_deref().unwrap_or_default().contains("lost"), "{attempts:?}");
    let tagged: Vec<(Option<u32>, JobState)> =
        store.transitions(id).expect("transitions").iter().map(|t| (t.attempt, t.to)).collect();
    assert_eq!(
        tagged,
        [
            (None, JobState::Pending),
            (Some(1), JobState::Scheduled),
            (Some(1), JobState::Running),
            (Some(1), JobState::Pending),
            (Some(2), JobState::Scheduled),
            (Some(2), JobState::Running),
            (Some(2), JobState::Failed),
        ]
    );
}
