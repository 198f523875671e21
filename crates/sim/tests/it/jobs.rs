//! The job-completion simulator on the Pollux workloads (the copy in `testdata/`):
//! Tiresias reproduces the artifact's published JCT of every job at every load, and Gantry's queue
//! beats it without knowing durations.

use std::collections::HashMap;
use std::path::PathBuf;

use gantry_core::queue::QueueWeights;
use gantry_sim::jobs::{self, ClusterShape, JobPolicyKind, Report, SimConfig};

fn traces() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    assert!(path.is_dir(), "{} is missing from the repository", path.display());
    path
}

fn run(load: &str, policies: &[JobPolicyKind]) -> Report {
    let folder = if load == "1.0" { "workloads".to_string() } else { format!("workloads-{load}") };
    run_dir(&traces().join("traces/pollux-workloads").join(folder), policies)
}

fn run_dir(dir: &std::path::Path, policies: &[JobPolicyKind]) -> Report {
    let shape = ClusterShape::parse("16x4xT4").expect("cluster");
    let workloads = jobs::read_workloads(dir).expect("workloads");
    let profiles =
        jobs::load_profiles(&traces().join("traces/job-profiles"), &shape, &workloads).expect("profiles");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let weights = QueueWeights::default();
    let setup = jobs::Setup {
        profiles: &profiles,
        shape: &shape,
        config: SimConfig::default(),
        weights: &weights,
        data: None,
    };
    jobs::run_matrix(policies, &workloads, setup, threads, &|_| {}).expect("simulation")
}

/// Published per-job JCTs: workload → job → seconds.
fn oracle(load: &str) -> HashMap<String, HashMap<String, f64>> {
    let path = traces().join(format!("reference/pollux-results/tiresias-{load}.json"));
    let text = std::fs::read_to_string(&path).expect("oracle file");
    let value: serde_json::Value = serde_json::from_str(&text).expect("oracle json");
    let jcts = value["jcts"].as_object().expect("jcts object");
    jcts.iter()
        .map(|(w, jobs)| {
            let jobs = jobs.as_object().expect("jobs object");
            (w.clone(), jobs.iter().map(|(j, v)| (j.clone(), v.as_f64().expect("number"))).collect())
        })
        .collect()
}

fn assert_reproduces(load: &str, published_mean: f64) {
    let report = run(load, &[JobPolicyKind::Tiresias]);
    let expected = oracle(load);
    let mut checked = 0;
    for w in &report.policies[0].workloads {
        let want = &expected[w.file.trim_end_matches(".csv")];
        for job in &w.run.jobs {
            assert!(
                (job.jct_s - want[&job.name]).abs() < 0.5,
                "{} {}: {} vs {}",
                w.file,
                job.name,
                job.jct_s,
                want[&job.name]
            );
            checked += 1;
        }
    }
    assert_eq!(checked, expected.values().map(HashMap::len).sum::<usize>());
    assert!((report.policies[0].avg_jct() - published_mean).abs() < 0.1);
}

#[test]
fn tiresias_reproduces_every_published_jct_at_load_one() {
    assert_reproduces("1.0", 4038.18203125);
}

#[test]
fn tiresias_reproduces_every_published_jct_at_half_and_one_and_a_half_load() {
    assert_reproduces("0.5", 2091.4921875);
    assert_reproduces("1.5", 6182.35);
}

#[test]
fn gantry_beats_tiresias_at_every_load_without_knowing_durations() {
    for load in ["0.5", "1.0", "1.5"] {
        let report = run(load, &[JobPolicyKind::Tiresias, JobPolicyKind::Gantry]);
        let (tiresias, gantry) = (report.policies[0].avg_jct(), report.policies[1].avg_jct());
        assert!(gantry < tiresias, "load {load}: gantry {gantry:.0} s vs tiresias {tiresias:.0} s");
    }
}

#[test]
fn the_oracle_bound_srtf_beats_fifo_and_every_job_finishes() {
    let report = run("0.5", &[JobPolicyKind::Fifo, JobPolicyKind::Srtf]);
    assert!(report.policies[1].avg_jct() < report.policies[0].avg_jct());
    for p in &report.policies {
        for w in &p.workloads {
            assert!(w.run.jobs.iter().all(|j| j.end_s as f64 > j.submit_s && j.start_s <= j.end_s));
        }
    }
}
