use proptest::prelude::*;

use super::*;

const NODES: usize = 6;
const PER_NODE: u32 = 4;
const TOTAL: u32 = NODES as u32 * PER_NODE;

fn teams(guarantee: u32) -> Vec<Team> {
    vec![Team { guaranteed_gpus: guarantee, weight: 1.0 }; 3]
}

/// Random jobs, some already holding GPUs placed validly on a 6 × 4 cluster.
fn jobs_strategy() -> impl Strategy<Value = Vec<QueuedJob>> {
    let job = (0usize..3, 0i32..3, 1u32..=9, 0.0f64..50_000.0, 0.0f64..5_000.0, any::<bool>(), any::<bool>());
    prop::collection::vec(job, 1..24).prop_map(|raw| {
        let mut free = vec![PER_NODE; NODES];
        raw.into_iter()
            .enumerate()
            .map(|(i, (team, priority, gpus, attained, waited, running, preemptible))| {
                let held = if running { place_gang(&mut free, gpus).unwrap_or_default() } else { Vec::new() };
                QueuedJob {
                    id: i as u64,
                    team,
                    priority,
                    submitted_s: i as f64,
                    gpus,
                    worker_gpus: 1,
                    attained_gpu_s: attained,
                    waited_s: waited,
                    preemptible: preemptible || held.is_empty(),
                    held,
                }
            })
            .collect()
    })
}

fn admitted_gpus(jobs: &[QueuedJob], decisions: &[Decision], team: usize) -> u32 {
    jobs.iter()
        .zip(decisions)
        .filter(|(j, d)| j.team == team && matches!(d, Decision::Keep { .. } | Decision::Start { .. }))
        .map(|(j, _)| j.gpus)
        .sum()
}

proptest! {
    #[test]
    fn a_team_under_its_guarantee_is_never_blocked_by_borrowers(mut jobs in jobs_strategy()) {
        for j in &mut jobs {
            j.preemptible = true;
        }
        let w = QueueWeights::default();
        let decisions = plan(&w, &teams(TOTAL / 3), &jobs, &Usage::new(3, 0.0), &[PER_NODE; NODES]);
        for (job, d) in jobs.iter().zip(&decisions) {
            if matches!(d, Decision::Wait { .. } | Decision::Preempt { .. }) {
                let used = admitted_gpus(&jobs, &decisions, job.team);
                prop_assert!(used + job.gpus > TOTAL / 3, "job {} waits although its team holds {used}", job.id);
            }
        }
    }

    #[test]
    fn gangs_start_whole_within_node_capacity_and_running_jobs_keep_their_gpus(jobs in jobs_strategy()) {
        let w = QueueWeights::default();
        let decisions = plan(&w, &teams(4), &jobs, &Usage::new(3, 0.0), &[PER_NODE; NODES]);
        let mut used = [0u32; NODES];
        for (job, d) in jobs.iter().zip(&decisions) {
            let parts: &[(usize, u32)] = match d {
                Decision::Keep { .. } => &job.held,
                Decision::Start { nodes, .. } => {
                    prop_assert!(job.held.is_empty());
                    prop_assert_eq!(nodes.iter().map(|p| p.1).sum::<u32>(), job.gpus, "all or nothing");
                    nodes
                }
                Decision::Preempt { .. } => {
                    prop_assert!(job.preemptible && !job.held.is_empty());
                    &[]
                }
                Decision::Wait { .. } => &[],
            };
            for (node, n) in parts {
                used[*node] += n;
            }
        }
        prop_assert!(used.iter().all(|u| *u <= PER_NODE), "over-committed a node: {used:?}");
    }

    #[test]
    fn priority_preemption_never_evicts_a_job_of_equal_or_higher_priority(
        raw in prop::collection::vec((0i32..5, 1u32..8, 0.0f64..1e5), 0..12),
        need in 1u32..30, free in 0u32..6, priority in 0i32..5,
    ) {
        let candidates: Vec<Victim> = raw.iter().enumerate()
            .map(|(i, (p, g, lost))| Victim { id: i as u64, priority: *p, gpus: *g, lost_gpu_s: *lost })
            .collect();
        let eligible: u32 = candidates.iter().filter(|v| v.priority < priority).map(|v| v.gpus).sum();
        match choose_victims(need, free, priority, &candidates) {
            None => prop_assert!(free + eligible < need),
            Some(ids) => {
                let chosen: Vec<&Victim> = candidates.iter().filter(|v| ids.contains(&v.id)).collect();
                prop_assert!(chosen.iter().all(|v| v.priority < priority));
                let freed: u32 = chosen.iter().map(|v| v.gpus).sum();
                prop_assert!(free + freed >= need);
                // Minimal: sparing any one victim would not free enough.
                prop_assert!(chosen.iter().all(|v| free + freed - v.gpus < need));
            }
        }
    }

    #[test]
    fn a_round_preempts_a_job_only_when_evicting_lower_priority_jobs_would_not_make_room(jobs in jobs_strategy()) {
        let w = QueueWeights { aging_s: 0.0, ..QueueWeights::default() };
        let decisions = plan(&w, &teams(0), &jobs, &Usage::new(3, 0.0), &[PER_NODE; NODES]);
        let runs = |d: &Decision| matches!(d, Decision::Keep { .. } | Decision::Start { .. });
        let admitted: u32 = jobs.iter().zip(&decisions).filter(|(_, d)| runs(d)).map(|(j, _)| j.gpus).sum();
        for (victim, d) in jobs.iter().zip(&decisions) {
            if matches!(d, Decision::Preempt { .. }) {
                let lower: u32 = jobs.iter().zip(&decisions)
                    .filter(|(j, d)| runs(d) && j.preemptible && j.priority < victim.priority)
                    .map(|(j, _)| j.gpus)
                    .sum();
                prop_assert!(TOTAL - admitted + lower < victim.gpus,
                    "job {} (priority {}) preempted although lower-priority jobs hold {lower} GPUs", victim.id, victim.priority);
            }
        }
    }

    #[test]
    fn every_job_starts_within_a_bound_in_a_randomized_workload(
        raw in prop::collection::vec((0usize..3, 0i32..3, 1u32..=8, 60u32..3_000, 0u32..4_000), 1..40),
    ) {
        // Arrivals and durations the queue never sees; 60 s rounds; aging one level per 10 min.
        let w = QueueWeights { aging_s: 600.0, ..QueueWeights::default() };
        let total_work: f64 = raw.iter().map(|r| f64::from(r.2) * f64::from(r.3)).sum();
        let last_arrival = raw.iter().map(|r| r.4).max().unwrap_or(0);
        let longest = raw.iter().map(|r| r.3).max().unwrap_or(0);
        let bound = f64::from(last_arrival) + 2.0 * total_work / f64::from(TOTAL) + f64::from(longest) + 3.0 * 600.0 + 120.0;
        let mut jobs: Vec<QueuedJob> = Vec::new();
        let mut remaining: Vec<f64> = Vec::new();
        let mut started: Vec<Option<u64>> = vec![None; raw.len()];
        let mut usage = Usage::new(3, 0.0);
        let mut pushed = vec![false; raw.len()];
        let mut now = 0u64;
        while started.iter().any(Option::is_none) && (now as f64) < bound * 2.0 {
            now += 60;
            for (i, r) in raw.iter().enumerate() {
                if u64::from(r.4) <= now && !pushed[i] {
                    pushed[i] = true;
                    jobs.push(QueuedJob { id: i as u64, team: r.0, priority: r.1, submitted_s: f64::from(r.4), gpus: r.2, worker_gpus: 1,
                        attained_gpu_s: 0.0, waited_s: 0.0, held: Vec::new(), preemptible: true });
                    remaining.push(f64::from(r.3));
                }
            }
            let decisions = plan(&w, &teams(8), &jobs, &usage, &[PER_NODE; NODES]);
            for (k, d) in decisions.into_iter().enumerate() {
                match d {
                    Decision::Start { nodes, .. } => {
                        started[jobs[k].id as usize].get_or_insert(now);
                        jobs[k].held = nodes;
                    }
                    Decision::Preempt { .. } => jobs[k].held.clear(),
                    _ => {}
                }
                if jobs[k].held.is_empty() {
                    jobs[k].waited_s += 60.0;
                } else {
                    jobs[k].attained_gpu_s += 60.0 * f64::from(jobs[k].gpus);
                    usage.charge(jobs[k].team, 60.0 * f64::from(jobs[k].gpus));
                    remaining[k] -= 60.0;
                }
            }
            let mut k = 0;
            while k < jobs.len() {
                if remaining[k] <= 0.0 { jobs.remove(k); remaining.remove(k); } else { k += 1; }
            }
        }
        for (i, s) in started.iter().enumerate() {
            let waited = s.map(|t| t as f64 - f64::from(raw[i].4));
            prop_assert!(waited.is_some_and(|x| x <= bound), "job {i} waited {waited:?} (bound {bound:.0} s)");
        }
    }
}

#[test]
fn a_gang_prefers_the_fullest_node_that_fits_then_the_fewest_nodes() {
    let mut free = vec![4, 2, 3, 0];
    assert_eq!(place_gang(&mut free, 2), Some(vec![(1, 2)]));
    assert_eq!(place_gang(&mut free, 6), Some(vec![(0, 4), (2, 2)]));
    assert_eq!(place_gang(&mut free, 2), None, "one GPU left: nothing is taken");
    assert_eq!(free, vec![0, 0, 1, 0]);
}

#[test]
fn workers_are_never_split_and_go_to_one_node_when_one_holds_them() {
    let mut free = vec![3, 4, 2, 0];
    assert_eq!(place_workers(&mut free, 2, 2), Some(vec![(1, 4)]), "one node holds both workers");
    assert_eq!(place_workers(&mut free, 3, 2), None, "5 GPUs are left but only 2 workers of 2 fit");
    assert_eq!(free, vec![3, 0, 2, 0], "nothing is taken when the gang does not fit");
    assert_eq!(place_workers(&mut free, 2, 2), Some(vec![(0, 2), (2, 2)]));
    assert_eq!(place_workers(&mut free, 1, 2), None);
    assert_eq!(place_workers(&mut free, 1, 1), Some(vec![(0, 1)]));
}

/// A gang of `workers` × `per` GPUs, waiting.
fn gang(id: u64, workers: u32, per: u32, priority: i32) -> QueuedJob {
    QueuedJob {
        id,
        team: 0,
        priority,
        submitted_s: id as f64,
        gpus: workers * per,
        worker_gpus: per,
        attained_gpu_s: 0.0,
        waited_s: 0.0,
        held: Vec::new(),
        preemptible: true,
    }
}

proptest! {
    #[test]
    fn gangs_start_whole_on_whole_workers_or_not_at_all(
        raw in prop::collection::vec((1u32..=4, prop::sample::select(vec![1u32, 2, 4]), 0i32..3), 1..12),
        capacity in prop::collection::vec(0u32..=8, 1..5),
    ) {
        let jobs: Vec<QueuedJob> =
            raw.iter().enumerate().map(|(i, (w, per, prio))| gang(i as u64, *w, *per, *prio)).collect();
        let w = QueueWeights::default();
        let decisions = plan(&w, &teams(0), &jobs, &Usage::new(3, 0.0), &capacity);
        let mut used = vec![0u32; capacity.len()];
        for (job, d) in jobs.iter().zip(&decisions) {
            if let Decision::Start { nodes, .. } = d {
                let total: u32 = nodes.iter().map(|(_, n)| n).sum();
                prop_assert_eq!(total, job.gpus, "all or nothing");
                for (node, n) in nodes {
                    prop_assert_eq!(n % job.worker_gpus, 0, "a worker is never split between nodes");
                    used[*node] += n;
                }
            }
        }
        for (u, c) in used.iter().zip(&capacity) {
            prop_assert!(u <= c, "a node gives out more GPUs than it has");
        }
    }

    #[test]
    fn two_gangs_never_deadlock_the_higher_ranked_one_starts(
        a in (1u32..=4, prop::sample::select(vec![1u32, 2, 4])),
        b in (1u32..=4, prop::sample::select(vec![1u32, 2, 4])),
        capacity in prop::collection::vec(0u32..=8, 1..5),
    ) {
        let jobs = vec![gang(0, a.0, a.1, 1), gang(1, b.0, b.1, 0)];
        let decisions = plan(&QueueWeights::default(), &teams(0), &jobs, &Usage::new(3, 0.0), &capacity);
        let mut free = capacity.clone();
        if place_workers(&mut free, a.0, a.1).is_some() {
            prop_assert!(matches!(decisions[0], Decision::Start { .. }), "the head gang fits alone: {decisions:?}");
        }
        // Neither gang holds part of the cluster while waiting: a waiting gang has no GPUs.
        for d in &decisions {
            let starts_or_waits = matches!(d, Decision::Start { .. } | Decision::Wait { .. });
            prop_assert!(starts_or_waits, "{:?}", d);
        }
    }
}

#[test]
fn small_jobs_do_not_starve_a_large_gang() {
    // 2 × 4 GPUs; a running 1-GPU job on each node; an 8-GPU gang (2 workers × 4) waits; 1-GPU
    // jobs keep arriving behind it. With gang reservation none of them starts: the gang waits only
    // for the jobs already running, then starts on both nodes.
    let w = QueueWeights { gang_reservation: true, ..QueueWeights::default() };
    let running = |id: u64, node: usize| QueuedJob { held: vec![(node, 1)], ..gang(id, 1, 1, 0) };
    let mut jobs = vec![running(0, 0), running(1, 1), gang(2, 2, 4, 0)];
    // The running jobs were submitted before the gang, so they keep their place.
    jobs[0].submitted_s = -3.0;
    jobs[1].submitted_s = -2.0;
    jobs[2].submitted_s = -1.0;
    jobs.extend((3..8).map(|id| gang(id, 1, 1, 0)));
    let d = plan(&w, &teams(0), &jobs, &Usage::new(3, 0.0), &[4, 4]);
    assert_eq!(d[2], Decision::Wait { job: 2 });
    for (k, decision) in d.iter().enumerate().skip(3) {
        assert_eq!(*decision, Decision::Wait { job: k as u64 }, "a small job overtook the gang");
    }
    let without = plan(&QueueWeights::default(), &teams(0), &jobs, &Usage::new(3, 0.0), &[4, 4]);
    assert!(
        without[3..].iter().any(|d| matches!(d, Decision::Start { .. })),
        "the reservation is what holds them"
    );
    jobs.drain(..2);
    let d = plan(&w, &teams(0), &jobs, &Usage::new(3, 0.0), &[4, 4]);
    assert!(matches!(&d[0], Decision::Start { nodes, .. } if nodes == &vec![(0, 4), (1, 4)]), "{d:?}");
}

#[test]
fn a_gang_held_back_by_its_teams_cap_reserves_nothing() {
    // Team 0 may hold at most 4 GPUs (no guarantee, borrow limit 0.5 of 8); its 2 × 4 gang cannot
    // start whatever is free, so team 1's small jobs use the idle GPUs.
    let w = QueueWeights { gang_reservation: true, borrow_limit: 0.5, ..QueueWeights::default() };
    let mut jobs = vec![gang(0, 2, 4, 0)];
    jobs.extend((1..4).map(|id| QueuedJob { team: 1, ..gang(id, 1, 1, 0) }));
    let d = plan(&w, &teams(0), &jobs, &Usage::new(3, 0.0), &[4, 4]);
    assert_eq!(d[0], Decision::Wait { job: 0 });
    assert!(d[1..].iter().all(|d| matches!(d, Decision::Start { .. })), "{d:?}");
}

#[test]
fn service_bands_are_geometric_and_capped() {
    let w = QueueWeights::parse("band_base_gpu_s=100,band_factor=2,bands=3").expect("weights");
    assert_eq!([w.band(0.0), w.band(99.0), w.band(100.0), w.band(250.0), w.band(1e9)], [0, 0, 1, 2, 3]);
    assert!(QueueWeights::parse("nonsense=1").is_err());
    assert!(QueueWeights::parse("band_factor=1").is_err());
}

#[test]
fn decayed_usage_halves_after_one_half_life() {
    let mut u = Usage::new(2, 0.0);
    u.charge(1, 1000.0);
    u.decay_to(3600.0, 3600.0);
    assert!((u.of(1) - 500.0).abs() < 1e-9);
    assert_eq!(u.of(0), 0.0);
}

#[test]
fn a_non_preemptible_job_does_not_backfill_ahead_of_a_blocked_head() {
    let job = |id: u64, gpus: u32, preemptible: bool, held: Vec<(usize, u32)>| QueuedJob {
        id,
        team: 0,
        priority: 0,
        submitted_s: id as f64,
        gpus,
        worker_gpus: 1,
        attained_gpu_s: 0.0,
        waited_s: 0.0,
        held,
        preemptible,
    };
    // 8 GPUs; a running non-preemptible 4-GPU job; the head needs 8; two 2-GPU jobs behind it.
    let jobs = vec![
        job(0, 4, false, vec![(0, 4)]),
        job(1, 8, true, vec![]),
        job(2, 2, false, vec![]),
        job(3, 2, true, vec![]),
    ];
    let w = QueueWeights::default();
    let d = plan(&w, &[Team { guaranteed_gpus: 0, weight: 1.0 }], &jobs, &Usage::new(1, 0.0), &[4, 4]);
    assert_eq!(d[1], Decision::Wait { job: 1 });
    assert_eq!(d[2], Decision::Wait { job: 2 }, "would hold GPUs the head needs with no way to reclaim them");
    assert!(
        matches!(d[3], Decision::Start { .. }),
        "preemptible backfill is fine: it yields when the head fits"
    );
}

/// A waiting or running job of team 0, priority 0, band 0, submitted at `id` s.
fn plain(id: u64, gpus: u32, held: Vec<(usize, u32)>) -> QueuedJob {
    QueuedJob { held, ..gang(id, gpus, 1, 0) }
}

#[test]
fn a_backfill_gives_its_gpus_back_when_the_earlier_wide_job_fits() {
    // 2 × 4 GPUs. The 8-GPU job 1 was blocked while job 0 ran, and job 2 (4 GPUs, submitted
    // later) backfilled on node 1. Job 0 has finished: node 0 is free. Job 1 ranks before the
    // backfill (FIFO within its band), so the backfill yields and job 1 starts on both nodes.
    let jobs = vec![plain(1, 8, vec![]), plain(2, 4, vec![(1, 4)])];
    let w = QueueWeights::default();
    let d = plan(&w, &teams(0), &jobs, &Usage::new(3, 0.0), &[4, 4]);
    assert!(matches!(&d[0], Decision::Start { nodes, .. } if nodes == &vec![(0, 4), (1, 4)]), "{d:?}");
    assert_eq!(d[1], Decision::Preempt { job: 2, by: Some(1), reason: "outranked" });
    // Without it a running job outranks every waiting one of its band: the wide job waits for as
    // long as narrow jobs keep backfilling.
    let old = QueueWeights { backfill_yields: false, ..w };
    let d = plan(&old, &teams(0), &jobs, &Usage::new(3, 0.0), &[4, 4]);
    assert_eq!(d, vec![Decision::Wait { job: 1 }, Decision::Keep { job: 2 }]);
}

#[test]
fn a_backfill_keeps_its_gpus_against_a_later_job_and_against_any_job_of_a_higher_band() {
    let w = QueueWeights::default();
    // The waiting 8-GPU job was submitted after the running one: FIFO keeps the running job.
    let jobs = vec![plain(2, 8, vec![]), plain(1, 4, vec![(1, 4)])];
    let d = plan(&w, &teams(0), &jobs, &Usage::new(3, 0.0), &[4, 4]);
    assert_eq!(d, vec![Decision::Wait { job: 2 }, Decision::Keep { job: 1 }]);
    // An earlier job that has already received more service than the first threshold waits
    // behind the band-0 job.
    let mut served = plain(1, 8, vec![]);
    served.attained_gpu_s = w.band_base_gpu_s;
    let jobs = vec![served, plain(2, 4, vec![(1, 4)])];
    let d = plan(&w, &teams(0), &jobs, &Usage::new(3, 0.0), &[4, 4]);
    assert_eq!(d, vec![Decision::Wait { job: 1 }, Decision::Keep { job: 2 }]);
}

#[test]
fn fair_share_orders_teams_only_when_their_usage_differs_by_a_step() {
    // One free GPU, two waiting 1-GPU jobs: team 1's was submitted first.
    let mut first = plain(1, 1, vec![]);
    first.team = 1;
    let jobs = vec![first, plain(2, 1, vec![])];
    let w = QueueWeights::default();
    let starts = |usage: &Usage| {
        let d = plan(&w, &teams(0), &jobs, usage, &[1]);
        d.iter().position(|d| matches!(d, Decision::Start { .. }))
    };
    let mut close = Usage::new(3, 0.0);
    close.charge(1, 30_000.0);
    close.charge(0, 10_000.0);
    assert_eq!(starts(&close), Some(0), "usage within a factor of {}: FIFO decides", w.share_step);
    let mut far = Usage::new(3, 0.0);
    far.charge(1, 200_000.0);
    far.charge(0, 10_000.0);
    assert_eq!(starts(&far), Some(1), "team 1 used far more: team 0 goes first");
    let exact = QueueWeights { share_step: 1.0, ..w.clone() };
    assert_eq!(
        plan(&exact, &teams(0), &jobs, &close, &[1])[1],
        Decision::Start { job: 2, nodes: vec![(0, 1)] }
    );
}

proptest! {
    #[test]
    fn the_indexed_counts_place_every_job_where_the_scan_over_nodes_does(
        free in prop::collection::vec(0u32..9, 1..40),
        jobs in prop::collection::vec((0u32..12, 1u32..5), 1..40),
    ) {
        let mut scanned = free.clone();
        let mut indexed = free::FreeIndex::new(free);
        for (workers, per) in jobs {
            let want = place_workers(&mut scanned, workers, per);
            prop_assert_eq!(indexed.place_workers(workers, per), want, "{} workers of {}", workers, per);
        }
    }
}
