//! Idle actions: a warning is an event, a requeue a preemption (retries unspent), a cancel ends
//! the job (its event says why); each is audited with its samples.

use gantry_store::*;

use super::{new_job, open, register, whole};

fn system(action: &str, job: JobId) -> AuditEntry {
    let actor = Actor { name: "gantry".into(), role: "system".into(), team: None, peer: None };
    AuditEntry {
        actor,
        action: action.into(),
        target: format!("job/{job} (11 samples)"),
        at: 50,
        credential: None,
    }
}

/// A running job on a 1-GPU node.
fn running(store: &dyn Store) -> (JobId, Heartbeat) {
    let epoch = register(store, 1);
    let (id, _) = store.submit(&new_job("a", 1, 0)).expect("submit");
    store.place(&whole(id, epoch, &["GPU-0"])).expect("place");
    let hb = Heartbeat {
        logs: vec![],
        node_id: "n1".into(),
        epoch,
        gpus: vec![],
        jobs: vec![JobReport { job_id: id, attempt: 1, exit: None }],
    };
    store.heartbeat(&hb, 30).expect("heartbeat");
    (id, hb)
}

fn act(store: &dyn Store, job: JobId, action: &str) -> std::result::Result<Changed, StoreError> {
    let change = Change::IdleAction { job, action: action.into(), evidence: "below 1% for 20 s".into() };
    store.apply(change, system(&format!("job.idle-{action}"), job))
}

#[test]
fn a_warning_is_an_event_and_a_requeue_stops_the_job_without_spending_its_retries() {
    let (_dir, store) = open();
    let (id, mut hb) = running(&*store);
    act(&*store, id, "warn").expect("warn");
    assert_eq!(store.job(id).expect("get").map(|j| j.stop), Some(None), "a warning stops nothing");
    act(&*store, id, "requeue").expect("requeue");
    let job = store.job(id).expect("get").expect("job");
    assert_eq!(job.stop.as_deref(), Some("preempt"));
    assert!(job.reason.as_deref().is_some_and(|r| r.contains("idle (below 1% for 20 s)")), "{job:?}");
    assert!(act(&*store, id, "requeue").is_err(), "once: it is stopping");
    hb.jobs[0].exit = Some(JobExit { exit_code: None, reason: Some("stopped".into()), timed_out: false });
    store.heartbeat(&hb, 60).expect("heartbeat");
    let job = store.job(id).expect("get").expect("job");
    assert_eq!((job.state, job.attempt, job.max_retries), (JobState::Pending, 1, 1), "{job:?}");
    let events = store.events(&EventFilter {
        limit: 20,
        subject: Some(format!("job/{id}")),
        ..EventFilter::default()
    });
    let kinds: Vec<String> = events.expect("events").into_iter().map(|e| e.kind).collect();
    assert!(
        kinds.iter().any(|k| k == "job.idle") && kinds.iter().any(|k| k == "job.idle-requeued"),
        "{kinds:?}"
    );
    let audit = store.audit_rows(0, None, 100).expect("audit");
    assert!(
        audit.iter().any(|r| r.action == "job.idle-requeue" && r.target.contains("samples")),
        "{audit:?}"
    );
}

#[test]
fn a_cancel_ends_the_job_and_its_event_says_why() {
    let (_dir, store) = open();
    let (id, mut hb) = running(&*store);
    act(&*store, id, "cancel").expect("cancel");
    hb.jobs[0].exit = Some(JobExit { exit_code: None, reason: Some("stopped".into()), timed_out: false });
    store.heartbeat(&hb, 60).expect("heartbeat");
    let job = store.job(id).expect("get").expect("job");
    assert_eq!(job.state, JobState::Cancelled, "{job:?}");
    // The reason while it stops; once ended it reads `cancelled`, and the event keeps why.
    let events = store.events(&EventFilter {
        limit: 20,
        subject: Some(format!("job/{id}")),
        ..EventFilter::default()
    });
    let idle = events.expect("events").into_iter().find(|e| e.kind == "job.idle-cancelled").expect("event");
    assert!(idle.message.contains("its GPUs were idle (below 1% for 20 s)"), "{idle:?}");
    assert!(act(&*store, id, "cancel").is_err(), "an ended job is not acted on");
}
