use std::path::Path;

use gantry_core::autoscale::{Autoscaler, Bounds, Fixed, GantryAutoscaler, Hpa, ReplicaModel};

use super::search::{gantry_config, hpa_config};
use super::*;

fn profile() -> Profile {
    Profile::named(DEFAULT_PROFILE).expect("default profile")
}

fn cfg(initial: u32) -> RunConfig {
    RunConfig { rate_scale: 1.0, initial, max_concurrency: 256, queue_cap: 1000, seed: 7, warmup: false }
}

/// `low` requests/s until `step_s`, then `high`, until `end_s`; typical sizes.
fn step_trace(low: f64, high: f64, step_s: f64, end_s: f64) -> Vec<RequestRow> {
    let mut rows = Vec::new();
    let mut t = 0.0;
    while t < end_s {
        rows.push(RequestRow { at_s: t, context: 2048, generated: 28 });
        t += if t < step_s { 1.0 / low } else { 1.0 / high };
    }
    rows
}

fn gantry(p: &Profile, bounds: Bounds) -> Autoscaler {
    let model = p.replica_model(2.0);
    Autoscaler::Gantry(GantryAutoscaler::new(hpa_config(model.capacity), false, bounds, model))
}

#[test]
fn the_block_a_service_would_declare_decides_as_the_profiles_own_model() {
    // The server builds `policy: gantry` from a block's `replica_rps`, `slo_ttft_s` and
    // `cold_start_s`; the simulator's `gantry` is that block, so both run the same policy.
    let p = profile();
    let block = gantry_config(&p, 2.0);
    let (declared, derived) = (ReplicaModel::of(&block), p.replica_model(2.0));
    assert_eq!(
        (declared.rate, declared.wait_s, declared.cold_start_s),
        (derived.rate, derived.wait_s, derived.cold_start_s)
    );
    let rows = step_trace(2.0, 12.0, 120.0, 300.0);
    let bounds = Bounds { min: 1, max: 16 };
    let by_hand = GantryAutoscaler::new(hpa_config(f64::from(p.kv_seqs)), false, bounds, derived);
    let a = simulate(&rows, &p, Autoscaler::Gantry(by_hand), cfg(1));
    let b = simulate(&rows, &p, Autoscaler::from_config(block, false, bounds), cfg(1));
    assert!(!a.decisions.is_empty(), "the step scales the service");
    assert_eq!(a.decisions, b.decisions);
    assert_eq!(a.ttft, b.ttft);
}

#[test]
fn a_lone_request_takes_its_prefill_then_one_iteration_per_token() {
    let p = profile();
    let rows = [RequestRow { at_s: 0.0, context: 2048, generated: 3 }];
    let r = simulate(&rows, &p, Autoscaler::Fixed(Fixed { count: 1 }), cfg(1));
    let prefill = p.iteration_s(2048, 2048.0 * 2048.0, 0, 0);
    assert!((r.ttft[0] - prefill).abs() < 1e-9);
    let decode = p.iteration_s(0, 0.0, 1, 2048) + p.iteration_s(0, 0.0, 1, 2049);
    assert!((r.e2e[0] - prefill - decode).abs() < 1e-9, "{} vs {}", r.e2e[0], prefill + decode);
}

#[test]
fn requests_beyond_the_concurrency_cap_wait_and_a_full_queue_refuses() {
    let p = profile();
    let rows: Vec<RequestRow> =
        (0..10).map(|_| RequestRow { at_s: 0.0, context: 512, generated: 2 }).collect();
    let tight = RunConfig { max_concurrency: 2, queue_cap: 5, ..cfg(1) };
    let r = simulate(&rows, &p, Autoscaler::Fixed(Fixed { count: 1 }), tight);
    assert_eq!(r.ttft.iter().filter(|t| t.is_infinite()).count(), 3, "2 at the replica, 5 queued, 3 refused");
    assert!(r.ttft.iter().filter(|t| t.is_finite()).all(|&t| t > 0.0));
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let p = profile();
    let rows = step_trace(5.0, 20.0, 60.0, 180.0);
    let bounds = Bounds { min: 1, max: 16 };
    let a = simulate(&rows, &p, gantry(&p, bounds), cfg(2));
    let b = simulate(&rows, &p, gantry(&p, bounds), cfg(2));
    assert_eq!(a.ttft, b.ttft);
    assert_eq!(a.decisions, b.decisions);
}

#[test]
fn gantry_scales_up_within_15_s_of_a_load_step() {
    let p = profile();
    let rows = step_trace(2.0, 12.0, 120.0, 240.0);
    let r = simulate(&rows, &p, gantry(&p, Bounds { min: 1, max: 16 }), cfg(1));
    let first =
        r.decisions.iter().find(|d| d.to > d.from && d.at_s >= 120.0).expect("a scale-up after the step");
    assert!(
        first.at_s - 120.0 <= 15.0,
        "first scale-up {} s after the step: {}",
        first.at_s - 120.0,
        first.reason
    );
    assert!(!r.decisions.iter().any(|d| d.to > d.from && d.at_s < 120.0), "no scale-up before the step");
}

#[test]
fn hpa_syncs_every_15_s_and_follows_the_step() {
    let p = profile();
    let rows = step_trace(2.0, 12.0, 120.0, 300.0);
    let hpa = Autoscaler::Hpa(Hpa::new(hpa_config(4.0), Bounds { min: 1, max: 16 }));
    let r = simulate(&rows, &p, hpa, cfg(1));
    assert!(r.decisions.iter().all(|d| (d.at_s % 15.0).abs() < 1e-9));
    assert!(r.decisions.iter().any(|d| d.to > d.from && d.at_s > 120.0));
}

#[test]
fn every_policy_reports_on_the_excerpt_and_the_fixed_oracle_meets_the_slo() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/traces/azure-llm-2023/code-excerpt.csv"
    ));
    let rows = read_requests(path).expect("excerpt");
    let settings =
        Settings { rate_scale: 10.0, slo_ttft_s: 2.0, max_replicas: 32, initial: None, seed: 42, threads: 2 };
    let outcomes = evaluate(&rows, &profile(), &ServePolicy::ALL, settings);
    assert_eq!(outcomes.len(), 5);
    let fixed = outcomes.iter().find(|o| o.policy == ServePolicy::Fixed).expect("fixed");
    assert!(fixed.slo_attainment >= search::SLO_GOAL, "{}", fixed.slo_attainment);
    let report = Report {
        trace: "excerpt".into(),
        profile: DEFAULT_PROFILE.into(),
        rate_scale: 10.0,
        slo_ttft_s: 2.0,
        outcomes,
    };
    let json = report.json();
    for key in [
        "policy",
        "slo_attainment",
        "gpu_hours",
        "replica_hours",
        "ttft_p50_s",
        "ttft_p99_s",
        "cold_starts",
        "requests",
    ] {
        assert!(json["policies"][0].get(key).is_some(), "missing {key}");
    }
    assert_eq!(json["policies"][0]["requests"], 2000);
    assert!(report.svg().starts_with("<svg"));
}

#[test]
fn the_warm_up_lasts_thirty_minutes_of_whole_passes() {
    assert_eq!(engine::warmup_passes(114.6), 16, "the code trace at ×30");
    assert_eq!(engine::warmup_passes(343.7), 6, "at ×10");
    assert_eq!(engine::warmup_passes(3600.0), 1);
    assert_eq!(engine::warmup_passes(0.0), 1);
}
