//! `gantry sim jobs --datasets` (issue 22): the three ways of bringing a dataset to the GPUs on
//! an excerpt of a Pollux workload with dataset reuse (one dataset per application).

use std::path::PathBuf;

use gantry_core::queue::QueueWeights;
use gantry_sim::jobs::data::{DataMode, DataSetup, DataStats, read_datasets};
use gantry_sim::jobs::{self, ClusterShape, JobPolicyKind, SimConfig, Workload};

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// The one-GPU jobs of `workload-1.csv` (plain jobs, which the core stages; ncf and cifar10
/// share a dataset each), on a cluster small enough that they queue.
fn excerpt() -> Vec<Workload> {
    let path = testdata().join("traces/pollux-workloads/workloads/workload-1.csv");
    let mut workloads = jobs::read_workloads(&path).expect("workload");
    workloads[0].jobs.retain(|j| j.replicas == 1);
    workloads[0].jobs.truncate(40);
    workloads
}

#[test]
fn staging_holds_no_gpu_idle_and_locality_hides_at_least_as_much_stage_in_time() {
    let datasets = read_datasets(&testdata().join("datasets/pollux.csv")).expect("datasets");
    assert_eq!(datasets["imagenet"].bytes, 154_642_401_280);
    let setup = DataSetup { datasets, bandwidth_bps: 50_000_000, cache_bytes: 1_000_000_000_000 };
    let shape = ClusterShape::parse("4x2xT4").expect("cluster");
    let workloads = excerpt();
    let profiles =
        jobs::load_profiles(&testdata().join("traces/job-profiles"), &shape, &workloads).expect("profiles");
    let weights = QueueWeights::default();
    let config = SimConfig::default();
    let run =
        jobs::Setup { profiles: &profiles, shape: &shape, config, weights: &weights, data: Some(&setup) };
    let report = jobs::run_matrix(&[JobPolicyKind::Gantry], &workloads, run, 2, &|_| {}).expect("runs");
    let modes: Vec<Option<DataMode>> = report.policies.iter().map(|p| p.data).collect();
    assert_eq!(modes, [Some(DataMode::Copy), Some(DataMode::Stage), Some(DataMode::Locality)]);
    let stats: Vec<DataStats> = report.policies.iter().map(|p| p.data_stats().expect("figures")).collect();
    let [copy, stage, local] = [stats[0], stats[1], stats[2]];
    assert!(copy.copy_idle_gpu_s > 0.0 && copy.hidden_share() == 0.0, "{copy:?}");
    for s in [stage, local] {
        assert_eq!(s.copy_idle_gpu_s, 0.0, "a staged job holds no GPU while it copies: {s:?}");
        assert!(s.stagings > 0, "{s:?}");
    }
    assert!(local.hits >= stage.hits, "locality finds the caches: {local:?} vs {stage:?}");
    assert!(local.hidden_share() >= stage.hidden_share(), "{local:?} vs {stage:?}");
    assert!(local.stage_in_s <= stage.stage_in_s, "{local:?} vs {stage:?}");
    for p in &report.policies {
        assert_eq!(p.workloads[0].run.jobs.len(), 40, "every job finished in {}", p.label());
    }
}
