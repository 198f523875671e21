//! Submissions from many callers at once: the group commit writes them together (on
//! PostgreSQL in bulk, a few statements for a whole run), and each still gets exactly what it
//! would alone: its job or the one its request id names, a `pending` transition, its audit row
//! in one unbroken chain, its place in the counts and the scheduler's change log.

use std::collections::{BTreeMap, BTreeSet};

use gantry_store::audit::verify;
use gantry_store::*;

use crate::{new_job, open};

fn entry(who: &str) -> AuditEntry {
    let actor = Actor { name: who.into(), role: "member".into(), team: Some("default".into()), peer: None };
    AuditEntry { actor, action: "job.submit".into(), target: String::new(), at: 7, credential: None }
}

fn submit(store: &dyn Store, job: NewJob, who: &str) -> Result<(JobId, bool)> {
    match store.apply(Change::Submit(Box::new(job)), entry(who))? {
        Changed::Submitted { id, created } => Ok((id, created)),
        other => panic!("a submission answered {other:?}"),
    }
}

fn chain_holds(store: &dyn Store) {
    let rows = store.audit_rows(0, None, 100_000).expect("rows");
    let head = store.audit_head().expect("head");
    verify(&rows, head.as_ref().map(|(id, h)| (*id, h.as_str()))).expect("one unbroken chain");
}

#[test]
fn submissions_at_once_each_get_their_job_a_transition_an_audit_row_and_a_count() {
    let (_dir, store) = open();
    const THREADS: usize = 16;
    const EACH: usize = 20;
    let barrier = std::sync::Barrier::new(THREADS);
    // Each thread submits its own keys, a key of every thread's (`shared-i`, so one run may hold
    // it twice) and one job without a key.
    let answers: Vec<Vec<(String, JobId, bool)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, barrier) = (&*store, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut out = Vec::new();
                    for i in 0..EACH {
                        let key = if i % 4 == 0 { format!("shared-{i}") } else { format!("t{t}-{i}") };
                        let mut job = new_job(&key, 1, 0);
                        if i == EACH - 1 {
                            job.spec.request_id = None;
                        }
                        let (id, created) = submit(store, job, &format!("user{t}")).expect("submitted");
                        out.push((if i == EACH - 1 { format!("none-{t}") } else { key }, id, created));
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let mut by_key: BTreeMap<String, BTreeSet<(JobId, bool)>> = BTreeMap::new();
    for (key, id, created) in answers.into_iter().flatten() {
        by_key.entry(key).or_default().insert((id, created));
    }
    let mut ids = BTreeSet::new();
    for (key, answers) in &by_key {
        let jobs: BTreeSet<JobId> = answers.iter().map(|a| a.0).collect();
        assert_eq!(jobs.len(), 1, "{key} named one job: {answers:?}");
        assert!(
            answers.contains(&(*jobs.first().expect("one"), true)),
            "{key} was created once: {answers:?}"
        );
        assert!(ids.insert(*jobs.first().expect("one")), "{key}'s job is its own");
    }
    let shared = (0..EACH).filter(|i| i % 4 == 0).count();
    let expected_jobs = THREADS * (EACH - shared) + shared;
    assert_eq!(ids.len(), expected_jobs);

    let jobs = store.jobs(&JobFilter::default()).expect("jobs");
    assert_eq!(jobs.iter().map(|j| j.id).collect::<BTreeSet<_>>(), ids);
    for job in &jobs {
        assert_eq!(job.state, JobState::Pending);
        let t = store.transitions(job.id).expect("transitions");
        assert_eq!(t.len(), 1, "job {} has one transition: {t:?}", job.id);
        assert_eq!((t[0].from, t[0].to, t[0].attempt), (None, JobState::Pending, None));
    }
    let pending: u64 = store
        .job_counts()
        .expect("counts")
        .iter()
        .filter(|(team, state, _)| team == "default" && *state == JobState::Pending)
        .map(|c| c.2)
        .sum();
    assert_eq!(pending, expected_jobs as u64, "the maintained count");
    let (_, watched) = store.changed_jobs(Some(0), 100_000, None).expect("watch log");
    assert_eq!(watched.iter().map(|j| j.id).collect::<BTreeSet<_>>(), ids, "every job is in the watch log");
    let log = store.scheduler_changes(0, 100_000).expect("change log").expect("gap-free from the start");
    assert_eq!(
        log.changed.iter().copied().collect::<BTreeSet<_>>(),
        ids,
        "every job is in the scheduler's log"
    );

    let rows = store.audit_rows(0, None, 100_000).expect("rows");
    assert_eq!(rows.len(), THREADS * EACH, "one audit row a submission, a repeated key's too");
    assert!(rows.iter().all(|r| r.outcome == "ok" && r.action == "job.submit"));
    let targets: BTreeSet<&str> = rows.iter().map(|r| r.target.as_str()).collect();
    let named: BTreeSet<String> = ids.iter().map(|id| format!("job/{id}")).collect();
    assert_eq!(targets, named.iter().map(String::as_str).collect());
    chain_holds(&*store);
}

#[test]
fn a_submission_the_database_cannot_store_fails_alone_beside_others_at_once() {
    let (_dir, store) = open();
    const THREADS: usize = 12;
    let barrier = std::sync::Barrier::new(THREADS);
    let results: Vec<(usize, Result<(JobId, bool)>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, barrier) = (&*store, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut job = new_job(&format!("k{t}"), 1, 0);
                    if t == 5 {
                        // Past what a BIGINT column holds.
                        job.spec.time_limit_s = Some(u64::MAX);
                    }
                    (t, submit(store, job, "alice"))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for (t, result) in &results {
        assert_eq!(result.is_ok(), *t != 5, "submission {t}: {result:?}");
    }
    let jobs = store.jobs(&JobFilter::default()).expect("jobs");
    assert_eq!(jobs.len(), THREADS - 1);
    assert!(jobs.iter().all(|j| j.name != "k5"));
    let rows = store.audit_rows(0, None, 1000).expect("rows");
    assert_eq!(rows.iter().filter(|r| r.outcome == "ok").count(), THREADS - 1);
    assert_eq!(rows.iter().filter(|r| r.outcome.starts_with("error:")).count(), 1, "{rows:?}");
    chain_holds(&*store);
}

/// A job with every field a plain submission carries set.
fn rich(name: &str) -> NewJob {
    let mut job = new_job(name, 2, 1024);
    job.spec.priority = 7;
    job.spec.cpu_milli = 1500;
    job.spec.memory_mib = 2048;
    job.spec.gpu_compute_pct = 50;
    job.spec.env = [("A".to_owned(), "b c".to_owned()), ("Q".to_owned(), "'\"?".to_owned())].into();
    job.spec.time_limit_s = Some(3600);
    job.spec.labels = [("team".to_owned(), "vision".to_owned())].into();
    job.spec.gpu_models = vec!["A100-80GB".into()];
    job.spec.node_selector = [("zone".to_owned(), "a".to_owned())].into();
    job.spec.workdir = Some("/work/dir".into());
    job.spec.chdir = Some("sub".into());
    job.spec.inputs = vec![gantry_api::inputs::Input::new("data", "s3://bucket/train")];
    job.spec.input_secret = Some("s3".into());
    job.spec.outputs = vec![gantry_api::outputs::Output::new("model", "s3://bucket/out")];
    job.spec.output_secret = Some("out".into());
    job.user = Some("alice".into());
    job.service = Some(("web".into(), 1));
    job.submitted_at = 99;
    job
}

#[test]
fn a_job_written_with_others_at_once_is_the_job_written_alone() {
    let (_dir, store) = open();
    // A replica is written only for a service that exists at its generation.
    let spec: ServiceSpec =
        serde_json::from_str(r#"{"name": "web", "port": 8000, "command": ["x"]}"#).expect("a service file");
    let change = Change::ApplyService {
        team: "default".into(),
        digest: "web".into(),
        desired: 1,
        spec: Box::new(spec),
    };
    let actor = Actor { name: "root".into(), role: "admin".into(), team: None, peer: None };
    store
        .apply(
            change,
            AuditEntry {
                actor,
                action: "service.apply".into(),
                target: String::new(),
                at: 1,
                credential: None,
            },
        )
        .expect("apply");
    let (alone, _) = submit(&*store, rich("alone"), "alice").expect("alone");
    const THREADS: usize = 12;
    let barrier = std::sync::Barrier::new(THREADS);
    let ids: Vec<JobId> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, barrier) = (&*store, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    submit(store, rich(&format!("together{t}")), "alice").expect("together").0
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let like = |id: JobId| {
        let mut job = store.job(id).expect("read").expect("stored");
        (job.id, job.name) = (0, String::new());
        job
    };
    let expected = like(alone);
    assert_eq!(expected.inputs.len(), 1);
    assert_eq!(expected.service.as_deref(), Some("web"));
    for id in ids {
        assert_eq!(like(id), expected, "job {id}");
    }
    chain_holds(&*store);
}

#[test]
fn submissions_at_once_never_take_a_team_past_its_pending_limit() {
    let (_dir, store) = open();
    const THREADS: usize = 20;
    let barrier = std::sync::Barrier::new(THREADS);
    let results: Vec<Result<(JobId, bool)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, barrier) = (&*store, &barrier);
                s.spawn(move || {
                    let mut job = new_job(&format!("a{t}"), 0, 0);
                    job.spec.array = Some(gantry_api::workflow::ArraySpec::parse("0-9").expect("array"));
                    job.pending_limit = Some(50);
                    barrier.wait();
                    submit(store, job, "alice")
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let accepted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(accepted, 5, "five arrays of ten fit a limit of 50: {results:?}");
    assert!(
        results.iter().filter_map(|r| r.as_ref().err()).all(|e| matches!(e, StoreError::LimitReached(_))),
        "{results:?}"
    );
    let pending: u64 = store
        .job_counts()
        .expect("counts")
        .iter()
        .filter(|(team, state, _)| team == "default" && *state == JobState::Pending)
        .map(|(_, _, n)| n)
        .sum();
    assert_eq!(pending, 50);
    chain_holds(&*store);
}

#[test]
fn submissions_at_once_never_take_a_team_past_the_bytes_its_pending_jobs_may_store() {
    let (_dir, store) = open();
    const THREADS: usize = 20;
    let barrier = std::sync::Barrier::new(THREADS);
    let arg = "x".repeat(1000);
    let mut one = new_job("probe", 0, 0);
    one.spec.command = vec!["sh".into(), "-c".into(), arg.clone()];
    // The bytes one member stores, as the rows keep them: command and env as JSON.
    let member = (serde_json::to_string(&one.spec.command).expect("json").len()
        + serde_json::to_string(&one.spec.env).expect("json").len()) as u64;
    let results: Vec<Result<(JobId, bool)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, barrier, arg) = (&*store, &barrier, &arg);
                s.spawn(move || {
                    let mut job = new_job(&format!("b{t}"), 0, 0);
                    job.spec.command = vec!["sh".into(), "-c".into(), arg.clone()];
                    job.spec.array = Some(gantry_api::workflow::ArraySpec::parse("0-9").expect("array"));
                    job.pending_bytes_limit = Some(member * 5);
                    barrier.wait();
                    submit(store, job, "alice")
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let accepted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(accepted, 5, "an array stores its command once: five arrays fit five copies: {results:?}");
    assert!(
        results.iter().filter_map(|r| r.as_ref().err()).all(|e| matches!(e, StoreError::LimitReached(_))),
        "{results:?}"
    );
    chain_holds(&*store);
}

#[test]
fn an_arrays_members_read_the_command_and_env_it_stores_once() {
    let (_dir, store) = open();
    let mut job = new_job("sweep", 0, 0);
    job.spec.command = vec!["python3".into(), "train.py".into(), "--lr".into()];
    job.spec.env = [("SEED".to_owned(), "7".to_owned())].into();
    job.spec.array = Some(gantry_api::workflow::ArraySpec::parse("0-3").expect("array"));
    let (head, _) = submit(&*store, job.clone(), "alice").expect("submit");
    let jobs = store.jobs(&JobFilter::default()).expect("jobs");
    assert_eq!(jobs.len(), 4);
    for j in &jobs {
        assert_eq!((&j.command, &j.env), (&job.spec.command, &job.spec.env), "job {} of array {head}", j.id);
    }
    let member = jobs.iter().find(|j| j.id != head).expect("a member");
    assert_eq!(store.job(member.id).expect("read").expect("job").command, job.spec.command);
}
