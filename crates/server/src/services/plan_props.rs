//! The rollout model-checked (issue 38, point 1): random sequences of applies (some of a broken
//! file), autoscaler changes of the count, replicas turning ready, failing and lost with their
//! node, each tick carried out as the controller would. Required: no tick's actions take the
//! ready replicas below `desired − max_unavailable` (or below what there were, when fewer), a
//! start never takes the live replicas above `desired + max_surge`, and once the disturbances
//! stop the service converges to `desired` ready replicas of the newest generation — or, when
//! that generation cannot become ready, says its rollout is stuck and keeps the older
//! generation serving.

use std::collections::HashSet;

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Event {
    /// A changed file: a new generation, whose replicas never become ready when `broken`.
    Apply { broken: bool },
    /// The autoscaler (or an edit of the count) sets the count.
    Scale(u32),
    /// The k-th starting replica passes its probe.
    Ready(usize),
    /// The k-th live replica exits with a failure.
    Fail(usize),
    /// A node is lost: the replicas the mask picks vanish.
    Lose(u8),
    /// A controller tick, its actions carried out.
    Tick,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        1 => any::<bool>().prop_map(|b| Event::Apply { broken: b }),
        1 => (0u32..5).prop_map(Event::Scale),
        3 => any::<usize>().prop_map(Event::Ready),
        1 => any::<usize>().prop_map(Event::Fail),
        1 => any::<u8>().prop_map(Event::Lose),
        5 => Just(Event::Tick),
    ]
}

const DEADLINE_MS: i64 = 30_000;

struct World {
    replicas: Vec<ReplicaState>,
    generation: u64,
    broken: HashSet<u64>,
    desired: u32,
    failures: u32,
    last_failure_at: i64,
    now: i64,
    next: i64,
    surge: u32,
    unavailable: u32,
    /// (generation, its ready replicas, when it last progressed), as the controller keeps it.
    progress: (u64, usize, i64),
    /// The last plan's stuck sentence.
    stuck: Option<String>,
}

impl World {
    fn new(desired: u32, surge: u32, unavailable: u32) -> Self {
        let replicas =
            (1..=i64::from(desired)).map(|job| ReplicaState { job, generation: 1, phase: Phase::Ready });
        World {
            replicas: replicas.collect(),
            generation: 1,
            broken: HashSet::new(),
            desired,
            failures: 0,
            last_failure_at: 0,
            now: 1_000_000,
            next: 100,
            surge,
            unavailable,
            progress: (1, desired as usize, 1_000_000),
            stuck: None,
        }
    }

    fn ready(&self) -> usize {
        self.replicas.iter().filter(|r| r.phase == Phase::Ready).count()
    }

    fn fail(&mut self, job: JobId) {
        if let Some(r) = self.replicas.iter().find(|r| r.job == job).copied() {
            self.replicas.retain(|x| x.job != job);
            if r.generation == self.generation {
                self.failures += 1;
                self.last_failure_at = self.now;
            }
        }
    }

    fn apply(&mut self, e: &Event) -> Result<(), TestCaseError> {
        match *e {
            Event::Apply { broken } => {
                self.generation += 1;
                if broken {
                    self.broken.insert(self.generation);
                }
            }
            Event::Scale(n) => self.desired = n,
            Event::Ready(k) => {
                let starting: Vec<usize> = (0..self.replicas.len())
                    .filter(|&i| {
                        let r = &self.replicas[i];
                        r.phase == Phase::Starting && !self.broken.contains(&r.generation)
                    })
                    .collect();
                if let Some(&i) = starting.get(k % starting.len().max(1)) {
                    self.replicas[i].phase = Phase::Ready;
                }
            }
            Event::Fail(k) => {
                let live: Vec<JobId> =
                    self.replicas.iter().filter(|r| r.phase.live()).map(|r| r.job).collect();
                if let Some(&job) = live.get(k % live.len().max(1)) {
                    self.fail(job);
                }
            }
            Event::Lose(mask) => {
                let mut i = 0;
                self.replicas.retain(|_| {
                    i += 1;
                    mask & (1 << (i % 8)) == 0
                });
            }
            Event::Tick => self.tick()?,
        }
        Ok(())
    }

    /// One controller tick: the plan, checked, then carried out; placed replicas start.
    fn tick(&mut self) -> Result<(), TestCaseError> {
        self.now += 1_000;
        // Drained replicas have answered their requests; pending ones were placed.
        self.replicas.retain(|r| r.phase != Phase::Draining);
        for r in &mut self.replicas {
            if r.phase == Phase::Pending {
                r.phase = Phase::Starting;
            }
        }
        let new_ready = self
            .replicas
            .iter()
            .filter(|r| r.phase == Phase::Ready && r.generation == self.generation)
            .count();
        if new_ready > 0 || self.progress.0 != self.generation {
            self.failures = 0;
        }
        let p = &mut self.progress;
        if p.0 != self.generation || new_ready > p.1 || new_ready >= self.desired as usize {
            *p = (self.generation, new_ready, self.now);
        }
        p.1 = new_ready;
        let input = Input {
            generation: self.generation,
            desired: self.desired,
            replicas: self.replicas.clone(),
            failures: self.failures,
            last_failure_at: self.last_failure_at,
            now: self.now,
            room: None,
            rollout: Rollout {
                max_surge: self.surge,
                max_unavailable: self.unavailable,
                since: self.progress.2,
                deadline_ms: DEADLINE_MS,
                last_failure: Some("exit 1: ImportError".into()),
            },
        };
        let plan = plan(&input);
        let before = self.ready();
        let mut started = false;
        for a in &plan.actions {
            match a {
                Action::Start => {
                    started = true;
                    self.replicas.push(ReplicaState {
                        job: self.next,
                        generation: self.generation,
                        phase: Phase::Pending,
                    });
                    self.next += 1;
                }
                Action::Drain(j, _) => {
                    self.replicas.iter_mut().filter(|r| r.job == *j).for_each(|r| r.phase = Phase::Draining);
                }
                Action::Stop(j, _) => self.replicas.retain(|r| r.job != *j),
            }
        }
        let floor = (self.desired.saturating_sub(self.unavailable) as usize).min(before);
        prop_assert!(
            self.ready() >= floor,
            "ready {} < {floor} after {:?} on {:?}",
            self.ready(),
            plan.actions,
            input
        );
        let live = self.replicas.iter().filter(|r| r.phase.live()).count();
        let surge = self.surge.max(u32::from(self.unavailable == 0));
        prop_assert!(
            !started || live <= (self.desired + surge) as usize,
            "{live} live after a start, above {} + {surge}: {:?} on {:?}",
            self.desired,
            plan.actions,
            input
        );
        self.stuck = plan.stuck;
        Ok(())
    }

    /// Ticks with no disturbance: replicas start, the good ones become ready, the broken ones
    /// fail; until nothing changes for a while (or a bound).
    fn calm(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..400 {
            self.fail_broken();
            for r in &mut self.replicas {
                if r.phase == Phase::Starting && !self.broken.contains(&r.generation) {
                    r.phase = Phase::Ready;
                }
            }
            self.tick()?;
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_rollout_converges_to_the_newest_generation_or_says_it_is_stuck_and_never_drops_below_its_floor(
        desired in 0u32..4,
        surge in 0u32..3,
        unavailable in 0u32..3,
        events in prop::collection::vec(event(), 0..60),
    ) {
        let mut w = World::new(desired, surge, unavailable);
        for e in &events {
            w.apply(e)?;
        }
        let serving = w.ready();
        w.calm()?;
        let newest = w.generation;
        let desired = w.desired as usize;
        if w.broken.contains(&newest) && desired > 0 {
            let stuck = w.stuck.clone().unwrap_or_default();
            prop_assert!(stuck.starts_with(&format!("rollout stuck: generation {newest}")), "not reported: {:?}", w.replicas);
            prop_assert!(stuck.contains("ImportError"), "{stuck}");
            let floor = desired.saturating_sub(w.unavailable as usize).min(serving);
            let old_ready = w.replicas.iter().filter(|r| r.phase == Phase::Ready && r.generation < newest).count();
            prop_assert!(old_ready >= floor, "{old_ready} old ready, below {floor}: {:?}", w.replicas);
        } else {
            prop_assert_eq!(w.replicas.len(), desired, "{:?}", w.replicas);
            prop_assert!(
                w.replicas.iter().all(|r| r.generation == newest && r.phase == Phase::Ready),
                "not converged: {:?}", w.replicas
            );
            prop_assert!(w.stuck.is_none(), "{:?}", w.stuck);
        }
    }
}

#[test]
fn a_service_edited_from_two_replicas_to_one_retires_an_old_one_and_converges() {
    let mut w = World::new(2, 1, 0);
    w.generation = 2;
    w.desired = 1;
    w.tick().expect("tick");
    assert_eq!(w.replicas.iter().filter(|r| r.phase.live()).count(), 2, "one old retired, one new started");
    w.calm().expect("calm");
    assert_eq!(w.replicas.len(), 1);
    assert!(w.replicas.iter().all(|r| r.generation == 2 && r.phase == Phase::Ready), "{:?}", w.replicas);
}

#[test]
fn the_autoscaler_lowering_the_count_mid_rollout_does_not_stall_it() {
    let mut w = World::new(3, 1, 0);
    w.generation = 2;
    w.tick().expect("tick");
    // One new replica starting; the count falls to 1.
    w.desired = 1;
    w.calm().expect("calm");
    assert_eq!(w.replicas.len(), 1, "{:?}", w.replicas);
    assert!(w.replicas.iter().all(|r| r.generation == 2 && r.phase == Phase::Ready), "{:?}", w.replicas);
}

#[test]
fn a_broken_generation_backs_off_is_reported_stuck_with_its_last_words_and_the_old_one_keeps_serving() {
    let mut w = World::new(2, 1, 0);
    w.generation = 2;
    w.broken.insert(2);
    let mut started = 0;
    for _ in 0..120 {
        let before = w.next;
        w.calm_once();
        started += w.next - before;
    }
    assert!(started < 12, "{started} replicas started in 120 s: the rollout path backs off");
    let stuck = w.stuck.clone().expect("stuck");
    assert!(
        stuck.starts_with("rollout stuck: generation 2 failed readiness") && stuck.ends_with("ImportError"),
        "{stuck}"
    );
    assert_eq!(w.replicas.iter().filter(|r| r.generation == 1 && r.phase == Phase::Ready).count(), 2);
    // Fixing the file (generation 3) starts afresh: no back-off inherited.
    w.apply(&Event::Apply { broken: false }).expect("apply");
    let before = w.next;
    w.tick().expect("tick");
    assert_eq!(w.next - before, 1, "the fixed generation starts at once");
    w.calm().expect("calm");
    assert!(w.stuck.is_none());
    assert!(w.replicas.iter().all(|r| r.generation == 3 && r.phase == Phase::Ready) && w.replicas.len() == 2);
}

impl World {
    /// One calm tick (see [`World::calm`]).
    fn calm_once(&mut self) {
        self.fail_broken();
        self.tick().expect("tick");
    }

    /// The starting replicas of a broken generation exit, failed.
    fn fail_broken(&mut self) {
        let broken: Vec<JobId> = self
            .replicas
            .iter()
            .filter(|r| r.phase == Phase::Starting && self.broken.contains(&r.generation))
            .map(|r| r.job)
            .collect();
        for job in broken {
            self.fail(job);
        }
    }
}
