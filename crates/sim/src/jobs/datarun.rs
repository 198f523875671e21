//! The `gantry` policy's datasets during a run (see [`super::data`]): inputs declared on the
//! jobs, `Stage` decisions carried out as copies into the nodes' virtual caches that take
//! `bytes / bandwidth`, the caches told to the core in the locality mode, and the figures.

use std::collections::{HashMap, HashSet};

use gantry_api::inputs::Input;
use gantry_api::model::JobId;
use gantry_core::sched::{Decision, Locality, Staging};

use super::data::{Caches, DataMode, DataSetup, DataStats, Dataset};
use super::engine::JobView;
use crate::replay::VirtualCluster;

/// A copy a `Stage` decision started.
#[derive(Debug, Clone)]
struct Copying {
    node: usize,
    ready_s: u64,
    /// The job it is for (a plain job, or the gang its worker belongs to).
    owner: JobId,
}

/// One run's datasets.
#[derive(Debug)]
pub(super) struct DataRun {
    setup: DataSetup,
    mode: DataMode,
    tick_s: u64,
    caches: Caches,
    /// Workload index → (team, dataset).
    jobs: HashMap<usize, (String, Option<Dataset>)>,
    /// Job id (a gang's workers too) → workload index.
    index: HashMap<JobId, usize>,
    /// A gang's worker → the gang.
    gang_of: HashMap<JobId, JobId>,
    /// By the staging's job id (a gang's staging is named by one of its workers).
    copying: HashMap<JobId, Copying>,
    /// Jobs (plain jobs and gangs) the queue started this round: placed, or waiting for a copy.
    started: HashSet<JobId>,
    /// A staging finished within the round: the server would run a pass when it is reported.
    wake: bool,
    pub(super) stats: DataStats,
}

impl DataRun {
    pub(super) fn new(setup: DataSetup, mode: DataMode, tick_s: u64) -> Self {
        Self {
            setup,
            mode,
            tick_s,
            caches: Caches::default(),
            jobs: HashMap::new(),
            index: HashMap::new(),
            gang_of: HashMap::new(),
            copying: HashMap::new(),
            started: HashSet::new(),
            wake: false,
            stats: DataStats::default(),
        }
    }

    /// A job arrives as `id`: its inputs for the core (none when it copies as it starts).
    pub(super) fn submitted(&mut self, view: &JobView<'_>, id: JobId) -> Vec<Input> {
        let dataset = self.setup.datasets.get(&view.row.app).cloned();
        let inputs = match (&dataset, self.mode) {
            (Some(d), DataMode::Stage | DataMode::Locality) => vec![Input::new("data", &d.url)],
            _ => Vec::new(),
        };
        self.jobs.insert(view.id, (super::gantry::team_name(view.team), dataset));
        self.index.insert(id, view.id);
        inputs
    }

    /// Worker `worker` of the gang `gang` (submitted before): its stagings copy the gang's
    /// dataset.
    pub(super) fn worker(&mut self, worker: JobId, gang: JobId) {
        if let Some(&k) = self.index.get(&gang) {
            self.index.insert(worker, k);
            self.gang_of.insert(worker, gang);
        }
    }

    fn owner(&self, id: JobId) -> JobId {
        self.gang_of.get(&id).copied().unwrap_or(id)
    }

    /// A new round at `now`: copies that finish within it are done (the agent reports them
    /// as they end and the server runs a pass; the job then starts when its copy ends, see
    /// [`DataRun::copy_on_start`]) and cached; the core is told what the caches hold (locality
    /// mode).
    pub(super) fn round(&mut self, now: u64, cluster: &mut VirtualCluster, nodes: usize) {
        if self.caches.nodes() == 0 {
            self.caches = Caches::new(nodes, self.setup.cache_bytes);
        }
        let mut done: Vec<(JobId, usize)> = self
            .copying
            .iter()
            .filter(|(_, c)| c.ready_s < now + self.tick_s)
            .map(|(id, c)| (*id, c.node))
            .collect();
        done.sort_unstable();
        for (id, node) in done {
            self.finish(id, node, now, cluster);
        }
        if self.mode == DataMode::Locality {
            let cached = self.caches.listing();
            cluster.set_locality(Locality {
                cached,
                bandwidth_bps: self.setup.bandwidth_bps,
                ..Locality::default()
            });
        }
    }

    /// The copy for `id` on `node` is done as of this round: cached, and the core told.
    fn finish(&mut self, id: JobId, node: usize, now: u64, cluster: &mut VirtualCluster) {
        if let Some((team, Some(d))) = self.index.get(&id).and_then(|k| self.jobs.get(k)) {
            self.caches.insert(node, team, &d.url, d.bytes, now);
        }
        cluster.set_staging(id, Staging { node: format!("node-{node}"), done: true, reason: String::new() });
    }

    /// Whether a staging finished within the round since the last call: the server would run
    /// another pass at once (its agent reports the staging done).
    pub(super) fn take_wake(&mut self) -> bool {
        std::mem::take(&mut self.wake)
    }

    /// A pass's decisions: stagings start copies (or hit a cache); who the queue started is
    /// noted for [`DataRun::end_round`].
    pub(super) fn decided(
        &mut self,
        decided: &[Decision],
        at_ms: i64,
        cluster: &mut VirtualCluster,
        nodes: &HashMap<String, usize>,
    ) {
        let now = (at_ms / 1000).max(0) as u64;
        for d in decided {
            match d {
                Decision::Stage(st) => {
                    let Some(&node) = nodes.get(&st.node_id) else { continue };
                    let Some((team, Some(data))) = self.index.get(&st.job_id).and_then(|k| self.jobs.get(k))
                    else {
                        continue;
                    };
                    let owner = self.owner(st.job_id);
                    self.stats.stagings += 1;
                    if self.caches.hit(node, team, &data.url, now) {
                        // The virtual cluster took it as done at once; the agent reports it so.
                        self.stats.hits += 1;
                        self.copying.remove(&st.job_id);
                        self.wake = true;
                        continue;
                    }
                    let copy_s = self.setup.copy_s(data.bytes);
                    let ready_s = now + copy_s.ceil() as u64;
                    let reason = format!("staging {} on {}", data.url, st.node_id);
                    self.copying.insert(st.job_id, Copying { node, ready_s, owner });
                    self.stats.stage_in_s += copy_s;
                    if !st.ahead {
                        self.started.insert(owner);
                    }
                    if ready_s < now + self.tick_s {
                        // Done within the round: reported, and the server passes again.
                        self.finish(st.job_id, node, now, cluster);
                        self.wake = true;
                    } else {
                        cluster.set_staging(
                            st.job_id,
                            Staging { node: st.node_id.clone(), done: false, reason },
                        );
                    }
                }
                // A job the queue started that waits for its copy (its reason is the staging's;
                // one the queue keeps waiting says `waiting …`).
                Decision::Wait { job, reason } if reason.starts_with("staging ") => {
                    self.started.insert(*job);
                }
                Decision::Place(p) => {
                    self.started.insert(self.owner(p.job_id));
                }
                Decision::PlaceGang(g) => {
                    self.started.insert(g.gang_id);
                }
                _ => {}
            }
        }
    }

    /// The round at `now` is over: what is left of each copy for a job the queue started
    /// this round, up to the round's length, is exposed (the job waited for it); the rest of
    /// the copying ran while the queue kept its job waiting anyway, hidden. Copies done within
    /// the round are forgotten.
    pub(super) fn end_round(&mut self, now: u64) {
        let tick = self.tick_s;
        for c in self.copying.values().filter(|c| c.ready_s > now && self.started.contains(&c.owner)) {
            self.stats.exposed_s += (c.ready_s - now).min(tick) as f64;
        }
        self.copying.retain(|_, c| c.ready_s >= now + tick);
        self.started.clear();
    }

    /// Seconds `job` waits for its dataset as it starts on the GPUs of `alloc`: in the copy
    /// mode it copies at every start, GPUs held; in the staging modes it waits for what is left
    /// of a staging that ends within the round (the server would start it then; the simulator
    /// starts jobs only at rounds, so it starts now and makes no progress until then, which is
    /// not counted as GPUs held for a copy), and a gang's worker placed on a node that lacks the
    /// dataset copies it with its GPUs held.
    pub(super) fn copy_on_start(&mut self, now: u64, job: usize, alloc: &[usize]) -> u64 {
        let Some((team, Some(data))) = self.jobs.get(&job) else { return 0 };
        let copy_s = self.setup.copy_s(data.bytes);
        let (team, url, bytes) = (team.clone(), data.url.clone(), data.bytes);
        let missing = match self.mode {
            DataMode::Copy => true,
            DataMode::Stage | DataMode::Locality => {
                let mut nodes = alloc.to_vec();
                nodes.dedup();
                let mut missing = false;
                for &node in &nodes {
                    if !self.caches.hit(node, &team, &url, now) {
                        missing = true;
                        self.caches.insert(node, &team, &url, bytes, now);
                    }
                }
                let left = self
                    .copying
                    .values()
                    .filter(|c| c.ready_s > now && nodes.contains(&c.node))
                    .filter(|c| self.index.get(&c.owner) == Some(&job))
                    .map(|c| c.ready_s - now)
                    .max()
                    .unwrap_or(0);
                if !missing {
                    return left;
                }
                missing
            }
        };
        if !missing {
            return 0;
        }
        self.stats.copy_idle_gpu_s += copy_s * alloc.len() as f64;
        self.stats.stage_in_s += copy_s;
        self.stats.exposed_s += copy_s;
        copy_s.ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use gantry_core::sched::{GangPlace, Place, Stage};

    use super::*;
    use crate::jobs::workload::JobRow;

    const TICK: u64 = 60;

    /// Datasets `big` (30 GB: 300 s at 100 MB/s) and `small` (0.2 GB: 2 s).
    fn run() -> DataRun {
        let d = |url: &str, bytes: u64| Dataset { url: url.into(), bytes };
        let datasets = HashMap::from([
            ("big".to_owned(), d("s3://d/big", 30_000_000_000)),
            ("small".to_owned(), d("s3://d/small", 200_000_000)),
        ]);
        let setup = DataSetup { datasets, bandwidth_bps: 100_000_000, cache_bytes: 1_000_000_000_000 };
        DataRun::new(setup, DataMode::Stage, TICK)
    }

    fn submit(r: &mut DataRun, k: usize, app: &str, id: JobId) {
        let row = JobRow {
            name: format!("j{k}"),
            submit: 0.0,
            app: app.into(),
            replicas: 1,
            batch: 1,
            team: None,
            priority: 0,
        };
        let view = JobView {
            id: k,
            row: &row,
            team: 0,
            min_gpus: 1,
            max_gpus: 1,
            alloc: &[],
            attained_gpu_s: 0.0,
            oracle_remaining_s: 0.0,
            speedup: &[],
            first_start: None,
            last_change: None,
        };
        assert_eq!(r.submitted(&view, id).len(), 1);
    }

    fn stage(job_id: JobId, node: usize, ahead: bool) -> Decision {
        Decision::Stage(Stage { job_id, node_id: format!("node-{node}"), at: 0, ahead })
    }

    fn wait(job: JobId, reason: &str) -> Decision {
        Decision::Wait { job, reason: reason.into() }
    }

    /// One round at `now`: its copies that end, the decisions, its end.
    fn round(r: &mut DataRun, c: &mut VirtualCluster, now: u64, decided: &[Decision]) {
        let nodes: HashMap<String, usize> = (0..4).map(|i| (format!("node-{i}"), i)).collect();
        r.round(now, c, 4);
        r.decided(decided, now as i64 * 1000, c, &nodes);
        r.end_round(now);
    }

    #[test]
    fn only_the_copying_a_started_job_waits_for_is_exposed() {
        // Job 1 (plain) is staged ahead while the queue keeps it waiting; the queue starts it
        // at 240 s, 60 s before its 300 s copy ends: 60 s exposed, 240 s hidden. Gang 10
        // (workers 11 and 12) is started by the queue at once and waits for both of its
        // copies, 300 s each: all 600 s exposed. Hidden: 240 of 900 s.
        let (mut r, mut c) = (run(), VirtualCluster::default());
        submit(&mut r, 0, "big", 1);
        submit(&mut r, 1, "big", 10);
        r.worker(11, 10);
        r.worker(12, 10);
        let queued = "waiting: jobs ahead in the queue hold the room (reservation)";
        let staging = "staging its inputs on node-1, node-2";
        round(
            &mut r,
            &mut c,
            0,
            &[
                stage(1, 0, true),
                wait(1, queued),
                stage(11, 1, false),
                stage(12, 2, false),
                wait(10, staging),
            ],
        );
        for now in [60, 120, 180] {
            round(&mut r, &mut c, now, &[wait(1, queued), wait(10, staging)]);
        }
        round(&mut r, &mut c, 240, &[wait(1, "staging s3://d/big on node-0"), wait(10, staging)]);
        assert!(!c.snapshot().staging[&1].done, "not done before 300 s");
        round(&mut r, &mut c, 300, &[]);
        assert!(c.snapshot().staging[&1].done && c.snapshot().staging[&12].done);
        assert_eq!(r.stats.stagings, 3);
        assert_eq!(r.stats.stage_in_s, 900.0);
        assert_eq!(r.stats.exposed_s, 660.0, "{:?}", r.stats);
        assert!((r.stats.hidden_share() - 240.0 / 900.0).abs() < 1e-9);
    }

    #[test]
    fn a_copy_that_ends_within_the_round_is_done_for_its_next_pass_and_delays_the_start_by_what_is_left() {
        let (mut r, mut c) = (run(), VirtualCluster::default());
        submit(&mut r, 0, "small", 1);
        let nodes: HashMap<String, usize> = (0..4).map(|i| (format!("node-{i}"), i)).collect();
        r.round(0, &mut c, 4);
        r.decided(&[stage(1, 3, false), wait(1, "staging its inputs on node-3")], 0, &mut c, &nodes);
        assert!(c.snapshot().staging[&1].done, "reported done within the round");
        assert!(r.take_wake(), "the server passes again");
        assert!(!r.take_wake());
        // The next pass places it on node-3: it starts when its copy ends, 2 s in.
        let place = Place { job_id: 1, node_id: "node-3".into(), epoch: 1, grants: Vec::new(), at: 0 };
        r.decided(&[Decision::Place(place)], 0, &mut c, &nodes);
        assert_eq!(r.copy_on_start(0, 0, &[3]), 2);
        r.end_round(0);
        assert_eq!((r.stats.stage_in_s, r.stats.exposed_s, r.stats.copy_idle_gpu_s), (2.0, 2.0, 0.0));
        // A cache hit at the next start: nothing to wait for.
        assert_eq!(r.copy_on_start(60, 0, &[3]), 0);
        let gang = GangPlace { gang_id: 1, workers: Vec::new(), at: 0 };
        round(&mut r, &mut c, 60, &[stage(1, 3, false), Decision::PlaceGang(gang)]);
        assert_eq!((r.stats.stagings, r.stats.hits), (2, 1));
        assert_eq!(r.stats.exposed_s, 2.0);
    }
}
