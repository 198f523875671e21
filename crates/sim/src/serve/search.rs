//! Running the policies, and each baseline at its best target.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use gantry_core::autoscale::{
    AutoscaleConfig, Autoscaler, Behavior, Bounds, Fixed, Hpa, Kpa, KpaConfig, MetricKind, MetricSpec,
    Policy, RayServe, RayServeConfig,
};

use super::ServePolicy;
use super::engine::{RunConfig, RunResult, simulate};
use super::profile::Profile;
use super::report::Outcome;
use super::trace::RequestRow;

/// Targets (requests per replica) the baselines are tried at.
pub const GRID: [f64; 14] = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0];

/// The share of requests within the TTFT SLO a run must reach to meet the SLO.
pub const SLO_GOAL: f64 = 0.99;

/// The settings of one evaluation.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Arrival times are divided by this.
    pub rate_scale: f64,
    /// The TTFT SLO in seconds.
    pub slo_ttft_s: f64,
    /// The most replicas any policy may hold.
    pub max_replicas: u32,
    /// Replicas ready at time 0; `None`: `fixed`'s count.
    pub initial: Option<u32>,
    /// Seed of the balancer.
    pub seed: u64,
    /// Worker threads.
    pub threads: usize,
}

/// Runs `policies` on one trace and profile.
pub fn evaluate(
    requests: &[RequestRow],
    profile: &Profile,
    policies: &[ServePolicy],
    s: Settings,
) -> Vec<Outcome> {
    let cfg = |initial: u32| RunConfig {
        rate_scale: s.rate_scale,
        initial,
        max_concurrency: profile.kv_seqs,
        queue_cap: 100_000,
        seed: s.seed,
        warmup: true,
    };
    let counts: Vec<u32> = (1..=s.max_replicas).collect();
    let fixed_runs = first_meeting(&counts, s, |&n| {
        simulate(requests, profile, Autoscaler::Fixed(Fixed { count: n }), cfg(n))
    });
    let fixed_best = fixed_runs.iter().find(|(_, o)| meets(o, s)).or(fixed_runs.last());
    let initial = s.initial.unwrap_or_else(|| fixed_best.map_or(1, |(n, _)| *n)).clamp(1, s.max_replicas);
    let bounds = Bounds { min: 1, max: s.max_replicas };
    let mut out = Vec::new();
    for &policy in policies {
        let outcome = match policy {
            ServePolicy::Fixed => {
                fixed_best.map(|(n, r)| Outcome::new(policy, Some(f64::from(*n)), r.clone(), s.slo_ttft_s))
            }
            ServePolicy::Gantry => {
                let model = profile.replica_model(s.slo_ttft_s);
                let policy_block = gantry_config(profile, s.slo_ttft_s);
                let r = simulate(
                    requests,
                    profile,
                    Autoscaler::from_config(policy_block, false, bounds),
                    cfg(initial),
                );
                Some(Outcome::new(policy, Some(model.capacity), r, s.slo_ttft_s))
            }
            ServePolicy::Hpa | ServePolicy::Kpa | ServePolicy::RayServe => {
                let runs = par_map(&GRID, s.threads, |&target| {
                    simulate(requests, profile, baseline(policy, target, bounds), cfg(initial))
                });
                let grid: Vec<(f64, RunResult)> = GRID.iter().copied().zip(runs).collect();
                best(policy, grid, s)
            }
        };
        out.extend(outcome);
    }
    out
}

pub(crate) fn hpa_config(target: f64) -> AutoscaleConfig {
    AutoscaleConfig {
        sync_s: 15.0,
        tolerance: 0.1,
        metrics: vec![MetricSpec { kind: MetricKind::InFlight, target, series: None }],
        behavior: Behavior::default(),
        policy: Policy::Hpa,
        slo_ttft_s: None,
        cold_start_s: None,
        replica_rps: None,
    }
}

/// The `autoscale:` block a service of `profile` would carry for `policy: gantry`: the model
/// fields a user declares (the rate a busy replica serves, the SLO, the cold start) taken from
/// the profile, and `in_flight` at the replica's KV capacity (its concurrency cap). The server
/// builds its policy from such a block with the same [`Autoscaler::from_config`].
pub(crate) fn gantry_config(profile: &Profile, slo_ttft_s: f64) -> AutoscaleConfig {
    let model = profile.replica_model(slo_ttft_s);
    AutoscaleConfig {
        policy: Policy::Gantry,
        slo_ttft_s: Some(slo_ttft_s),
        cold_start_s: Some(profile.cold_start_s),
        replica_rps: Some(model.rate),
        ..hpa_config(f64::from(profile.kv_seqs))
    }
}

fn baseline(policy: ServePolicy, target: f64, bounds: Bounds) -> Autoscaler {
    match policy {
        ServePolicy::Kpa => Autoscaler::Kpa(Kpa::new(KpaConfig::with_target(target), bounds)),
        ServePolicy::RayServe => {
            Autoscaler::RayServe(RayServe::new(RayServeConfig::with_target(target), bounds))
        }
        _ => Autoscaler::Hpa(Hpa::new(hpa_config(target), bounds)),
    }
}

fn meets(r: &RunResult, s: Settings) -> bool {
    super::report::attainment(&r.ttft, s.slo_ttft_s) >= SLO_GOAL
}

/// The fewest GPU-hours among grid points meeting the SLO, else the highest attainment.
fn best(policy: ServePolicy, grid: Vec<(f64, RunResult)>, s: Settings) -> Option<Outcome> {
    let table: Vec<(f64, f64, f64)> = grid
        .iter()
        .map(|(t, r)| (*t, super::report::attainment(&r.ttft, s.slo_ttft_s), r.replica_s * f64::from(r.gpus)))
        .collect();
    let meeting = grid.iter().enumerate().filter(|(_, (_, r))| meets(r, s));
    let pick = meeting
        .min_by(|a, b| (a.1.1.replica_s).total_cmp(&b.1.1.replica_s))
        .map(|(i, _)| i)
        .or_else(|| (0..table.len()).max_by(|&a, &b| table[a].1.total_cmp(&table[b].1)))?;
    let (target, run) = grid.into_iter().nth(pick)?;
    let mut o = Outcome::new(policy, Some(target), run, s.slo_ttft_s);
    o.grid = table;
    Some(o)
}

/// Runs counts in parallel batches, stopping after the first batch in which one meets the SLO.
fn first_meeting(
    counts: &[u32],
    s: Settings,
    run: impl Fn(&u32) -> RunResult + Sync,
) -> Vec<(u32, RunResult)> {
    let mut done = Vec::new();
    for batch in counts.chunks(s.threads.max(1)) {
        let runs = par_map(batch, s.threads, &run);
        let hit = runs.iter().any(|r| meets(r, s));
        done.extend(batch.iter().copied().zip(runs));
        if hit {
            break;
        }
    }
    done
}

/// `f` over `items` on `threads` workers, results in input order.
fn par_map<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    if let Ok(mut slots) = slots.lock() {
                        slots[i] = Some(r);
                    }
                }
            });
        }
    });
    slots.into_inner().map(|v| v.into_iter().flatten().collect()).unwrap_or_default()
}
