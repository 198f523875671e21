//! The scheduler's incremental copy of the store ([`State`]): after any sequence of writes, what
//! it holds (rows and the core's ledger of them) equals a full reload, and the pass plans on it
//! exactly what it plans on a snapshot read from scratch (the way every pass read the store
//! before); changes of jobs never build the ledger again.

use std::collections::BTreeMap;

use gantry_core::PolicyKind;
use gantry_server::scheduler::{
    Plan, QueueInput, Snapshot, State, Synced, decide, gang, held, placement, plan,
};
use gantry_store::*;
use proptest::prelude::*;

const NODES: u8 = 3;

/// One write to the store, as the control plane or an agent makes it.
#[derive(Debug, Clone)]
enum Op {
    Submit {
        team: u8,
        gpus: u32,
        slice: bool,
        priority: i32,
        replicas: u32,
    },
    Cancel(usize),
    Register(u8),
    /// A pass: plan on the incremental snapshot and place through the store.
    Pass,
    Start(usize),
    End(usize, i32),
    Expire,
    Health(u8, u32, bool),
    Quota(u8, Option<u32>),
    Preempt(usize),
    /// The scheduler syncs now (changes pile up between syncs otherwise).
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..2, 0u32..3, any::<bool>(), 0i32..3, prop::sample::select(vec![1u32, 1, 2]))
            .prop_map(|(team, gpus, slice, priority, replicas)| Op::Submit { team, gpus, slice, priority, replicas }),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => (0..NODES).prop_map(Op::Register),
        3 => Just(Op::Pass),
        2 => any::<usize>().prop_map(Op::Start),
        2 => (any::<usize>(), 0i32..2).prop_map(|(j, c)| Op::End(j, c)),
        1 => Just(Op::Expire),
        1 => (0..NODES, 0u32..2, any::<bool>()).prop_map(|(n, g, ok)| Op::Health(n, g, ok)),
        1 => (0u8..2, prop::option::of(0u32..4)).prop_map(|(t, q)| Op::Quota(t, q)),
        1 => any::<usize>().prop_map(Op::Preempt),
        3 => Just(Op::Sync),
    ]
}

/// The snapshot every pass read before the scheduler kept a copy: everything, from the store.
fn reload(store: &dyn Store, at: i64) -> Snapshot {
    let nodes = store.nodes().expect("nodes");
    if !nodes.iter().any(|n| n.state == NodeState::Ready) {
        return Snapshot { nodes, at, ..Snapshot::default() };
    }
    let by_state =
        |state| store.jobs(&JobFilter { state: Some(state), ..JobFilter::default() }).expect("jobs");
    let mut active = by_state(JobState::Scheduled);
    active.extend(by_state(JobState::Running));
    Snapshot {
        nodes,
        gpus: store.gpus().expect("gpus"),
        held: store.allocations(true).expect("allocations").iter().map(held).collect(),
        pending: by_state(JobState::Pending),
        active,
        teams: store.teams().expect("teams"),
        at,
        ..Snapshot::default()
    }
}

/// What a plan decided, comparable.
fn decided(s: &Snapshot) -> String {
    let p = plan(s, PolicyKind::Gantry, 7);
    format!("{:?} {:?} {:?} {:?}", p.placements, p.gangs, p.preemptions, p.waiting)
}

struct World {
    store: SqliteStore,
    _dir: tempfile::TempDir,
    jobs: Vec<JobId>,
    epochs: BTreeMap<u8, u64>,
    clock: i64,
}

impl World {
    fn job(&self, k: usize) -> Option<Job> {
        let id = *self.jobs.get(k % self.jobs.len().max(1))?;
        self.store.job(id).ok().flatten()
    }

    fn heartbeat(&self, node: &str, epoch: u64, gpus: Vec<GpuReport>, jobs: Vec<JobReport>) {
        let hb = Heartbeat { node_id: node.into(), epoch, gpus, jobs, logs: Vec::new() };
        let _ = self.store.heartbeat(&hb, self.clock);
    }

    /// Reports every active job of `node` (an agent reports all it runs), `change` for one.
    fn report(&self, job: &Job, exit: Option<JobExit>) {
        let (Some(node), Some(epoch)) = (job.node_id.clone(), job.epoch) else { return };
        let report = JobReport { job_id: job.id, attempt: job.attempt, exit };
        self.heartbeat(&node, epoch, Vec::new(), vec![report]);
    }

    fn apply(&mut self, op: &Op, state: &mut State) {
        self.clock += 1_000;
        match op {
            Op::Submit { team, gpus, slice, priority, replicas } => {
                let spec = SubmitRequest {
                    command: vec!["true".into()],
                    priority: *priority,
                    replicas: Some(if *slice { 1 } else { *replicas }),
                    max_retries: Some(1),
                    ..SubmitRequest::default()
                };
                let spec = if *slice {
                    SubmitRequest { gpu_memory_mib: 20_000, ..spec }
                } else {
                    SubmitRequest { gpus: GpuRange::count(*gpus), cpu_milli: 1000, ..spec }
                };
                let job = NewJob {
                    spec,
                    team: format!("t{team}"),
                    name: "j".into(),
                    submitted_at: self.clock,
                    user: None,
                    service: None,
                    pending_limit: None,
                    pending_bytes_limit: None,
                };
                if let Ok((id, _)) = self.store.submit(&job) {
                    self.jobs.push(id);
                }
            }
            Op::Cancel(k) => {
                if let Some(job) = self.job(*k) {
                    let _ = self.store.cancel(job.id, self.clock);
                }
            }
            Op::Register(n) => {
                let gpus = (0..2)
                    .map(|i| GpuInfo {
                        uuid: format!("GPU-{n}-{i}"),
                        index: i,
                        model: "A100-80GB".into(),
                        memory_mib: 81920,
                    })
                    .collect();
                let reg = NodeRegistration {
                    request: RegisterRequest {
                        node_id: format!("n{n}"),
                        hostname: format!("h{n}"),
                        advertise_addr: (*n == 1).then(|| "10.0.0.1".to_owned()),
                        network: Default::default(),
                        job_defaults: None,
                        labels: Default::default(),
                        cpu_milli: 8000,
                        memory_mib: 64_000,
                        gpus,
                        attempts: Vec::new(),
                    },
                    at: self.clock,
                };
                if let Ok(epoch) = self.store.register_node(&reg) {
                    self.epochs.insert(*n, epoch);
                }
            }
            Op::Pass => {
                state.sync(&self.store).expect("sync");
                // The loop's own path: the core's plan on the kept ledger.
                let p = Plan::from(decide(state, self.clock, QueueInput::default(), PolicyKind::Gantry));
                for p in &p.placements {
                    let _ = self.store.place(&placement(p.clone()));
                }
                for g in &p.gangs {
                    let _ = self.store.place_gang(&gang(g.clone()));
                }
                for v in &p.preemptions {
                    let _ = self.store.preempt(v.job_id, &v.reason, self.clock);
                }
            }
            Op::Start(k) => {
                if let Some(job) = self.job(*k).filter(|j| j.state == JobState::Scheduled) {
                    self.report(&job, None);
                }
            }
            Op::End(k, code) => {
                if let Some(job) = self.job(*k).filter(|j| j.state.is_active()) {
                    self.report(
                        &job,
                        Some(JobExit { exit_code: Some(*code), reason: None, timed_out: false }),
                    );
                }
            }
            Op::Expire => {
                let _ = self.store.expire_nodes(self.clock - 2_500, self.clock);
            }
            Op::Health(n, g, ok) => {
                if let Some(epoch) = self.epochs.get(n) {
                    let health = if *ok { GpuHealth::Healthy } else { GpuHealth::Unhealthy };
                    let report = GpuReport { uuid: format!("GPU-{n}-{g}"), health, sample: None };
                    self.heartbeat(&format!("n{n}"), *epoch, vec![report], Vec::new());
                }
            }
            Op::Quota(t, quota) => {
                let _ = self.store.set_team(&Team {
                    name: format!("t{t}"),
                    gpu_quota: *quota,
                    ..Team::default()
                });
            }
            Op::Preempt(k) => {
                if let Some(job) = self.job(*k).filter(|j| j.state.is_active()) {
                    let _ = self.store.preempt(job.id, "a test", self.clock);
                }
            }
            Op::Sync => {
                state.sync(&self.store).expect("sync");
            }
        }
    }
}

fn world() -> World {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path()).expect("open store");
    World { store, _dir: dir, jobs: Vec::new(), epochs: BTreeMap::new(), clock: 1_000_000 }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn an_incremental_state_equals_a_full_reload_and_plans_the_same(ops in prop::collection::vec(op(), 1..60)) {
        let mut w = world();
        let mut state = State::load(&w.store).expect("load");
        for op in &ops {
            w.apply(op, &mut state);
            if matches!(op, Op::Pass) {
                // What the pass wrote is read on the next sync, as the next pass does.
                prop_assert_ne!(state.sync(&w.store).expect("sync"), Synced::Reloaded);
            }
            if matches!(op, Op::Sync | Op::Pass) {
                prop_assert_eq!(&state, &State::load(&w.store).expect("load"), "after {:?}", op);
            }
        }
        let synced = state.sync(&w.store).expect("sync");
        prop_assert_ne!(synced, Synced::Reloaded);
        let full = State::load(&w.store).expect("load");
        prop_assert_eq!(&state, &full);
        prop_assert_eq!(decided(&state.snapshot(w.clock)), decided(&reload(&w.store, w.clock)));
    }
}

#[test]
fn a_sync_with_nothing_new_changes_nothing_and_a_heartbeat_is_not_a_change() {
    let mut w = world();
    let mut state = State::load(&w.store).expect("load");
    w.apply(&Op::Register(0), &mut state);
    w.apply(&Op::Submit { team: 0, gpus: 1, slice: false, priority: 0, replicas: 1 }, &mut state);
    assert_eq!(state.sync(&w.store).expect("sync"), Synced::Applied);
    assert_eq!(state.pending(), 1);
    assert_eq!(state.sync(&w.store).expect("sync"), Synced::Unchanged);
    let sample = Some(serde_json::json!({"gpu_util_percent": 40}));
    let report = GpuReport { uuid: "GPU-0-0".into(), health: GpuHealth::Healthy, sample };
    w.clock += 1_000;
    w.heartbeat("n0", w.epochs[&0], vec![report], Vec::new());
    assert_eq!(state.sync(&w.store).expect("sync"), Synced::Unchanged, "a heartbeat with no news");
}

#[test]
fn a_state_from_another_store_reloads_instead_of_guessing() {
    let mut w = world();
    let mut state = State::load(&w.store).expect("load");
    w.apply(&Op::Register(0), &mut state);
    w.apply(&Op::Submit { team: 0, gpus: 1, slice: false, priority: 0, replicas: 1 }, &mut state);
    state.sync(&w.store).expect("sync");
    let other = world();
    assert_eq!(state.sync(&other.store).expect("sync"), Synced::Reloaded, "its log is behind this position");
    assert_eq!(state, State::load(&other.store).expect("load"));
}

#[test]
fn passes_over_changes_of_jobs_keep_one_ledger_and_only_a_node_change_builds_it_again() {
    let mut w = world();
    w.apply(&Op::Register(0), &mut State::load(&w.store).expect("load"));
    let mut state = State::load(&w.store).expect("load");
    for op in [
        Op::Submit { team: 0, gpus: 1, slice: false, priority: 0, replicas: 1 },
        Op::Submit { team: 1, gpus: 0, slice: true, priority: 0, replicas: 1 },
        Op::Pass,
        Op::Sync,
        Op::Start(0),
        Op::Sync,
        Op::End(0, 0),
        Op::Pass,
        Op::Sync,
    ] {
        w.apply(&op, &mut state);
    }
    let placed =
        w.jobs.iter().filter_map(|id| w.store.job(*id).ok().flatten()).filter(|j| j.node_id.is_some());
    assert_eq!(placed.count(), 2, "both jobs were placed through the kept ledger");
    assert_eq!(state.ledger_builds(), 1, "submissions, placements and ends are applied, not rebuilt");
    assert_eq!(state, State::load(&w.store).expect("load"));
    w.apply(&Op::Health(0, 1, false), &mut state);
    w.apply(&Op::Sync, &mut state);
    assert_eq!(state.ledger_builds(), 2, "a GPU fault changes the cluster: the ledger is built again");
    assert_eq!(state, State::load(&w.store).expect("load"));
}
