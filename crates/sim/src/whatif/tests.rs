use super::*;
use gantry_core::queue::QueueWeights;

fn node(name: &str, gpus: u32, model: &str) -> FleetNode {
    FleetNode { name: name.into(), gpus, model: model.into() }
}

fn job(id: u64, submit_s: f64, gpus: u32, run_s: f64) -> ReplayJob {
    ReplayJob { id, team: "a".into(), key: format!("job{id}"), gpus, submit_s, run_s, ..ReplayJob::default() }
}

fn settings() -> Settings {
    Settings {
        teams: vec![TeamShare { name: "a".into(), guaranteed_gpus: 0, weight: 1.0 }],
        weights: QueueWeights::default(),
        pass_delay_s: 0.0,
        policy: gantry_core::PolicyKind::Gantry,
    }
}

fn starts(run: &Replayed) -> Vec<(usize, f64, f64)> {
    let mut v: Vec<(usize, f64, f64)> = run.outcomes.iter().map(|o| (o.job, o.start_s, o.end_s)).collect();
    v.sort_by_key(|x| x.0);
    v
}

#[test]
fn jobs_that_fill_the_fleet_run_one_after_another_in_arrival_order() {
    let fleet = Fleet { nodes: vec![node("n0", 4, "T4")] };
    let jobs = vec![job(1, 0.0, 4, 10.0), job(2, 1.0, 4, 10.0), job(3, 2.0, 4, 10.0)];
    let run = replay(&jobs, &fleet, &settings(), &SpeedModel::default(), 0);
    assert_eq!(starts(&run), vec![(0, 0.0, 10.0), (1, 10.0, 20.0), (2, 20.0, 30.0)]);
    assert!(run.unplaceable.is_empty());
    assert_eq!(run.span_s, (0.0, 30.0));
    // Jobs 2 and 3 waited while nothing was idle: no fragmentation.
    assert_eq!(run.idle_while_waiting_gpu_s, 0.0);
}

#[test]
fn the_reaction_delay_and_the_start_delay_are_paid_as_on_the_cluster() {
    let fleet = Fleet { nodes: vec![node("n0", 4, "T4")] };
    let mut jobs = vec![job(1, 0.0, 4, 10.0), job(2, 0.0, 4, 10.0)];
    for j in &mut jobs {
        j.start_delay_s = 0.5;
    }
    let s = Settings { pass_delay_s: 0.25, ..settings() };
    let run = replay(&jobs, &fleet, &s, &SpeedModel::default(), 0);
    // Placed at 0.25 and running at 0.75; the second placed 0.25 after the first ends.
    assert_eq!(starts(&run), vec![(0, 0.75, 10.25), (1, 11.0, 20.5)]);
}

#[test]
fn more_nodes_shorten_the_wait_and_a_faster_model_the_run() {
    let fleet = Fleet { nodes: vec![node("n0", 4, "K80")] };
    let jobs: Vec<ReplayJob> = (0..8)
        .map(|i| ReplayJob {
            key: "resnet18".into(),
            ran_on: Some("K80".into()),
            ..job(i, i as f64, 2, 100.0)
        })
        .collect();
    let speeds = SpeedModel {
        table: Some(
            SpeedTable::parse("job_type,gpu_model,throughput\nResNet-18,k80,1\nResNet-18,v100,4\n")
                .expect("valid"),
        ),
        ..Default::default()
    };
    let q = |changed: &Fleet, replaced: &[(String, String)]| {
        let s = settings();
        compare(
            &jobs,
            Question {
                fleet: &fleet,
                changed,
                replaced,
                settings: &s,
                speeds: &speeds,
                seeds: 1,
                prices: &[],
            },
        )
    };
    let (bigger, _) =
        fleet.changed(&[FleetChange::Add(NodeShape::parse("1x4xK80").expect("valid"))]).expect("valid");
    let more = q(&bigger, &[]);
    assert!(more.changed.wait_mean_s < more.baseline.wait_mean_s / 2.0, "{more:?}");
    let (faster, replaced) =
        fleet.changed(&[FleetChange::parse_replace("K80:V100").expect("valid")]).expect("valid");
    let quick = q(&faster, &replaced);
    assert!(
        (quick.changed.jct_mean_s - quick.baseline.jct_mean_s / 4.0).abs() < quick.baseline.jct_mean_s * 0.3,
        "{quick:?}"
    );
    assert_eq!(quick.changed.guessed_run_times, 0);
}

#[test]
fn a_gang_spans_nodes_at_worker_boundaries_and_a_job_no_node_holds_is_reported() {
    let fleet = Fleet { nodes: vec![node("n0", 4, "T4"), node("n1", 4, "T4")] };
    let gang = ReplayJob { gpus_per_worker: 4, ..job(1, 0.0, 8, 10.0) };
    let whole = job(2, 0.0, 8, 10.0);
    let wrong_model = ReplayJob { models: vec!["H100".into()], ..job(3, 0.0, 1, 10.0) };
    let run = replay(&[gang, whole, wrong_model], &fleet, &settings(), &SpeedModel::default(), 0);
    assert_eq!(starts(&run), vec![(0, 0.0, 10.0)]);
    assert_eq!(run.unplaceable, vec![1, 2]);
}

#[test]
fn replaying_a_fifo_history_gives_back_its_recorded_figures() {
    let fleet = Fleet { nodes: vec![node("n0", 2, "T4")] };
    let mut jobs: Vec<ReplayJob> =
        (0..20).map(|i| job(i, i as f64 * 3.0, 1 + (i % 2) as u32, 5.0 + (i % 3) as f64)).collect();
    let run = replay(&jobs, &fleet, &settings(), &SpeedModel::default(), 0);
    for o in &run.outcomes {
        jobs[o.job].recorded = Some((o.start_s, o.end_s));
    }
    let s = settings();
    let prices = [("T4".to_string(), 0.5)];
    let q = Question {
        fleet: &fleet,
        changed: &fleet,
        replaced: &[],
        settings: &s,
        speeds: &SpeedModel::default(),
        seeds: 1,
        prices: &prices,
    };
    let c = compare(&jobs, q);
    assert!((c.recorded.wait_mean_s - c.baseline.wait_mean_s).abs() < 1e-9, "{c:?}");
    assert!((c.recorded.jct_mean_s - c.baseline.jct_mean_s).abs() < 1e-9);
    assert!(c.recorded.wait_mean_s > 0.0, "the history must queue for the check to mean anything");
    assert!(c.changed.intervals.is_empty(), "one seed has no interval");
    let three = compare(&jobs, Question { seeds: 3, ..q });
    let [lo, hi] = three.baseline.intervals["wait_mean_s"];
    assert!(lo <= c.recorded.wait_mean_s && c.recorded.wait_mean_s <= hi && lo < hi, "{three:?}");
    assert!(c.recorded.cost_per_used_gpu_hour.is_some_and(|p| p >= 0.5));
    assert_eq!(c.teams.len(), 1);
}

#[test]
fn seeds_other_than_zero_change_run_times_around_the_recorded_ones() {
    let jobs: Vec<ReplayJob> = (0..2000).map(|i| job(i, 0.0, 1, 100.0)).collect();
    assert_eq!(perturbed(&jobs, 0), jobs);
    let p = perturbed(&jobs, 7);
    let mean_log = p.iter().map(|j| (j.run_s / 100.0).ln()).sum::<f64>() / p.len() as f64;
    let sd = (p.iter().map(|j| (j.run_s / 100.0).ln().powi(2)).sum::<f64>() / p.len() as f64).sqrt();
    assert!(mean_log.abs() < 0.01 && (sd - 0.1).abs() < 0.01, "{mean_log} {sd}");
    assert_ne!(perturbed(&jobs, 8), p);
}
