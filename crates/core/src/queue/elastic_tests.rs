use proptest::prelude::*;

use super::*;

const NODES: usize = 6;
const PER_NODE: u32 = 4;
const TOTAL: u32 = NODES as u32 * PER_NODE;

fn settings() -> ElasticSettings {
    ElasticSettings { restart_s: 30.0, resize_margin: 2.0 }
}

/// Concave speedup curve: `n^p` for `n` up to `max`.
fn curve(max: u32, p: f64) -> Vec<f64> {
    (1..=max).map(|n| f64::from(n).powf(p)).collect()
}

fn job(id: u64, min: u32, attained: f64, held: Vec<(usize, u32)>) -> QueuedJob {
    QueuedJob {
        id,
        team: 0,
        priority: 0,
        submitted_s: id as f64,
        gpus: min,
        worker_gpus: 1,
        attained_gpu_s: attained,
        waited_s: 0.0,
        held,
        preemptible: true,
    }
}

fn info(max: u32, p: f64, age: f64, since: f64) -> ElasticJob {
    ElasticJob { max_gpus: max, speedup: curve(max, p), age_s: age, since_change_s: since }
}

fn run(jobs: &[QueuedJob], infos: &[ElasticJob]) -> Vec<Vec<(usize, u32)>> {
    let teams = [Team { guaranteed_gpus: TOTAL, weight: 1.0 }];
    plan_elastic(
        &QueueWeights::default(),
        &teams,
        jobs,
        infos,
        &Usage::new(1, 0.0),
        &[PER_NODE; NODES],
        settings(),
    )
}

fn width(parts: &[(usize, u32)]) -> u32 {
    parts.iter().map(|p| p.1).sum()
}

/// Random elastic jobs, some holding a width within their range, placed validly.
fn elastic_strategy() -> impl Strategy<Value = (Vec<QueuedJob>, Vec<ElasticJob>)> {
    let one = (1u32..=6, 0u32..=12, 0.1f64..1.0, 0.0f64..200_000.0, any::<bool>(), 0.0f64..20_000.0);
    prop::collection::vec(one, 1..16).prop_map(|raw| {
        let mut free = vec![PER_NODE; NODES];
        let mut jobs = Vec::new();
        let mut infos = Vec::new();
        for (i, (min, extra, p, attained, running, age)) in raw.into_iter().enumerate() {
            let max = min + extra;
            let held =
                if running { place_gang(&mut free, min + extra / 2).unwrap_or_default() } else { Vec::new() };
            let age = if held.is_empty() { 0.0 } else { age };
            jobs.push(job(i as u64, min, attained, held));
            infos.push(info(max, p, age, age / 2.0));
        }
        (jobs, infos)
    })
}

proptest! {
    #[test]
    fn elastic_widths_stay_within_each_jobs_range_and_nodes_are_never_overcommitted(
        (jobs, infos) in elastic_strategy()
    ) {
        let parts = run(&jobs, &infos);
        let mut used = [0u32; NODES];
        for ((job, info), p) in jobs.iter().zip(&infos).zip(&parts) {
            let w = width(p);
            prop_assert!(w == 0 || (job.gpus..=info.max_gpus).contains(&w), "job {} got {w}", job.id);
            for (node, n) in p {
                used[*node] += n;
            }
            // Unchanged width means unchanged GPUs: no restart for nothing.
            if w == width(&job.held) && w > 0 {
                prop_assert_eq!(p, &job.held);
            }
        }
        prop_assert!(used.iter().all(|u| *u <= PER_NODE), "over-committed a node: {used:?}");
    }

    #[test]
    fn elastic_admission_is_the_rigid_admission_at_each_minimum((jobs, infos) in elastic_strategy()) {
        let parts = run(&jobs, &infos);
        let teams = [Team { guaranteed_gpus: TOTAL, weight: 1.0 }];
        let (_, admitted) = admit(&QueueWeights::default(), &teams, &jobs, &Usage::new(1, 0.0), &[PER_NODE; NODES]);
        for (k, p) in parts.iter().enumerate() {
            prop_assert_eq!(!p.is_empty(), admitted[k], "job {}", k);
        }
    }
}

#[test]
fn spare_gpus_go_where_goodput_per_gpu_gains_most() {
    // Two new jobs of equal standing: one scales almost linearly, one barely.
    let jobs = [job(0, 1, 0.0, vec![]), job(1, 1, 0.0, vec![])];
    let infos = [info(16, 0.95, 0.0, 0.0), info(16, 0.2, 0.0, 0.0)];
    let parts = run(&jobs, &infos);
    assert!(width(&parts[0]) > width(&parts[1]), "{parts:?}");
    assert_eq!(width(&parts[0]) + width(&parts[1]), TOTAL, "no GPU left idle while a job gains");
}

#[test]
fn a_new_job_shrinks_a_wide_one_but_never_below_its_minimum() {
    let all: Vec<(usize, u32)> = (0..NODES).map(|n| (n, PER_NODE)).collect();
    let jobs = [job(0, 4, 1e6, all), job(1, 8, 0.0, vec![])];
    let infos = [info(TOTAL, 0.9, 50_000.0, 50_000.0), info(8, 0.9, 0.0, 0.0)];
    let parts = run(&jobs, &infos);
    assert_eq!(width(&parts[1]), 8, "the new job starts at (at least) its minimum");
    assert_eq!(width(&parts[0]), TOTAL - 8);
}

#[test]
fn a_job_that_just_resized_keeps_its_width_for_a_small_gain() {
    // Job 0 holds 4 GPUs since a minute ago; 4 GPUs are spare but its curve is almost flat there.
    let jobs = [job(0, 2, 1000.0, vec![(0, 4)])];
    let mut flat = info(8, 0.9, 60.0, 60.0);
    flat.speedup = vec![1.0, 1.8, 2.5, 3.0, 3.01, 3.02, 3.03, 3.04];
    let teams = [Team { guaranteed_gpus: 8, weight: 1.0 }];
    let parts = plan_elastic(
        &QueueWeights::default(),
        &teams,
        &jobs,
        &[flat.clone()],
        &Usage::new(1, 0.0),
        &[4, 4],
        settings(),
    );
    assert_eq!(parts[0], vec![(0, 4)], "a 1 % gain does not pay a 30 s restart");
    // The same job with a real gain and a long history grows.
    flat.speedup = curve(8, 0.95);
    flat.age_s = 10_000.0;
    flat.since_change_s = 10_000.0;
    let parts = plan_elastic(
        &QueueWeights::default(),
        &teams,
        &jobs,
        &[flat],
        &Usage::new(1, 0.0),
        &[4, 4],
        settings(),
    );
    assert_eq!(width(&parts[0]), 8);
}
