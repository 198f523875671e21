//! Node pools and node labels: which nodes a job may use, and how a pool places work.
//!
//! A node carries labels: the ones its agent declares (`gantry agent --label pool=inference`,
//! repeatable) and facts the node reports, [`GPU_MODEL`] and [`GPU_COUNT`]. Its [`POOL`] label
//! names its pool; a node without one is in pool [`DEFAULT_POOL`]. A job asks for a pool
//! (`--pool NAME`, the same as the selector `pool=NAME`) and may narrow it with label selectors
//! (`--node-selector k=v`, every pair must match); a job that names no pool runs in `default`,
//! as a Slurm job without `-p` runs in the default partition and a Determined task in the
//! default resource pool. A job therefore always places within exactly one pool, and that pool
//! says how: `pack` or `spread` (`gantry pool set NAME --placement …`), and which teams may use
//! it (none named: every team).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::GpuInfo;
use crate::workflow::{MAX_LABELS, check_label};

/// The label naming a node's pool.
pub const POOL: &str = "pool";
/// The pool of nodes without a [`POOL`] label, and of jobs that name none.
pub const DEFAULT_POOL: &str = "default";
/// The fact label with the node's GPU model (characters outside a label value's as `-`).
pub const GPU_MODEL: &str = "gpu.model";
/// The fact label with the node's GPU count.
pub const GPU_COUNT: &str = "gpu.count";
/// The label every node carries with its own id, which a job that mounts a node-local volume
/// selects (`gantry_api::volumes`).
pub const NODE_ID: &str = "node.id";

/// Checks the labels an agent declares: label rules, at most 32, none of the fact labels
/// (the node reports those itself).
pub fn check_node_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    if labels.len() > MAX_LABELS {
        return Err(format!("labels: at most {MAX_LABELS}"));
    }
    for (k, v) in labels {
        check_label(k, v)?;
        if k == GPU_MODEL || k == GPU_COUNT || k == NODE_ID {
            return Err(format!("label: `{k}` is a fact the node reports itself; it cannot be declared"));
        }
        if k == POOL && v.is_empty() {
            return Err("label: `pool` needs a pool name (e.g. `pool=inference`)".into());
        }
    }
    Ok(())
}

/// A node's labels: the declared ones, its pool (`default` when not declared) and its facts.
pub fn node_labels(declared: &BTreeMap<String, String>, gpus: &[&GpuInfo]) -> BTreeMap<String, String> {
    let mut labels = declared.clone();
    labels.entry(POOL.to_owned()).or_insert_with(|| DEFAULT_POOL.to_owned());
    if let Some(g) = gpus.first() {
        let model: String = g
            .model
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '-' })
            .collect();
        labels.insert(GPU_MODEL.to_owned(), model.chars().take(63).collect());
    }
    labels.insert(GPU_COUNT.to_owned(), gpus.len().to_string());
    labels
}

/// The labels a job's node selector is matched against: [`node_labels`] and the node's id
/// ([`NODE_ID`]).
pub fn node_facts(
    node: &str,
    declared: &BTreeMap<String, String>,
    gpus: &[&GpuInfo],
) -> BTreeMap<String, String> {
    let mut labels = node_labels(declared, gpus);
    labels.insert(NODE_ID.to_owned(), node.to_owned());
    labels
}

/// The pool a job's node selector names (`default` when it names none).
pub fn pool_of(selector: &BTreeMap<String, String>) -> &str {
    selector.get(POOL).map_or(DEFAULT_POOL, String::as_str)
}

/// Whether a node with `labels` (as [`node_labels`] gives them) may take a job with `selector`:
/// every pair matches, and the node is in the job's pool.
pub fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    labels.get(POOL).map(String::as_str) == Some(pool_of(selector))
        && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A job's node selector from its `--pool` and `--node-selector` (the pool folded in as
/// `pool=NAME`); an error names a pool given twice and differently, or a bad pair.
pub fn job_selector(
    pool: Option<&str>,
    selector: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = selector.clone();
    if let Some(pool) = pool {
        check_label(POOL, pool)
            .map_err(|_| format!("pool: `{pool}` is not a pool name (letters, digits, '-', '_', '.')"))?;
        if pool.is_empty() {
            return Err("pool: empty".into());
        }
        match out.insert(POOL.to_owned(), pool.to_owned()) {
            Some(other) if other != pool => {
                return Err(format!("pool: `{pool}` and the node selector's `pool={other}` differ"));
            }
            _ => {}
        }
    }
    if out.len() > MAX_LABELS {
        return Err(format!("node_selector: at most {MAX_LABELS} pairs"));
    }
    for (k, v) in &out {
        check_label(k, v).map_err(|e| format!("node_selector: {e}"))?;
    }
    Ok(out)
}

/// How a pool chooses among its nodes for a job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum PoolPlacement {
    /// Fill partly used nodes first, fragmentation-aware (the scheduler's policy; the default).
    #[default]
    Pack,
    /// The least allocated node, then its least used GPU: balanced load.
    Spread,
}

impl PoolPlacement {
    /// `pack` or `spread`.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolPlacement::Pack => "pack",
            PoolPlacement::Spread => "spread",
        }
    }

    /// Parses `pack` or `spread`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "pack" => Some(PoolPlacement::Pack),
            "spread" => Some(PoolPlacement::Spread),
            _ => None,
        }
    }
}

impl std::fmt::Display for PoolPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pool's settings as stored (`gantry pool set`); a pool nobody set packs and admits every
/// team.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Pool {
    /// Its name (the nodes' `pool` label).
    pub name: String,
    /// How it places jobs.
    pub placement: PoolPlacement,
    /// Teams that may place jobs in it (empty: every team).
    #[serde(default)]
    pub teams: Vec<String>,
}

impl Pool {
    /// Whether `team` may place jobs here.
    pub fn admits(&self, team: &str) -> bool {
        self.teams.is_empty() || self.teams.iter().any(|t| t == team)
    }
}

/// Set a pool's placement and teams (`PUT /v1/pools/{name}`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PoolRequest {
    /// `pack` (default) or `spread`.
    #[serde(default)]
    pub placement: PoolPlacement,
    /// Teams that may place jobs in it; none: every team. Left as it was when absent.
    #[serde(default)]
    pub teams: Option<Vec<String>>,
}

/// A pool as `gantry pools` lists it: its settings, nodes and GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolView {
    /// Settings.
    #[serde(flatten)]
    pub pool: Pool,
    /// Its nodes' ids.
    pub nodes: Vec<String>,
    /// Its GPUs.
    pub gpus: u32,
    /// Its GPUs not allocated.
    pub gpus_free: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_node_without_a_pool_label_is_in_the_default_pool_and_reports_its_gpus() {
        let gpu =
            GpuInfo { uuid: "GPU-1".into(), index: 0, model: "NVIDIA A100-SXM4-80GB".into(), memory_mib: 1 };
        let labels = node_labels(&map(&[("rack", "r1")]), &[&gpu, &gpu]);
        assert_eq!(
            labels,
            map(&[
                ("gpu.count", "2"),
                ("gpu.model", "NVIDIA-A100-SXM4-80GB"),
                ("pool", "default"),
                ("rack", "r1")
            ])
        );
    }

    #[test]
    fn a_job_selects_only_nodes_of_its_pool_that_match_every_pair() {
        let inference = map(&[("pool", "inference"), ("rack", "r1")]);
        let default = map(&[("pool", "default"), ("rack", "r1")]);
        assert!(selects(&map(&[]), &default));
        assert!(!selects(&map(&[]), &inference), "no pool named: the default pool");
        assert!(selects(&map(&[("pool", "inference")]), &inference));
        assert!(!selects(&map(&[("pool", "inference"), ("rack", "r2")]), &inference));
    }

    #[test]
    fn a_pool_given_twice_must_agree_and_bad_pairs_are_named() {
        let sel = job_selector(Some("inference"), &map(&[("rack", "r1")])).expect("valid");
        assert_eq!(sel, map(&[("pool", "inference"), ("rack", "r1")]));
        let err = job_selector(Some("a"), &map(&[("pool", "b")])).expect_err("differ");
        assert!(err.contains("differ"), "{err}");
        assert!(job_selector(Some("a b"), &map(&[])).is_err());
        assert!(check_node_labels(&map(&[("gpu.count", "8")])).is_err(), "facts are not declared");
    }
}
