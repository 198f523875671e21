//! `--trace`: a Pollux/Sia workload as if it were the cluster's history.
//!
//! Each job runs the time its Pollux profile gives for its requested GPUs packed onto the
//! fewest nodes of `--cluster` (the run an unshared cluster would give it); the fleet is
//! `--cluster`, every job arrives when the workload says and belongs to one team. There is no
//! recorded outcome, so the `recorded` column stays empty.

use std::path::Path;

use anyhow::Context;
use gantry_sim::jobs::{self, ClusterShape, engine::packed};
use gantry_sim::whatif::{Fleet, FleetNode, Observed, ReplayJob};

use super::history::Recorded;

/// Reads `path` and the profiles of its applications on `shape`'s GPU model.
pub fn convert(path: &Path, shape: &ClusterShape, profiles: Option<&Path>) -> anyhow::Result<Recorded> {
    let workloads = jobs::read_workloads(path)?;
    let dir = match profiles {
        Some(d) => d.to_path_buf(),
        None => jobs::find_profiles(path).with_context(|| {
            format!("no job-profiles/ directory beside or above {}; pass --profiles DIR", path.display())
        })?,
    };
    let profiles = jobs::load_profiles(&dir, shape, &workloads)?;
    let mut out = Recorded {
        jobs: Vec::new(),
        fleet: Fleet {
            nodes: (0..shape.nodes)
                .map(|i| FleetNode {
                    name: format!("node-{i}"),
                    gpus: shape.gpus_per_node,
                    model: shape.model.clone(),
                })
                .collect(),
        },
        teams: Vec::new(),
        observed: Observed::default(),
        pass_delay_s: 0.0,
        left_out: 0,
        cpu_only: 0,
    };
    let first = workloads.first().context("the workload has no file")?;
    for (i, row) in first.jobs.iter().enumerate() {
        let Some(app) = profiles.get(&row.app) else {
            out.left_out += 1;
            continue;
        };
        let run_s = app.ideal_seconds(&packed(row.replicas, shape.gpus_per_node), row.batch, 0.0, 0);
        out.jobs.push(ReplayJob {
            id: i as u64,
            team: row.team.clone().unwrap_or_else(|| "default".into()),
            key: row.app.clone(),
            priority: row.priority,
            gpus: row.replicas,
            gpus_per_worker: if row.replicas > shape.gpus_per_node { 1 } else { 0 },
            submit_s: row.submit,
            run_s,
            ran_on: Some(shape.model.clone()),
            ..ReplayJob::default()
        });
    }
    Ok(out)
}
