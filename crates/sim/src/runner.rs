//! Runs many (policy, seed) pairs of an [`Experiment`] in parallel and aggregates the curves.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use gantry_core::PolicyKind;

use crate::experiment::{Experiment, MAX_BIN, Refused, RunCurve};

/// Mean, spread and quartiles of one quantity over seeds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Stat {
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (ddof = 1; 0 for a single seed).
    pub std: f64,
    /// Median.
    pub median: f64,
    /// 25th percentile.
    pub p25: f64,
    /// 75th percentile.
    pub p75: f64,
}

impl Stat {
    /// Statistics of `values` (not empty).
    pub fn of(values: &[f64]) -> Self {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = if values.len() > 1 {
            values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Self {
            mean,
            std: var.sqrt(),
            median: quantile(&sorted, 0.5),
            p25: quantile(&sorted, 0.25),
            p75: quantile(&sorted, 0.75),
        }
    }
}

/// Linear-interpolated quantile of sorted values (numpy's default).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// All runs of one policy.
#[derive(Debug, Clone)]
pub struct PolicyResult {
    /// The policy.
    pub policy: PolicyKind,
    /// Seeds, in the order of `runs`.
    pub seeds: Vec<u64>,
    /// One curve per seed.
    pub runs: Vec<RunCurve>,
}

impl PolicyResult {
    /// Unallocated GPU % (100 − allocation) at arrived % `bin`, over seeds.
    pub fn unallocated(&self, bin: usize) -> Stat {
        let values: Vec<f64> = self.runs.iter().map(|r| 100.0 - r.alloc_pct[bin.min(MAX_BIN)]).collect();
        Stat::of(&values)
    }

    /// Fragmented GPU share (% of capacity) at arrived % `bin`, over seeds.
    pub fn fragmentation(&self, bin: usize) -> Stat {
        let values: Vec<f64> = self.runs.iter().map(|r| r.frag_pct[bin.min(MAX_BIN)]).collect();
        Stat::of(&values)
    }
}

/// Paired difference of two policies' unallocated GPU % at arrived % `bin` over the same seeds
/// (`a − b`): mean and its standard error. `None` when the seeds differ or fewer than two.
pub fn paired(a: &PolicyResult, b: &PolicyResult, bin: usize) -> Option<(f64, f64)> {
    if a.seeds != b.seeds || a.runs.len() != b.runs.len() || a.runs.len() < 2 {
        return None;
    }
    let bin = bin.min(MAX_BIN);
    let diffs: Vec<f64> =
        a.runs.iter().zip(&b.runs).map(|(x, y)| y.alloc_pct[bin] - x.alloc_pct[bin]).collect();
    let s = Stat::of(&diffs);
    Some((s.mean, s.std / (diffs.len() as f64).sqrt()))
}

/// Runs every policy with every seed on `threads` threads; `progress` is called after each run
/// with the number of runs finished so far. The first placement the ledger refused, if any, is
/// the error.
pub fn run_all(
    experiment: &Experiment,
    policies: &[PolicyKind],
    seeds: &[u64],
    threads: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<PolicyResult>, Refused> {
    let jobs: Vec<(usize, usize)> =
        (0..policies.len()).flat_map(|p| (0..seeds.len()).map(move |s| (p, s))).collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<RunCurve, Refused>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1).min(jobs.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some((p, s)) = jobs.get(j) else { break };
                    let curve = experiment.run(policies[*p], seeds[*s]);
                    if let Ok(mut r) = results.lock() {
                        r[j] = Some(curve);
                    }
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                }
            });
        }
    });
    let all = results.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut curves = Vec::with_capacity(all.len());
    for run in all.into_iter().flatten() {
        curves.push(run?);
    }
    let mut curves = curves.into_iter();
    Ok(policies
        .iter()
        .map(|policy| PolicyResult {
            policy: *policy,
            seeds: seeds.to_vec(),
            runs: curves.by_ref().take(seeds.len()).collect(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_uses_the_sample_standard_deviation() {
        let s = Stat::of(&[1.0, 2.0, 3.0, 4.0]);
        assert!((s.mean - 2.5).abs() < 1e-12);
        assert!((s.std - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert!((s.median - 2.5).abs() < 1e-12);
        assert!((s.p25 - 1.75).abs() < 1e-12);
    }
}
