//! Arrays, labels, dependencies and the ledger of GPU time used.

use std::collections::BTreeMap;

use gantry_store::*;

use super::{new_job, open, register};

fn entry() -> AuditEntry {
    AuditEntry {
        actor: Actor::default(),
        action: "test".into(),
        target: String::new(),
        at: 50,
        credential: None,
    }
}

#[test]
fn an_array_is_one_job_per_index_and_its_first_members_id_is_the_arrays() {
    let (_dir, store) = open();
    let mut spec = new_job("arr", 1, 0);
    spec.spec.array = Some(ArraySpec::parse("0-4%2").expect("valid"));
    let (head, created) = store.submit(&spec).expect("submit");
    assert!(created);
    let members = store.jobs(&JobFilter { array: Some(head), ..JobFilter::default() }).expect("list");
    let got: Vec<(JobId, u32, Option<u32>)> =
        members.iter().map(|j| j.array.map(|a| (a.id, a.index, a.max_running)).expect("member")).collect();
    assert_eq!(got, (0..5).map(|i| (head, i, Some(2))).collect::<Vec<_>>());
    assert_eq!(members[0].id, head);
    assert_eq!(store.submit(&spec).expect("again"), (head, false), "the request id makes it one array");
    assert_eq!(store.jobs(&JobFilter::default()).expect("all").len(), 5);
}

#[test]
fn cancelling_an_array_cancels_every_unfinished_member_and_only_those() {
    let (_dir, store) = open();
    let other = store.submit(&new_job("other", 1, 0)).expect("submit").0;
    let mut spec = new_job("arr", 1, 0);
    spec.spec.array = Some(ArraySpec::parse("1,3,5").expect("valid"));
    let head = store.submit(&spec).expect("submit").0;
    let members = store.jobs(&JobFilter { array: Some(head), ..JobFilter::default() }).expect("list");
    store.cancel(members[1].id, 5).expect("cancel one");
    store.apply(Change::CancelArray(members[2].id), entry()).expect("cancel the array");
    let states: Vec<JobState> = store
        .jobs(&JobFilter { array: Some(head), ..JobFilter::default() })
        .expect("list")
        .iter()
        .map(|j| j.state)
        .collect();
    assert_eq!(states, [JobState::Cancelled; 3]);
    assert_eq!(store.job(other).expect("get").map(|j| j.state), Some(JobState::Pending));
    assert!(matches!(store.apply(Change::CancelArray(head), entry()), Err(StoreError::Conflict(_))));
}

#[test]
fn a_label_selector_keeps_the_jobs_carrying_every_pair() {
    let (_dir, store) = open();
    let labelled = |key: &str, pairs: &[(&str, &str)]| {
        let mut job = new_job(key, 0, 0);
        job.spec.labels = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        job
    };
    let a = store.submit(&labelled("a", &[("exp", "lr"), ("seed", "1")])).expect("a").0;
    let b = store.submit(&labelled("b", &[("exp", "lr")])).expect("b").0;
    store.submit(&labelled("c", &[("exp", "bs")])).expect("c");
    let select = |pairs: &[(&str, &str)]| -> Vec<JobId> {
        let labels: BTreeMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        store
            .jobs(&JobFilter { labels, ..JobFilter::default() })
            .expect("list")
            .iter()
            .map(|j| j.id)
            .collect()
    };
    assert_eq!(select(&[("exp", "lr")]), [a, b]);
    assert_eq!(select(&[("exp", "lr"), ("seed", "1")]), [a]);
    assert!(select(&[("exp", "nope")]).is_empty());
    assert_eq!(select(&[]).len(), 3);
}

#[test]
fn a_job_whose_dependency_failed_ends_cancelled_with_the_reason() {
    let (_dir, store) = open();
    let dep = Dependency { kind: DependencyKind::Ok, job: 1 };
    let mut job = new_job("a", 0, 0);
    job.spec.after = vec![dep];
    let id = store.submit(&job).expect("submit").0;
    assert_eq!(store.job(id).expect("get").expect("exists").after, [dep]);
    store.dependency_failed(id, "dependency 1 failed", 60).expect("end");
    let job = store.job(id).expect("get").expect("exists");
    assert_eq!((job.state, job.reason.as_deref()), (JobState::Cancelled, Some("dependency 1 failed")));
    assert!(matches!(store.dependency_failed(id, "again", 61), Err(StoreError::Conflict(_))));
}

/// One heartbeat of the scenario: time, utilisation of GPU-0 and GPU-1, the job that exits.
type Beat = (i64, f64, f64, Option<JobId>);

#[test]
fn gpu_time_used_equals_the_samples_replayed_independently() {
    let (_dir, store) = open();
    let epoch = register(&*store, 2);
    let submit = |key: &str, team: &str, gpus, mib| {
        let job = NewJob { team: team.into(), ..new_job(key, gpus, mib) };
        store.submit(&job).expect("submit").0
    };
    // (job, gpu, share, placed at): a whole GPU for team a, two slices sharing GPU-1 for team b.
    let a = submit("a", "a", 1, 0);
    let b = submit("b", "b", 0, 20_000);
    let c = submit("c", "b", 0, 10_000);
    let plan = [(a, "GPU-0", 1000, 1_000), (b, "GPU-1", 500, 5_000), (c, "GPU-1", 300, 9_000)];
    for (job, gpu, share, at) in plan {
        let grant = Grant { uuid: gpu.into(), share_milli: share, memory_mib: 1000 };
        let placement = Placement { job_id: job, node_id: "n1".into(), epoch, grants: vec![grant], at };
        store.place(&placement).expect("place");
    }
    // Irregular beats: a first sample, a silence longer than a minute, an hour boundary, an exit.
    let beats: [Beat; 7] = [
        (2_000, 10.0, 50.0, None),
        (3_590_000, 90.0, 100.0, None),
        (3_610_000, 80.0, 40.0, None),
        (3_615_500, 100.0, 0.0, None),
        (3_650_000, 70.0, 60.0, Some(a)),
        (3_660_000, 99.0, 30.0, None),
        (3_700_000, 55.5, 25.0, Some(b)),
    ];
    for (at, u0, u1, exit) in beats {
        let sample = |u: f64| Some(serde_json::json!({ "sample": { "gpu_util_percent": u } }));
        let gpus = vec![
            GpuReport { uuid: "GPU-0".into(), health: GpuHealth::Healthy, sample: sample(u0) },
            GpuReport { uuid: "GPU-1".into(), health: GpuHealth::Healthy, sample: sample(u1) },
        ];
        let done = JobExit { exit_code: Some(0), reason: None, timed_out: false };
        let reports: Vec<JobReport> =
            exit.map(|job| JobReport { job_id: job, attempt: 1, exit: Some(done) }).into_iter().collect();
        let hb = Heartbeat { node_id: "n1".into(), epoch, gpus, jobs: reports, logs: vec![] };
        store.heartbeat(&hb, at).expect("heartbeat");
    }
    for since in [0, 3_600_000] {
        let expected = replay(&plan, &beats, since);
        assert!(expected.len() == 2 && expected.values().all(|h| *h > 0.0), "{expected:?}");
        let usage = store.usage(since, 10_000_000, false, None).expect("usage");
        for (team, hours) in expected {
            let row = usage.iter().find(|u| u.team == team).expect("a row per team");
            assert!(
                (row.used_gpu_hours - hours).abs() < 1e-9,
                "team {team} since {since}: {} vs {hours}",
                row.used_gpu_hours
            );
            assert!(row.used_gpu_hours <= row.gpu_hours + 1e-9, "used never exceeds allocated");
            assert!((row.waste_gpu_hours - (row.gpu_hours - row.used_gpu_hours).max(0.0)).abs() < 1e-9);
        }
    }
}

/// The rule of `sqlite::workflow` (and `docs/control-plane.md`) applied to the scenario without the store: each sample
/// covers the time since the GPU's previous one (at most a minute), charged to every allocation
/// then held on the GPU for the part it was held, times utilisation and share, by the hour the
/// interval's pieces start in; hours starting before `since`'s hour do not count.
fn replay(plan: &[(JobId, &str, u32, i64)], beats: &[Beat], since: i64) -> BTreeMap<String, f64> {
    const HOUR: i64 = 3_600_000;
    let team = |job: JobId| if job == plan[0].0 { "a" } else { "b" };
    let released = |job: JobId| beats.iter().find(|b| b.3 == Some(job)).map(|b| b.0);
    let mut used: BTreeMap<String, f64> = BTreeMap::new();
    for (i, (at, u0, u1, _)) in beats.iter().enumerate() {
        let Some(prev) = i.checked_sub(1).map(|p| beats[p].0) else { continue };
        let from = prev.max(at - 60_000);
        for (job, gpu, share, placed) in plan {
            let util = if *gpu == "GPU-0" { *u0 } else { *u1 };
            let held = *placed < *at && released(*job).is_none_or(|r| r >= *at);
            if !held {
                continue;
            }
            let mut t = from.max(*placed);
            while t < *at {
                let end = (*at).min((t / HOUR + 1) * HOUR);
                if (t / HOUR) * HOUR >= (since / HOUR) * HOUR {
                    let milli_ms = ((end - t) as f64 * f64::from(*share) * util / 100.0).round();
                    *used.entry(team(*job).to_owned()).or_default() += milli_ms / 1000.0 / 3_600_000.0;
                }
                t = end;
            }
        }
    }
    used
}

/// The cost of the used-GPU-time ledger on heartbeats: 8 GPUs, each held by a job, heartbeats
/// with utilisation samples (charged) against the same heartbeats without (nothing charged), in
/// the same run. Prints the ratio; asserts nothing about time.
#[test]
#[ignore = "benchmark: cargo test -p gantry-store --test it -- --ignored heartbeat_cost --nocapture"]
fn heartbeat_cost_of_the_used_gpu_time_ledger() {
    let (_dir, store) = open();
    let epoch = register(&*store, 8);
    for i in 0..8u32 {
        let id = store.submit(&new_job(&format!("j{i}"), 1, 0)).expect("submit").0;
        let grant = Grant { uuid: format!("GPU-{i}"), share_milli: 1000, memory_mib: 1000 };
        let placement = Placement { job_id: id, node_id: "n1".into(), epoch, grants: vec![grant], at: 20 };
        store.place(&placement).expect("place");
    }
    let beats = 1000;
    let run = |sampled: bool, start: i64| {
        let began = std::time::Instant::now();
        for k in 0..beats {
            let sample = sampled.then(|| serde_json::json!({ "sample": { "gpu_util_percent": 50.0 } }));
            let gpus = (0..8)
                .map(|i| GpuReport {
                    uuid: format!("GPU-{i}"),
                    health: GpuHealth::Healthy,
                    sample: sample.clone(),
                })
                .collect();
            let at = start + k * 1000;
            store
                .heartbeat(&Heartbeat { node_id: "n1".into(), epoch, gpus, jobs: vec![], logs: vec![] }, at)
                .expect("hb");
        }
        began.elapsed().as_secs_f64() / f64::from(beats as u32)
    };
    let without = run(false, 1_000);
    let with = run(true, 10_000_000);
    println!(
        "heartbeat of 8 held GPUs: {:.3} ms without samples, {:.3} ms with (ledger charged), ratio {:.2}",
        without * 1e3,
        with * 1e3,
        with / without
    );
}

#[test]
fn data_stalls_are_charged_to_the_judged_job_by_its_share_and_a_forged_share_is_clamped() {
    let (_dir, store) = open();
    let epoch = register(&*store, 2);
    let a = store.submit(&new_job("a", 1, 0)).expect("submit").0;
    let b = store.submit(&new_job("b", 1, 0)).expect("submit").0;
    for (job, gpu) in [(a, "GPU-0"), (b, "GPU-1")] {
        let grant = Grant { uuid: gpu.into(), share_milli: 1000, memory_mib: 1000 };
        store
            .place(&Placement { job_id: job, node_id: "n1".into(), epoch, grants: vec![grant], at: 1_000 })
            .expect("place");
    }
    assert_eq!(store.gpu_stall_of_job(a).expect("stall"), (0, 0), "never judged");
    // Every 10 s: job a's GPU judged lost 0.4 (then a forged 7.0, clamped to 1); job b's GPU
    // carries a verdict for another job only, so b is not judged.
    let beats = [(2_000, 0.4), (12_000, 0.4), (22_000, 0.4), (32_000, 7.0)];
    for (at, lost) in beats {
        let stalls = |job: JobId| serde_json::json!({ job.to_string(): { "lost": lost, "activity": 0.0 } });
        let gpus = vec![
            GpuReport {
                uuid: "GPU-0".into(),
                health: GpuHealth::Healthy,
                sample: Some(
                    serde_json::json!({ "sample": { "gpu_util_percent": 50.0 }, "stalls": stalls(a) }),
                ),
            },
            GpuReport {
                uuid: "GPU-1".into(),
                health: GpuHealth::Healthy,
                sample: Some(
                    serde_json::json!({ "sample": { "gpu_util_percent": 50.0 }, "stalls": stalls(a) }),
                ),
            },
        ];
        let hb = Heartbeat { node_id: "n1".into(), epoch, gpus, jobs: vec![], logs: vec![] };
        store.heartbeat(&hb, at).expect("heartbeat");
    }
    // The first beat starts the intervals: 3 × 10 s judged, 0.4 + 0.4 + 1.0 of them lost.
    let (measured, stalled) = store.gpu_stall_of_job(a).expect("stall");
    assert_eq!((measured, stalled), (30_000 * 1000, 18_000 * 1000));
    assert_eq!(store.gpu_stall_of_job(b).expect("stall"), (0, 0), "another job's verdict is not b's");
    assert_eq!(store.gpu_stalls_held().expect("held"), vec![(a, 30_000 * 1000, 18_000 * 1000)]);
    let usage = store.usage(0, 100_000, false, None).expect("usage");
    let hours = 18_000.0 / 3_600_000.0;
    let stalled_h: f64 = usage.iter().map(|u| u.stalled_gpu_hours).sum();
    assert!((stalled_h - hours).abs() < 1e-12, "{usage:?}");
}
