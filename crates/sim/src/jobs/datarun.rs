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
    /// The staging's reason: the core repeats it for a started job that waits for this copy.
    reason: String,
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
    /// Job id → workload index.
    index: HashMap<JobId, usize>,
    copying: HashMap<JobId, Copying>,
    /// Jobs whose exposed copy time this round has been counted.
    counted: HashSet<JobId>,
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
            copying: HashMap::new(),
            counted: HashSet::new(),
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

    /// A new round at `now`: copies that finished are done and cached; the core is told what
    /// the caches hold (locality mode).
    pub(super) fn round(&mut self, now: u64, cluster: &mut VirtualCluster, nodes: usize) {
        if self.caches.nodes() == 0 {
            self.caches = Caches::new(nodes, self.setup.cache_bytes);
        }
        self.counted.clear();
        let done: Vec<JobId> =
            self.copying.iter().filter(|(_, c)| c.ready_s <= now).map(|(id, _)| *id).collect();
        for id in done {
            let Some(c) = self.copying.remove(&id) else { continue };
            if let Some((team, Some(d))) = self.index.get(&id).and_then(|k| self.jobs.get(k)) {
                self.caches.insert(c.node, team, &d.url, d.bytes, now);
            }
            let staging = Staging { node: format!("node-{}", c.node), done: true, reason: String::new() };
            cluster.set_staging(id, staging);
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

    /// A pass's decisions: stagings start copies (or hit a cache); a started job waiting for
    /// its copy counts as exposed.
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
                    self.stats.stagings += 1;
                    if self.caches.hit(node, team, &data.url, now) {
                        // The virtual cluster took it as done at once.
                        self.stats.hits += 1;
                        self.copying.remove(&st.job_id);
                        continue;
                    }
                    let copy_s = self.setup.copy_s(data.bytes);
                    let ready_s = now + copy_s.ceil() as u64;
                    let reason = format!("staging {} on {}", data.url, st.node_id);
                    let staging = Staging { node: st.node_id.clone(), done: false, reason: reason.clone() };
                    cluster.set_staging(st.job_id, staging);
                    self.copying.insert(st.job_id, Copying { node, ready_s, reason });
                    self.stats.stage_in_s += copy_s;
                    if !st.ahead && self.counted.insert(st.job_id) {
                        self.stats.exposed_s += copy_s.min(self.tick_s as f64);
                    }
                }
                Decision::Wait { job, reason } => {
                    let Some(c) = self.copying.get(job).filter(|c| c.reason == *reason) else { continue };
                    if self.counted.insert(*job) {
                        self.stats.exposed_s += (c.ready_s.saturating_sub(now)).min(self.tick_s) as f64;
                    }
                }
                _ => {}
            }
        }
    }

    /// Seconds `job` copies with the GPUs of `alloc` held as it starts there: every start in
    /// the copy mode; in the staging modes, a gang's workers copy what their nodes lack.
    pub(super) fn copy_on_start(&mut self, now: u64, job: usize, alloc: &[usize]) -> u64 {
        let Some((team, Some(data))) = self.jobs.get(&job) else { return 0 };
        let copy_s = self.setup.copy_s(data.bytes);
        let missing = match self.mode {
            DataMode::Copy => true,
            DataMode::Stage | DataMode::Locality => {
                let mut nodes = alloc.to_vec();
                nodes.dedup();
                let mut missing = false;
                for node in nodes {
                    if !self.caches.hit(node, team, &data.url, now) {
                        missing = true;
                        self.caches.insert(node, team, &data.url, data.bytes, now);
                    }
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
