//! One event log, two engines, the same decisions: the server's scheduler (its store, the
//! incremental copy it keeps from the store's change log, the core's pass, each decision
//! dispatched as a command) and the simulator's virtual cluster (`gantry_sim::replay`, which
//! runs the same `gantry_core::sched::plan` on jobs held in memory). The log has submissions
//! (plain, elastic, a gang, a dependency), nodes joining, GPU faults, jobs ending, guarantees
//! reclaimed by shrinking an elastic job and preemption by priority within a team; every pass
//! must decide the same placements, gangs, victims, resizes, failed dependencies and waiting
//! reasons in both.

use gantry_core::PolicyKind;
use gantry_core::sched::{Decision, Memory};
use gantry_server::command::Command;
use gantry_server::scheduler::{self, State};
use gantry_sim::replay::VirtualCluster;
use gantry_store::*;

/// Least time between two resizes in both engines, ms.
const GAP_MS: i64 = 300_000;

#[derive(Debug, Clone)]
enum Step {
    Node(&'static str, u32),
    Team(&'static str, u32),
    Submit {
        team: &'static str,
        gpus: GpuRange,
        priority: i32,
        replicas: u32,
        after: Option<usize>,
    },
    Pass,
    StartAll,
    StopAll,
    /// Submission `k` (a job or a whole gang) exits with this status.
    End(usize, i32),
    Health(&'static str, u32, bool),
}

fn rigid(team: &'static str, gpus: u32, priority: i32) -> Step {
    Step::Submit { team, gpus: GpuRange { min: gpus, max: None }, priority, replicas: 1, after: None }
}

/// The server's side: its store and what its loop keeps between passes.
struct Server {
    store: SqliteStore,
    _dir: tempfile::TempDir,
    state: State,
    memory: Memory,
    epochs: std::collections::HashMap<String, u64>,
    /// Jobs that checkpoint, with their service (`QueueInput::checkpointing`).
    checkpointing: std::collections::HashMap<JobId, f64>,
}

impl Server {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open(dir.path()).expect("open store");
        let state = State::load(&store).expect("load");
        Self {
            store,
            _dir: dir,
            state,
            memory: Memory::default(),
            epochs: Default::default(),
            checkpointing: Default::default(),
        }
    }

    fn jobs(&self) -> Vec<Job> {
        self.store.jobs(&JobFilter::default()).expect("jobs")
    }

    /// The node's agent reports `job` with `exit`, and every other job it runs as running (an
    /// agent reports all it runs: a stopping job left out would count as stopped).
    fn report(&self, job: &Job, exit: Option<JobExit>, at: i64) {
        let (Some(node), Some(epoch)) = (job.node_id.clone(), job.epoch) else { return };
        let mut jobs = vec![JobReport { job_id: job.id, attempt: job.attempt, exit }];
        let others = self
            .jobs()
            .into_iter()
            .filter(|j| j.id != job.id && j.node_id == job.node_id && j.state == JobState::Running);
        jobs.extend(others.map(|j| JobReport { job_id: j.id, attempt: j.attempt, exit: None }));
        let hb = Heartbeat { node_id: node, epoch, gpus: Vec::new(), jobs, logs: Vec::new() };
        self.store.heartbeat(&hb, at).expect("heartbeat");
    }

    /// The scheduler's pass as `scheduler::pass` runs it, on this clock.
    fn pass(&mut self, at: i64) -> Vec<Decision> {
        self.pass_with(at, GAP_MS)
    }

    /// [`Server::pass`] with `gap_ms` between two resizes.
    fn pass_with(&mut self, at: i64, gap_ms: i64) -> Vec<Decision> {
        self.state.sync(&self.store).expect("sync");
        let waited_on = scheduler::waited_on(&self.state.plan_input(at, Default::default()).pending);
        let deps = scheduler::dependency_states(&self.store, waited_on).expect("dependencies");
        self.state.set_dependencies(deps);
        let mut queue = scheduler::prepare(&mut self.state, &mut self.memory, at, gap_ms);
        queue.checkpointing.clone_from(&self.checkpointing);
        let decisions = scheduler::decide(&mut self.state, at, queue, PolicyKind::Gantry);
        for d in &decisions {
            let done = match Command::try_from(d.clone()) {
                Ok(Command::Place(p)) => self.store.place(&p),
                Ok(Command::PlaceGang(g)) => self.store.place_gang(&g),
                Ok(Command::Preempt { job, reason }) => self.store.preempt(job, &reason, at),
                Ok(Command::Resize { job, reason }) => self.store.resize(job, &reason, at),
                Ok(Command::DependencyFailed { job, reason }) => {
                    self.store.dependency_failed(job, &reason, at)
                }
                Ok(other) => panic!("a pass decided {other:?}"),
                Err(_waits) => Ok(()),
            };
            if done.is_ok() {
                self.memory.carried_out(d);
            }
        }
        decisions
    }
}

/// Drives `log` through both engines; returns every pass's decisions (the server's).
fn replay(log: &[Step]) -> Vec<Vec<Decision>> {
    let (mut server, mut sim) = (Server::new(), VirtualCluster::default());
    let (mut at, mut submitted, mut passes): (i64, Vec<JobId>, Vec<Vec<Decision>>) =
        (1_000_000, Vec::new(), Vec::new());
    for event in log {
        at += 60_000;
        match event {
            Step::Node(name, gpus) => {
                let gpus = (0..*gpus)
                    .map(|i| GpuInfo {
                        uuid: format!("{name}-{i}"),
                        index: i,
                        model: "A100-80GB".into(),
                        memory_mib: 81_920,
                    })
                    .collect();
                let request = RegisterRequest {
                    node_id: (*name).into(),
                    hostname: (*name).into(),
                    advertise_addr: None,
                    network: Default::default(),
                    job_defaults: None,
                    labels: Default::default(),
                    cpu_milli: 64_000,
                    memory_mib: 512_000,
                    gpus,
                    attempts: Vec::new(),
                };
                let epoch = server.store.register_node(&NodeRegistration { request, at }).expect("register");
                server.epochs.insert((*name).into(), epoch);
                let mut node =
                    server.store.nodes().expect("nodes").into_iter().find(|n| n.id == *name).expect("node");
                node.last_heartbeat = 0;
                let gpus =
                    server.store.gpus().expect("gpus").into_iter().filter(|g| g.node_id == *name).collect();
                sim.add_node(node, gpus);
            }
            Step::Team(name, quota) => {
                server
                    .store
                    .set_team(&Team { name: (*name).into(), gpu_quota: Some(*quota), ..Team::default() })
                    .expect("team");
                let team =
                    server.store.teams().expect("teams").into_iter().find(|t| t.name == *name).expect("team");
                sim.set_team(team);
            }
            Step::Submit { team, gpus, priority, replicas, after } => {
                let after = after
                    .map(|k| Dependency { kind: DependencyKind::Ok, job: submitted[k] })
                    .into_iter()
                    .collect();
                let spec = SubmitRequest {
                    command: vec!["true".into()],
                    gpus: *gpus,
                    cpu_milli: 1_000,
                    priority: *priority,
                    replicas: Some(*replicas),
                    max_retries: Some(0),
                    after,
                    ..SubmitRequest::default()
                };
                let job = NewJob {
                    spec,
                    team: (*team).into(),
                    name: "j".into(),
                    submitted_at: at,
                    user: None,
                    service: None,
                    pending_limit: None,
                    pending_bytes_limit: None,
                };
                let (id, _) = server.store.submit(&job).expect("submit");
                submitted.push(id);
                for job in server.jobs().into_iter().filter(|j| j.id >= id && j.state == JobState::Pending) {
                    sim.submit(job);
                }
            }
            Step::Pass => {
                server.state.sync(&server.store).expect("sync");
                let (a, b) = (server.state.snapshot(at), sim.snapshot().clone());
                let jobs = |s: &gantry_core::sched::Snapshot| {
                    let p: Vec<_> = s.pending.iter().map(|j| (j.id, j.state, j.stop.clone())).collect();
                    let a: Vec<_> = s
                        .active
                        .iter()
                        .map(|j| {
                            (
                                j.id,
                                j.state,
                                j.node_id.clone(),
                                j.gpu_uuids.clone(),
                                j.stop.clone(),
                                j.started_at,
                            )
                        })
                        .collect();
                    let h: Vec<_> = s.held.iter().map(|h| (h.job_id, h.gpu_uuid.clone())).collect();
                    format!(
                        "pending {p:?}\nactive {a:?}\nheld {h:?}\ngpus {:?}",
                        s.gpus.iter().map(|g| (&g.info.uuid, g.health)).collect::<Vec<_>>()
                    )
                };
                assert_eq!(jobs(&a), jobs(&b), "before pass {}", passes.len());
                let (ours, theirs) = (server.pass(at), sim.pass(at, PolicyKind::Gantry, GAP_MS));
                assert_eq!(ours, theirs, "pass {} at {at}", passes.len());
                passes.push(ours);
            }
            Step::StartAll => {
                for job in server.jobs().iter().filter(|j| j.state == JobState::Scheduled) {
                    server.report(job, None, at);
                }
                sim.start_all(at);
            }
            Step::StopAll => {
                let exit = JobExit { exit_code: Some(143), reason: None, timed_out: false };
                for job in server.jobs().iter().filter(|j| j.state.is_active() && j.stop.is_some()) {
                    server.report(job, Some(exit.clone()), at);
                }
                sim.stop_all();
            }
            Step::End(k, code) => {
                let id = submitted[*k];
                let exit = JobExit { exit_code: Some(*code), reason: None, timed_out: false };
                let own =
                    |j: &Job| j.id == id || j.gang.as_ref().is_some_and(|g| g.id == id && g.is_worker());
                for job in
                    server.jobs().iter().filter(|j| own(j) && j.node_id.is_some() && j.state.is_active())
                {
                    server.report(job, Some(exit.clone()), at);
                }
                sim.end(id, if *code == 0 { JobState::Succeeded } else { JobState::Failed });
            }
            Step::Health(node, gpu, ok) => {
                let health = if *ok { GpuHealth::Healthy } else { GpuHealth::Unhealthy };
                let report = GpuReport { uuid: format!("{node}-{gpu}"), health, sample: None };
                let epoch = server.epochs[*node];
                let running = server
                    .jobs()
                    .into_iter()
                    .filter(|j| j.node_id.as_deref() == Some(*node) && j.state == JobState::Running);
                let jobs =
                    running.map(|j| JobReport { job_id: j.id, attempt: j.attempt, exit: None }).collect();
                let hb =
                    Heartbeat { node_id: (*node).into(), epoch, gpus: vec![report], jobs, logs: Vec::new() };
                server.store.heartbeat(&hb, at).expect("heartbeat");
                sim.set_health(&format!("{node}-{gpu}"), health);
            }
        }
    }
    passes
}

#[test]
fn one_event_log_gives_the_same_decisions_in_the_server_and_in_the_simulator() {
    use Step::*;
    let elastic = GpuRange { min: 1, max: Some(4) };
    let log = [
        Node("n0", 4),
        Team("a", 2),
        Team("b", 2),
        // Team b's elastic job takes the idle cluster.
        Submit { team: "b", gpus: elastic, priority: 0, replicas: 1, after: None },
        Pass,
        StartAll,
        // Team a returns for its guarantee: the borrower shrinks at once.
        rigid("a", 2, 0),
        Pass,
        StopAll,
        Pass,
        StartAll,
        // Within team b, priority preempts.
        rigid("b", 2, 10),
        Pass,
        StopAll,
        Pass,
        StartAll,
        // A node joins with a faulty GPU; a gang lands on the healthy ones.
        Node("n1", 4),
        Health("n1", 3, false),
        Step::Submit {
            team: "a",
            gpus: GpuRange { min: 1, max: None },
            priority: 0,
            replicas: 2,
            after: None,
        },
        Pass,
        StartAll,
        // A dependency on a job that fails can never be met.
        Step::Submit {
            team: "a",
            gpus: GpuRange { min: 1, max: None },
            priority: 0,
            replicas: 1,
            after: Some(1),
        },
        Pass,
        End(1, 1),
        Pass,
        End(3, 0),
        End(2, 0),
        Health("n1", 3, true),
        Pass,
        StartAll,
        Pass,
    ];
    let passes = replay(&log);
    for (i, p) in passes.iter().enumerate() {
        let short: Vec<String> = p
            .iter()
            .map(|d| match d {
                Decision::Place(p) => {
                    format!("place {} {:?}", p.job_id, p.grants.iter().map(|g| &g.uuid).collect::<Vec<_>>())
                }
                Decision::PlaceGang(g) => format!("gang {}", g.gang_id),
                Decision::Borrow(p) => format!("borrow {}", p.job_id),
                Decision::Preempt(p) => format!("preempt {} by {:?}", p.job_id, p.by),
                Decision::Resize(r) => format!("resize {} {}->{}", r.job_id, r.from, r.to),
                Decision::FailDependency { job, .. } => format!("fail {job}"),
                Decision::Wait { job, reason } => format!("wait {job}: {reason}"),
                Decision::Stage(st) => format!("stage {} on {}", st.job_id, st.node_id),
            })
            .collect();
        eprintln!("pass {i}: {short:?}");
    }
    let all: Vec<&Decision> = passes.iter().flatten().collect();
    let has = |f: fn(&Decision) -> bool| all.iter().any(|d| f(d));
    assert!(has(|d| matches!(d, Decision::Resize(r) if r.to < r.from)), "a shrink: {all:#?}");
    assert!(has(|d| matches!(d, Decision::Preempt(_))), "a preemption: {all:#?}");
    assert!(has(|d| matches!(d, Decision::PlaceGang(_))), "a gang: {all:#?}");
    assert!(has(|d| matches!(d, Decision::FailDependency { .. })), "a failed dependency: {all:#?}");
    assert!(has(|d| matches!(d, Decision::Wait { .. })), "a waiting job: {all:#?}");
}

/// The server's side of a recording of `gantry sim jobs`' `gantry` policy: every event applied
/// through the store as its agents and the scheduler's loop would, every pass required to
/// decide what the simulator's pass decided.
fn replay_recording(log: &[gantry_sim::replay::Event], weights: &gantry_core::queue::QueueWeights) -> usize {
    use gantry_sim::replay::Event;
    let mut server = Server::new();
    server.memory = Memory::with_weights(weights.clone());
    let mut passes = 0;
    for event in log {
        match event {
            Event::Node(node, gpus) => {
                let request = RegisterRequest {
                    node_id: node.id.clone(),
                    hostname: node.hostname.clone(),
                    advertise_addr: None,
                    network: Default::default(),
                    job_defaults: None,
                    labels: Default::default(),
                    cpu_milli: node.cpu_milli,
                    memory_mib: node.memory_mib,
                    gpus: gpus.iter().map(|g| g.info.clone()).collect(),
                    attempts: Vec::new(),
                };
                let epoch =
                    server.store.register_node(&NodeRegistration { request, at: 0 }).expect("register");
                assert_eq!(epoch, node.epoch, "the simulator's node epoch");
                server.epochs.insert(node.id.clone(), epoch);
            }
            Event::Team(team) => server.store.set_team(team).expect("team"),
            Event::Submit(job) if job.gang.as_ref().is_some_and(|g| g.is_worker()) => {
                let stored =
                    server.jobs().into_iter().find(|j| j.id == job.id).expect("the store made the worker");
                assert_eq!(
                    stored.gang.as_ref().map(|g| (g.id, g.rank)),
                    job.gang.as_ref().map(|g| (g.id, g.rank))
                );
            }
            Event::Submit(job) => {
                let spec = SubmitRequest {
                    command: vec!["true".into()],
                    gpus: job.request.gpu_range(),
                    priority: job.priority,
                    replicas: Some(job.gang.as_ref().map_or(1, |g| g.replicas)),
                    max_retries: Some(0),
                    ..SubmitRequest::default()
                };
                let new = NewJob {
                    spec,
                    team: job.team.clone(),
                    name: job.name.clone(),
                    submitted_at: job.submitted_at,
                    user: None,
                    service: None,
                    pending_limit: None,
                    pending_bytes_limit: None,
                };
                let (id, _) = server.store.submit(&new).expect("submit");
                assert_eq!(id, job.id, "the simulator numbers jobs as the store does");
            }
            Event::Checkpointing(jobs) => server.checkpointing.clone_from(jobs),
            Event::Pass { at, resize_gap_ms, decided } => {
                let ours = server.pass_with(*at, *resize_gap_ms);
                assert_eq!(&ours, decided, "pass {passes} at {at}");
                passes += 1;
            }
            Event::StartAll(at) => {
                for job in server.jobs().iter().filter(|j| j.state == JobState::Scheduled) {
                    server.report(job, None, *at);
                }
            }
            Event::StopAll => {
                let exit = JobExit { exit_code: Some(143), reason: None, timed_out: false };
                for job in server.jobs().iter().filter(|j| j.state.is_active() && j.stop.is_some()) {
                    server.report(job, Some(exit.clone()), 0);
                }
            }
            Event::End(id, _) => {
                let exit = JobExit { exit_code: Some(0), reason: None, timed_out: false };
                let own =
                    |j: &Job| j.id == *id || j.gang.as_ref().is_some_and(|g| g.id == *id && g.is_worker());
                for job in
                    server.jobs().iter().filter(|j| own(j) && j.node_id.is_some() && j.state.is_active())
                {
                    server.report(job, Some(exit.clone()), 0);
                }
            }
        }
    }
    passes
}

/// Runs the first `n` jobs of Pollux's workload-1 (load 0.5, the repository's copy) on 4 × 4
/// T4 under `gantry sim jobs`' `gantry` policy, recording what it gave its virtual cluster.
fn sim_jobs_recording(n: usize, elastic: bool) -> Vec<gantry_sim::replay::Event> {
    use gantry_sim::jobs::{self, ClusterShape, GantryPolicy, SimConfig};
    let traces = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/traces");
    let shape = ClusterShape::parse("4x4xT4").expect("cluster");
    let mut w = jobs::read_workloads(&traces.join("pollux-workloads/workloads-0.5/workload-1.csv"))
        .expect("workload");
    w[0].jobs.truncate(n);
    let profiles = jobs::load_profiles(&traces.join("job-profiles"), &shape, &w).expect("profiles");
    let weights = gantry_core::queue::QueueWeights::default();
    let mut policy =
        if elastic { GantryPolicy::elastic(weights) } else { GantryPolicy::new(weights) }.recording();
    let config = SimConfig { elastic, ..SimConfig::default() };
    jobs::simulate(&w[0].jobs, &profiles, &shape, &mut policy, config).expect("run");
    policy.log().to_vec()
}

#[test]
fn a_sim_jobs_run_gets_from_its_pass_exactly_what_the_server_decides_rigid_and_elastic() {
    let weights = gantry_core::queue::QueueWeights::default();
    for elastic in [false, true] {
        let log = sim_jobs_recording(14, elastic);
        let decided = || {
            log.iter().flat_map(|e| match e {
                gantry_sim::replay::Event::Pass { decided, .. } => decided.as_slice(),
                _ => &[],
            })
        };
        // The run must exercise the rules that differ between engines if anything does.
        if elastic {
            assert!(decided().any(|d| matches!(d, Decision::Resize(r) if r.to < r.from)), "a shrink");
            assert!(decided().any(|d| matches!(d, Decision::Resize(r) if r.to > r.from)), "a growth");
        } else {
            assert!(decided().any(|d| matches!(d, Decision::PlaceGang(_))), "a gang");
            assert!(decided().any(|d| matches!(d, Decision::Preempt(_))), "a preemption");
        }
        let passes = replay_recording(&log, &weights);
        assert!(passes > 20, "{passes} passes");
    }
}
