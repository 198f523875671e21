//! Figures of a replay, side by side: recorded, the unchanged fleet, the changed one.
//!
//! Per fleet and per team: queue wait (first submission to running) p50/p95/mean, job
//! completion time (submission to end) mean/p99, GPU allocation (GPU-seconds held over the
//! fleet's GPU-seconds in the span), GPU use (held × measured utilisation, where measured),
//! fragmented GPUs (the time-average of idle GPUs while some job waited: GPUs there were but
//! that no waiting job could take) and cost per used GPU-hour (`--price`). A replayed figure
//! is the mean over seeds, with its lowest and highest value over seeds beside it.

use std::collections::HashMap;

use gantry_core::resources::model_matches;
use serde::Serialize;

use super::engine::{Replayed, Settings, replay};
use super::fleet::Fleet;
use super::speed::{SpeedModel, SpeedSource};
use super::{ReplayJob, perturbed};

/// One fleet's (or one team's) figures.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Summary {
    /// Jobs counted.
    pub jobs: usize,
    /// Mean queue wait, s.
    pub wait_mean_s: f64,
    /// Median queue wait, s.
    pub wait_p50_s: f64,
    /// 95th percentile of queue wait, s.
    pub wait_p95_s: f64,
    /// Mean job completion time, s.
    pub jct_mean_s: f64,
    /// 99th percentile of job completion time, s.
    pub jct_p99_s: f64,
    /// GPU-seconds held over the fleet's GPU-seconds, %.
    pub gpu_allocation_pct: f64,
    /// Held GPU-seconds weighted by measured utilisation, over the fleet's, % (jobs without
    /// samples count as unused; none when no job has any).
    pub gpu_use_pct: Option<f64>,
    /// Time-averaged idle GPUs while some job waited (none for the recorded history).
    pub fragmented_gpus: Option<f64>,
    /// The fleet's price over the GPU-hours used (none without `--price` for every model).
    pub cost_per_used_gpu_hour: Option<f64>,
    /// GPUs in the fleet.
    pub gpus: u32,
    /// Jobs the fleet could never place (too large, or a GPU model it lacks).
    pub unplaceable: usize,
    /// Jobs whose run time on a new model nothing measured (kept as recorded).
    pub guessed_run_times: usize,
    /// Lowest and highest value over seeds of the mean figures, when more than one seed ran.
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub intervals: HashMap<&'static str, [f64; 2]>,
}

/// One team's rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamRow {
    /// The team.
    pub team: String,
    /// As recorded.
    pub recorded: Summary,
    /// Replayed on the unchanged fleet.
    pub baseline: Summary,
    /// Replayed on the changed fleet.
    pub changed: Summary,
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The history as it happened.
    pub recorded: Summary,
    /// The history replayed on the unchanged fleet (how far the replay is from `recorded`).
    pub baseline: Summary,
    /// The history replayed on the changed fleet.
    pub changed: Summary,
    /// Per team.
    pub teams: Vec<TeamRow>,
    /// Seeds run.
    pub seeds: u64,
    /// Every job's queue wait, s: recorded, baseline and changed (seed 0), for CDFs.
    #[serde(skip)]
    pub waits: [Vec<f64>; 3],
}

/// One job's figures in a run.
#[derive(Debug, Clone, Copy)]
struct Sample {
    wait_s: f64,
    jct_s: f64,
    held_gpu_s: f64,
    used_gpu_s: Option<f64>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Prices per GPU-hour by model name as `--price` gives them.
pub type Prices = [(String, f64)];

fn fleet_price_per_s(fleet: &Fleet, prices: &Prices) -> Option<f64> {
    fleet.nodes.iter().try_fold(0.0, |sum, n| {
        let price = prices.iter().find(|(m, _)| model_matches(m, &n.model) || model_matches(&n.model, m))?.1;
        Some(sum + price * f64::from(n.gpus) / 3_600.0)
    })
}

struct Window {
    fleet_gpus: u32,
    span_s: f64,
    price_per_s: Option<f64>,
}

fn summarize(samples: &[Sample], w: &Window) -> Summary {
    let mut waits: Vec<f64> = samples.iter().map(|s| s.wait_s).collect();
    let mut jcts: Vec<f64> = samples.iter().map(|s| s.jct_s).collect();
    waits.sort_by(f64::total_cmp);
    jcts.sort_by(f64::total_cmp);
    let n = samples.len().max(1) as f64;
    let capacity = f64::from(w.fleet_gpus) * w.span_s.max(1e-9);
    let held: f64 = samples.iter().map(|s| s.held_gpu_s).sum();
    // Jobs without samples count as unused; with none sampled at all there is no figure.
    let used: Option<f64> = samples
        .iter()
        .any(|s| s.used_gpu_s.is_some())
        .then(|| samples.iter().filter_map(|s| s.used_gpu_s).sum());
    let used_or_held = used.unwrap_or(held);
    Summary {
        jobs: samples.len(),
        wait_mean_s: waits.iter().sum::<f64>() / n,
        wait_p50_s: quantile(&waits, 0.5),
        wait_p95_s: quantile(&waits, 0.95),
        jct_mean_s: jcts.iter().sum::<f64>() / n,
        jct_p99_s: quantile(&jcts, 0.99),
        gpu_allocation_pct: 100.0 * held / capacity,
        gpu_use_pct: used.map(|u| 100.0 * u / capacity),
        cost_per_used_gpu_hour: w
            .price_per_s
            .filter(|_| used_or_held > 0.0)
            .map(|p| p * w.span_s / (used_or_held / 3_600.0)),
        gpus: w.fleet_gpus,
        ..Summary::default()
    }
}

/// The recorded history's figures, per team too (`None` team: all jobs).
pub fn summarize_recorded(jobs: &[ReplayJob], fleet: &Fleet, prices: &Prices, team: Option<&str>) -> Summary {
    let start = jobs.iter().map(|j| j.submit_s).fold(f64::INFINITY, f64::min);
    let end = jobs.iter().filter_map(|j| j.recorded.map(|r| r.1)).fold(start, f64::max);
    let samples: Vec<Sample> = jobs
        .iter()
        .filter(|j| team.is_none_or(|t| j.team == t))
        .filter_map(|j| {
            let (started, ended) = j.recorded?;
            let held = f64::from(j.gpus) * (ended - (started - j.start_delay_s)).max(0.0);
            Some(Sample {
                wait_s: started - j.submit_s,
                jct_s: ended - j.submit_s,
                held_gpu_s: held,
                used_gpu_s: j.util.map(|u| u * held),
            })
        })
        .collect();
    let w = Window {
        fleet_gpus: fleet.gpus(),
        span_s: (end - start).max(0.0),
        price_per_s: fleet_price_per_s(fleet, prices),
    };
    summarize(&samples, &w)
}

fn replayed_summary(
    jobs: &[ReplayJob],
    run: &Replayed,
    fleet: &Fleet,
    prices: &Prices,
    team: Option<&str>,
) -> Summary {
    let samples: Vec<Sample> = run
        .outcomes
        .iter()
        .filter(|o| team.is_none_or(|t| jobs[o.job].team == t))
        .map(|o| {
            let j = &jobs[o.job];
            let held = f64::from(j.gpus) * (o.end_s - (o.start_s - j.start_delay_s)).max(0.0);
            Sample {
                wait_s: o.start_s - j.submit_s,
                jct_s: o.end_s - j.submit_s,
                held_gpu_s: held,
                used_gpu_s: j.util.map(|u| u * held),
            }
        })
        .collect();
    let span = run.span_s.1 - run.span_s.0;
    let w = Window {
        fleet_gpus: fleet.gpus(),
        span_s: span.max(0.0),
        price_per_s: fleet_price_per_s(fleet, prices),
    };
    let mut s = summarize(&samples, &w);
    let counted = |i: &usize| team.is_none_or(|t| jobs[*i].team == t);
    s.unplaceable = run.unplaceable.iter().filter(|i| counted(i)).count();
    s.guessed_run_times =
        run.outcomes.iter().filter(|o| counted(&o.job) && o.speed == SpeedSource::Unknown).count();
    if team.is_none() && span > 0.0 {
        s.fragmented_gpus = Some(run.idle_while_waiting_gpu_s / span);
    }
    s
}

/// Means over seeds, with the range of the mean figures.
fn over_seeds(runs: Vec<Summary>) -> Summary {
    let n = runs.len().max(1) as f64;
    let Some(first) = runs.first().cloned() else { return Summary::default() };
    let mean = |f: &dyn Fn(&Summary) -> f64| runs.iter().map(f).sum::<f64>() / n;
    let mean_opt = |f: &dyn Fn(&Summary) -> Option<f64>| -> Option<f64> {
        runs.iter().map(f).sum::<Option<f64>>().map(|s| s / n)
    };
    let mut out = Summary {
        wait_mean_s: mean(&|s| s.wait_mean_s),
        wait_p50_s: mean(&|s| s.wait_p50_s),
        wait_p95_s: mean(&|s| s.wait_p95_s),
        jct_mean_s: mean(&|s| s.jct_mean_s),
        jct_p99_s: mean(&|s| s.jct_p99_s),
        gpu_allocation_pct: mean(&|s| s.gpu_allocation_pct),
        gpu_use_pct: mean_opt(&|s| s.gpu_use_pct),
        fragmented_gpus: mean_opt(&|s| s.fragmented_gpus),
        cost_per_used_gpu_hour: mean_opt(&|s| s.cost_per_used_gpu_hour),
        ..first
    };
    if runs.len() > 1 {
        let range = |f: &dyn Fn(&Summary) -> f64| {
            runs.iter().map(f).fold([f64::INFINITY, f64::NEG_INFINITY], |[lo, hi], v| [lo.min(v), hi.max(v)])
        };
        out.intervals.insert("wait_mean_s", range(&|s| s.wait_mean_s));
        out.intervals.insert("wait_p95_s", range(&|s| s.wait_p95_s));
        out.intervals.insert("jct_mean_s", range(&|s| s.jct_mean_s));
        out.intervals.insert("gpu_allocation_pct", range(&|s| s.gpu_allocation_pct));
    }
    out
}

/// What to compare.
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    /// The fleet as registered.
    pub fleet: &'a Fleet,
    /// The fleet as changed.
    pub changed: &'a Fleet,
    /// Model replacements of the change (`from`, `to`): jobs asking for `from` ask for `to`.
    pub replaced: &'a [(String, String)],
    /// Scheduler settings.
    pub settings: &'a Settings,
    /// Run times on other models.
    pub speeds: &'a SpeedModel,
    /// Seeds (≥ 1).
    pub seeds: u64,
    /// Prices per GPU-hour by model.
    pub prices: &'a Prices,
}

/// Replays `jobs` on both fleets over the seeds and sets the figures side by side.
pub fn compare(jobs: &[ReplayJob], q: Question<'_>) -> Comparison {
    let moved: Vec<ReplayJob> = jobs
        .iter()
        .map(|j| {
            let mut j = j.clone();
            for m in &mut j.models {
                if let Some((_, to)) = q.replaced.iter().find(|(from, _)| model_matches(m, from)) {
                    *m = to.clone();
                }
            }
            j
        })
        .collect();
    let mut teams: Vec<String> = jobs.iter().map(|j| j.team.clone()).collect();
    teams.sort();
    teams.dedup();
    let seeds = q.seeds.max(1);
    let mut base_runs = Vec::new();
    let mut changed_runs = Vec::new();
    for seed in 0..seeds {
        let base_jobs = perturbed(jobs, seed);
        let changed_jobs = perturbed(&moved, seed);
        let base = replay(&base_jobs, q.fleet, q.settings, q.speeds, seed);
        let changed = replay(&changed_jobs, q.changed, q.settings, q.speeds, seed);
        base_runs.push((base_jobs, base));
        changed_runs.push((changed_jobs, changed));
    }
    let side = |runs: &[(Vec<ReplayJob>, Replayed)], fleet: &Fleet, team: Option<&str>| {
        over_seeds(runs.iter().map(|(j, r)| replayed_summary(j, r, fleet, q.prices, team)).collect())
    };
    Comparison {
        recorded: summarize_recorded(jobs, q.fleet, q.prices, None),
        baseline: side(&base_runs, q.fleet, None),
        changed: side(&changed_runs, q.changed, None),
        teams: teams
            .iter()
            .map(|t| TeamRow {
                team: t.clone(),
                recorded: summarize_recorded(jobs, q.fleet, q.prices, Some(t)),
                baseline: side(&base_runs, q.fleet, Some(t)),
                changed: side(&changed_runs, q.changed, Some(t)),
            })
            .collect(),
        seeds,
        waits: [
            jobs.iter().filter_map(|j| j.recorded.map(|r| r.0 - j.submit_s)).collect(),
            waits_of(&base_runs[0].0, &base_runs[0].1),
            waits_of(&changed_runs[0].0, &changed_runs[0].1),
        ],
    }
}

fn waits_of(jobs: &[ReplayJob], run: &Replayed) -> Vec<f64> {
    run.outcomes.iter().map(|o| o.start_s - jobs[o.job].submit_s).collect()
}
