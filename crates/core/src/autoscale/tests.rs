use proptest::prelude::*;

use super::*;

const ISSUE_BLOCK: &str = r"
sync_s: 15
tolerance: 0.1
metrics: [{type: in_flight, target: 2}]
behavior:
  scale_up: {stabilization_window_s: 0, select_policy: max, policies: [{type: pods, value: 4, period_s: 15}, {type: percent, value: 100, period_s: 15}]}
  scale_down: {stabilization_window_s: 300, policies: [{type: percent, value: 100, period_s: 15}]}
";

fn block(yaml: &str) -> AutoscaleConfig {
    serde_norway::from_str::<AutoscaleConfig>(yaml)
        .expect("test block parses")
        .validate()
        .expect("test block is valid")
}

fn in_flight(target: f64) -> AutoscaleConfig {
    block(&format!("metrics: [{{type: in_flight, target: {target}}}]"))
}

fn sample(at_s: f64, in_flight: f64) -> Sample {
    Sample { at_s, in_flight, ..Sample::default() }
}

fn decide(hpa: &mut Hpa, now_s: f64, current: u32, total: f64) -> Decision {
    let window = [sample(now_s, total)];
    hpa.decide(&Input { now_s, current, ready: current, window: &window })
}

const B: Bounds = Bounds { min: 1, max: 100 };

#[test]
fn the_issue_block_parses_with_its_exact_field_names() {
    let c = block(ISSUE_BLOCK);
    assert_eq!(c.metrics[0].kind, MetricKind::InFlight);
    let (up, down) = c.behavior.resolved();
    assert_eq!((up.window_s, up.policies.len(), down.window_s), (0.0, 2, 300.0));
}

#[test]
fn unknown_fields_and_bad_values_are_refused_with_a_sentence() {
    assert!(serde_norway::from_str::<AutoscaleConfig>("metrics: []\nsync: 15").is_err());
    let bad =
        serde_norway::from_str::<AutoscaleConfig>("metrics: [{type: in_flight, target: 0}]").expect("parses");
    assert_eq!(
        bad.validate().expect_err("zero target").to_string(),
        "autoscale metric in_flight needs a positive target, got 0"
    );
    let prom = serde_norway::from_str::<AutoscaleConfig>("metrics: [{type: prometheus, target: 3}]")
        .expect("parses");
    assert!(prom.validate().is_err(), "prometheus needs its series");
}

#[test]
fn desired_is_the_ceiling_of_current_times_value_over_target() {
    let mut hpa = Hpa::new(in_flight(4.0), B);
    let d = decide(&mut hpa, 0.0, 2, 2.0 * 9.1);
    assert_eq!((d.from, d.to), (2, 5));
    assert_eq!(d.reason, "scaled 2 → 5: in_flight 9.10 per replica over target 4");
}

#[test]
fn the_largest_recommendation_across_metrics_wins() {
    let c = block("metrics: [{type: in_flight, target: 4}, {type: ttft_p95, target: 1}]");
    let mut hpa = Hpa::new(c, B);
    let window = [Sample { at_s: 0.0, in_flight: 4.0, ttft_p95_s: Some(3.0), ..Sample::default() }];
    let d = hpa.decide(&Input { now_s: 0.0, current: 2, ready: 2, window: &window });
    assert_eq!(d.to, 6, "ttft 3 s over 1 s triples 2 replicas; in_flight alone would halve: {}", d.reason);
}

#[test]
fn scale_up_defaults_allow_four_pods_or_double_per_fifteen_seconds() {
    let mut hpa = Hpa::new(in_flight(1.0), B);
    assert_eq!(decide(&mut hpa, 0.0, 2, 100.0).to, 6, "max(2 + 4, 2 × 2)");
    assert_eq!(decide(&mut hpa, 5.0, 6, 100.0).to, 6, "the period started at 2");
    assert_eq!(decide(&mut hpa, 15.0, 6, 100.0).to, 12, "a new period starts from 6");
}

#[test]
fn select_policy_min_takes_the_smaller_change_and_disabled_none() {
    let min = block("metrics: [{type: in_flight, target: 1}]\nbehavior: {scale_up: {select_policy: min}}");
    assert_eq!(decide(&mut Hpa::new(min, B), 0.0, 10, 100.0).to, 14, "min(10 + 4, 20)");
    let off = block(
        "metrics: [{type: in_flight, target: 1}]\nbehavior: {scale_down: {select_policy: disabled, policies: []}}",
    );
    assert_eq!(decide(&mut Hpa::new(off, B), 0.0, 10, 1.0).to, 10);
}

#[test]
fn scale_down_waits_for_the_highest_recommendation_of_its_window() {
    let mut hpa = Hpa::new(in_flight(1.0), B);
    assert_eq!(decide(&mut hpa, 0.0, 8, 8.0).to, 8);
    assert_eq!(decide(&mut hpa, 15.0, 8, 2.0).to, 8, "8 was recommended 15 s ago");
    assert_eq!(decide(&mut hpa, 299.0, 8, 2.0).to, 8);
    assert_eq!(decide(&mut hpa, 301.0, 8, 2.0).to, 2, "the window has passed");
}

#[test]
fn a_percent_scale_down_policy_limits_each_period() {
    let c = block(
        "metrics: [{type: in_flight, target: 1}]\nbehavior: {scale_down: {stabilization_window_s: 0, policies: [{type: percent, value: 50, period_s: 60}]}}",
    );
    let mut hpa = Hpa::new(c, B);
    assert_eq!(decide(&mut hpa, 0.0, 10, 1.0).to, 5);
    assert_eq!(decide(&mut hpa, 30.0, 5, 1.0).to, 5, "the period started at 10 and allowed 5");
}

#[test]
fn kpa_panics_on_a_burst_and_does_not_scale_down_while_panicking() {
    let mut kpa = Kpa::new(KpaConfig::with_target(10.0), B);
    let calm: Vec<Sample> = (0..60).map(|t| sample(f64::from(t), 7.0)).collect();
    assert_eq!(kpa.decide(&Input { now_s: 59.0, current: 1, ready: 1, window: &calm }).to, 1);
    let mut burst = calm.clone();
    burst.extend((60..66).map(|t| sample(f64::from(t), 70.0)));
    let d = kpa.decide(&Input { now_s: 65.0, current: 1, ready: 1, window: &burst });
    assert_eq!(d.to, 10, "70 / (10 × 0.7): {}", d.reason);
    let quiet: Vec<Sample> = (60..80).map(|t| sample(f64::from(t), 1.0)).collect();
    assert_eq!(kpa.decide(&Input { now_s: 79.0, current: 10, ready: 10, window: &quiet }).to, 10);
}

#[test]
fn ray_serve_scales_up_only_after_its_upscale_delay() {
    let mut ray = RayServe::new(RayServeConfig::with_target(2.0), B);
    let mut fired = None;
    for t in 0..40 {
        let window = [sample(f64::from(t), 20.0)];
        let d = ray.decide(&Input { now_s: f64::from(t), current: 1, ready: 1, window: &window });
        if d.changes() && fired.is_none() {
            fired = Some(t);
        }
    }
    assert_eq!(fired, Some(30));
}

fn model() -> ReplicaModel {
    ReplicaModel { capacity: 5.0, rate: 5.0, wait_s: 1.8, cold_start_s: 90.0 }
}

fn arriving(at_s: f64, rps: f64) -> Sample {
    Sample { at_s, rps, in_flight: rps, ..Sample::default() }
}

#[test]
fn gantry_sizes_on_the_arrivals_of_its_window_and_keeps_replicas_for_three_cold_starts() {
    let mut g = GantryAutoscaler::new(in_flight(256.0), false, B, model());
    let w: Vec<Sample> = (1..=10).map(|t| arriving(f64::from(t), 50.0)).collect();
    let d = g.decide(&Input { now_s: 10.0, current: 2, ready: 2, window: &w });
    assert_eq!(d.to, 10, "50 req/s over replicas of 5 req/s: {}", d.reason);
    assert!(d.reason.contains("need 10 replicas of 5.0 req/s"), "{}", d.reason);
    let w = [arriving(290.0, 5.0)];
    assert_eq!(g.decide(&Input { now_s: 290.0, current: 10, ready: 10, window: &w }).to, 10);
    let w = [arriving(311.0, 5.0)];
    assert_eq!(
        g.decide(&Input { now_s: 311.0, current: 10, ready: 10, window: &w }).to,
        1,
        "max(3 × 90 s, 300 s) has passed"
    );
}

#[test]
fn gantry_holds_a_burst_that_may_wait_within_the_slo_with_fewer_replicas_than_its_concurrency() {
    let mut g = GantryAutoscaler::new(in_flight(256.0), false, B, model());
    let mut w: Vec<Sample> = (1..=100).map(|t| arriving(f64::from(t), 5.0)).collect();
    w[50].rps = 60.0;
    w[50].in_flight = 60.0;
    let d = g.decide(&Input { now_s: 100.0, current: 1, ready: 1, window: &w });
    assert!(d.to < 12, "60 requests in one second may wait 1.8 s: {}", d.reason);
    assert!(d.to >= 7, "60 requests need 60 / (5 × 1.8) replicas to start within 1.8 s: {}", d.reason);
}

#[test]
fn gantry_answers_a_queue_in_one_sync_whatever_the_up_window() {
    let c = block(
        "metrics: [{type: in_flight, target: 256}]\nbehavior: {scale_up: {stabilization_window_s: 600}}",
    );
    let mut g = GantryAutoscaler::new(c, false, B, model());
    let w = [Sample { at_s: 10.0, rps: 90.0, in_flight: 40.0, queue_length: 50.0, ..Sample::default() }];
    let d = g.decide(&Input { now_s: 10.0, current: 2, ready: 2, window: &w });
    assert_eq!(d.to, 10, "90 requests within 1.8 s at 5 req/s each: {}", d.reason);
    assert!(d.reason.starts_with("scaled 2 → 10: panic:"), "{}", d.reason);
}

#[test]
fn gantry_honours_an_explicit_hpa_behavior() {
    let c = block(
        "metrics: [{type: in_flight, target: 100}]\nbehavior: {scale_up: {policies: [{type: pods, value: 1, period_s: 60}]}}",
    );
    let mut g = GantryAutoscaler::new(c, false, B, model());
    let w = [Sample { at_s: 0.0, rps: 50.0, queue_length: 50.0, ..Sample::default() }];
    assert_eq!(g.decide(&Input { now_s: 0.0, current: 2, ready: 2, window: &w }).to, 3);
}

#[test]
fn gantry_goes_to_zero_after_its_idle_time_and_back_on_the_first_request() {
    let bounds = Bounds { min: 0, max: 4 };
    let mut g = GantryAutoscaler::new(in_flight(2.0), false, bounds, model()).with_scale_to_zero_after(60.0);
    let w = [sample(0.0, 1.0)];
    assert_eq!(g.decide(&Input { now_s: 0.0, current: 1, ready: 1, window: &w }).to, 1);
    let w = [sample(100.0, 0.0)];
    assert_eq!(g.decide(&Input { now_s: 100.0, current: 1, ready: 1, window: &w }).to, 0);
    let w = [Sample { at_s: 101.0, queue_length: 1.0, ..Sample::default() }];
    assert_eq!(g.decide(&Input { now_s: 101.0, current: 0, ready: 0, window: &w }).to, 1);
}

#[test]
fn a_gantry_block_names_its_replica_model_and_needs_no_metric() {
    let c = block("policy: gantry\nreplica_rps: 5\nslo_ttft_s: 2\ncold_start_s: 90");
    assert_eq!((c.policy, c.replica_rps(), c.metrics.len()), (Policy::Gantry, Some(5.0), 0));
    let m = ReplicaModel::of(&c);
    assert_eq!((m.rate, m.cold_start_s), (5.0, 90.0));
    assert!((m.wait_s - 1.8).abs() < 1e-9, "the SLO less one prefill of 1 / 5 s: {}", m.wait_s);
    let rps = block("policy: gantry\nmetrics: [{type: rps, target: 3}]");
    assert_eq!(rps.replica_rps(), Some(3.0), "an rps metric's target is the replica's rate");
    let d = ReplicaModel::of(&rps);
    assert_eq!((d.cold_start_s, d.wait_s), (DEFAULT_COLD_START_S, DEFAULT_SLO_TTFT_S - 1.0 / 3.0));
    match Autoscaler::from_config(c, false, B) {
        Autoscaler::Gantry(g) => assert_eq!(g.sync_s(), 1.0, "Gantry's sync when the block names none"),
        other => panic!("policy: gantry builds {other:?}"),
    }
    assert!(matches!(Autoscaler::from_config(in_flight(2.0), false, B), Autoscaler::Hpa(_)));
}

#[test]
fn model_fields_are_refused_under_hpa_and_checked_under_gantry() {
    let refused = |yaml: &str| {
        serde_norway::from_str::<AutoscaleConfig>(yaml)
            .expect("parses")
            .validate()
            .expect_err("refused")
            .to_string()
    };
    assert_eq!(
        refused("metrics: [{type: in_flight, target: 2}]\nreplica_rps: 5"),
        "autoscale.replica_rps: is read only with policy: gantry"
    );
    assert!(refused("policy: gantry").starts_with("autoscale.replica_rps: policy: gantry needs"));
    assert_eq!(
        refused("policy: gantry\nreplica_rps: 5\ncold_start_s: -1"),
        "autoscale.cold_start_s: must be a positive number, got -1"
    );
    assert_eq!(
        refused("policy: gantry\nreplica_rps: 5\ncold_start_s: 7200"),
        "autoscale.cold_start_s: must be at most 3600 s"
    );
    assert!(refused("metrics: []").starts_with("autoscale.metrics needs at least one metric"));
    assert!(serde_norway::from_str::<AutoscaleConfig>("policy: vpa\nreplica_rps: 5").is_err());
}

#[test]
fn gantry_without_metrics_sizes_on_the_arrivals_alone_and_scales_down_when_they_stop() {
    let c = block("policy: gantry\nreplica_rps: 5\ncold_start_s: 90");
    let Autoscaler::Gantry(mut g) = Autoscaler::from_config(c, false, B) else { panic!("gantry") };
    let w: Vec<Sample> =
        (1..=10).map(|t| Sample { at_s: f64::from(t), rps: 50.0, ..Sample::default() }).collect();
    let d = g.decide(&Input { now_s: 10.0, current: 1, ready: 1, window: &w });
    assert_eq!(d.to, 10, "50 req/s over replicas of 5 req/s: {}", d.reason);
    let quiet = [Sample { at_s: 400.0, ..Sample::default() }];
    let d = g.decide(&Input { now_s: 400.0, current: 10, ready: 10, window: &quiet });
    assert_eq!(d.to, 1, "no arrivals for longer than three cold starts: {}", d.reason);
}

#[test]
fn replica_capacity_follows_little_s_law_at_the_slo_utilisation() {
    let m = ReplicaModel::from_service_times(0.2, 1.0, 2.0, 90.0);
    assert!((m.capacity - 0.6 / 0.2 * 1.5).abs() < 1e-9, "{}", m.capacity);
    assert!((m.rate - 5.0).abs() < 1e-9, "a busy replica prefills one 0.2 s prompt after another");
    assert!((m.wait_s - 1.8).abs() < 1e-9, "the SLO less the request's own prefill");
}

proptest! {
    #[test]
    fn hpa_never_leaves_min_to_max(loads in prop::collection::vec(0.0f64..500.0, 1..40), min in 0u32..5, span in 0u32..20) {
        let bounds = Bounds { min, max: min + span };
        let mut hpa = Hpa::new(in_flight(3.0), bounds);
        let mut current = min;
        for (i, load) in loads.iter().enumerate() {
            current = decide(&mut hpa, i as f64 * 15.0, current, *load).to;
            prop_assert!((bounds.min..=bounds.max).contains(&current));
        }
    }

    #[test]
    fn gantry_never_leaves_min_to_max(loads in prop::collection::vec(0.0f64..500.0, 1..40), min in 0u32..5, span in 0u32..20) {
        let bounds = Bounds { min, max: min + span };
        let mut g = GantryAutoscaler::new(in_flight(3.0), false, bounds, model());
        let mut current = min;
        for (i, load) in loads.iter().enumerate() {
            let now_s = i as f64;
            let w = [Sample { at_s: now_s, in_flight: *load, queue_length: *load / 2.0, ..Sample::default() }];
            current = g.decide(&Input { now_s, current, ready: current, window: &w }).to;
            prop_assert!((bounds.min..=bounds.max).contains(&current));
        }
    }

    #[test]
    fn stabilization_never_scales_below_a_recommendation_of_its_window(high in 5u32..50, lows in prop::collection::vec(0.0f64..4.0, 1..19)) {
        let mut hpa = Hpa::new(in_flight(1.0), B);
        let current = decide(&mut hpa, 0.0, high, f64::from(high)).to;
        for (i, low) in lows.iter().enumerate() {
            let d = decide(&mut hpa, 15.0 * (i + 1) as f64, current, *low);
            prop_assert_eq!(d.to, high, "within 300 s of a recommendation of {}", high);
        }
    }

    #[test]
    fn a_ratio_within_the_tolerance_band_changes_nothing(current in 1u32..50, ratio in 0.9f64..=1.1) {
        let mut hpa = Hpa::new(in_flight(2.0), B);
        let d = decide(&mut hpa, 0.0, current, f64::from(current) * 2.0 * ratio);
        prop_assert_eq!(d.to, current);
    }
}
