//! The agent's jobs: start what the server lists, stop what it does not, report how each ended.
//! Stopping reaches the whole attempt: every process in its cgroup, or without cgroups its
//! process group. An attempt is started by [`super::attempt`] and supervised by its shim, so it
//! outlives the agent: a restarted agent takes up what its records say ([`Jobs::recover`]).
//! A job with an uploaded working directory is fetched first ([`super::upload`], in a task of
//! its own, so heartbeats go on meanwhile); it starts when [`Jobs::fetched`] hears the fetch
//! ended, and a stop before then ends it without a start.

use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_api::model::{JobExit, JobId, JobReport};
use gantry_api::types::Assignment;
use gantry_gpu::{MIB, ProcessUsage};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::attempt::{self, Context, Ended};
use super::cgroup::Cgroup;
use super::gpus::Gpus;
use super::process;
use super::record::{self, Found, Record};

/// How long shutting down waits for ended attempts to be cleaned up (cgroups, directories).
const CLEAN_UP: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Local {
    attempt: u32,
    pgid: Option<u32>,
    cgroup: Option<Arc<Cgroup>>,
    grant_mib: u64,
    memory_mib: u64,
    sim_pids: Vec<u32>,
    stopping_since: Option<Instant>,
    stop_reason: Option<String>,
    exit: Option<JobExit>,
    /// When the time limit runs out, with the limit in seconds.
    deadline: Option<(Instant, u64)>,
    /// Stopped because the time limit ran out.
    timed_out: bool,
    /// Its upload is being fetched: the assignment to start once it is, and the fetch's task.
    fetching: Option<(Box<Assignment>, tokio::task::AbortHandle)>,
    /// Its output directories, uploaded once it has ended ([`super::outputs`]).
    outputs: Option<super::outputs::Dirs>,
}

/// A fetch of an attempt's upload ended: its staging directory, or why it failed.
#[derive(Debug)]
pub struct Fetched {
    /// The job.
    pub job_id: JobId,
    /// The attempt.
    pub attempt: u32,
    /// The staging directory of its upload, complete (none: it has no upload), and the
    /// variables naming its staged inputs; or the error.
    pub result: Result<Prepared, String>,
}

/// What [`prepare`] made ready.
#[derive(Debug, Default)]
pub struct Prepared {
    /// The upload's staging directory (none: no upload).
    pub staging: Option<std::path::PathBuf>,
    /// The variables naming the staged inputs.
    pub inputs: Vec<(String, String)>,
    /// The job's image, pulled.
    pub image: Option<gantry_image::store::Image>,
}

/// A running attempt as the input meter reads it: job, attempt, cgroup, simulated pids.
pub type Running = (JobId, u32, Option<Arc<Cgroup>>, Vec<u32>);

/// The jobs of this node.
#[derive(Debug)]
pub struct Jobs {
    local: HashMap<JobId, Local>,
    done: HashSet<(JobId, u32)>,
    exits: mpsc::UnboundedSender<Ended>,
    ctx: Context,
    grace: Duration,
    /// One task per started attempt, until it has reported its end.
    tasks: JoinSet<()>,
    /// Where fetched uploads are announced.
    fetched: mpsc::UnboundedSender<Fetched>,
    /// The connection uploads are fetched over (set once the agent has its credential).
    client: Option<super::client::Client>,
    /// Declared inputs' staging and the node's cache (set with the client).
    stager: Option<std::sync::Arc<super::stage::Stager>>,
    /// Where ended attempts' output uploads are reported (set with the client).
    reporter: Option<Arc<super::outputs::Reporter>>,
}

impl Jobs {
    /// An empty table; ended attempts are announced on `exits`, fetched uploads on `fetched`.
    pub fn new(
        exits: mpsc::UnboundedSender<Ended>,
        fetched: mpsc::UnboundedSender<Fetched>,
        ctx: Context,
        grace: Duration,
    ) -> Self {
        Self {
            local: HashMap::new(),
            done: HashSet::new(),
            exits,
            ctx,
            grace,
            tasks: JoinSet::new(),
            fetched,
            client: None,
            stager: None,
            reporter: None,
        }
    }

    /// Where declared inputs are staged and found.
    pub fn set_stager(&mut self, stager: std::sync::Arc<super::stage::Stager>) {
        self.stager = Some(stager);
    }

    /// Where ended attempts' output uploads are reported.
    pub fn set_reporter(&mut self, reporter: Arc<super::outputs::Reporter>) {
        self.reporter = Some(reporter);
    }

    /// The connection to fetch uploads over.
    pub fn set_client(&mut self, client: super::client::Client) {
        self.client = Some(client);
    }

    /// Every attempt on this node: (job, attempt, ended).
    pub fn attempts(&self) -> Vec<(JobId, u32, bool)> {
        let mut out: Vec<_> = self.local.iter().map(|(id, l)| (*id, l.attempt, l.exit.is_some())).collect();
        out.sort_unstable();
        out
    }

    /// Attempts that run now: (job, attempt, cgroup, simulated pids), for the input meter.
    pub fn running(&self) -> Vec<Running> {
        let running = self.local.iter().filter(|(_, l)| l.exit.is_none() && l.pgid.is_some());
        running.map(|(id, l)| (*id, l.attempt, l.cgroup.clone(), l.sim_pids.clone())).collect()
    }

    /// What to tell the server; the ends of jobs in `hold` are not told yet (their output is
    /// still being shipped).
    pub fn reports(&self, hold: &dyn Fn(JobId) -> bool) -> Vec<JobReport> {
        let mut out: Vec<JobReport> = self
            .local
            .iter()
            .map(|(id, l)| {
                let exit = if hold(*id) { None } else { l.exit.clone() };
                JobReport { job_id: *id, attempt: l.attempt, exit }
            })
            .collect();
        out.sort_by_key(|r| r.job_id);
        out
    }

    /// The server has recorded these reports: ended jobs can be forgotten.
    pub fn acknowledged(&mut self, sent: &[JobReport]) {
        for r in sent.iter().filter(|r| r.exit.is_some()) {
            if self.local.get(&r.job_id).is_some_and(|l| l.attempt == r.attempt && l.exit.is_some()) {
                self.local.remove(&r.job_id);
                self.done.insert((r.job_id, r.attempt));
                record::forget(&self.ctx.state, r.job_id, r.attempt);
            }
        }
    }

    /// Brings the node in line with the server's list.
    pub fn reconcile(&mut self, wanted: Vec<Assignment>, gpus: &Gpus) {
        let wanted_ids: HashMap<JobId, u32> = wanted.iter().map(|a| (a.job_id, a.attempt)).collect();
        let unwanted: Vec<JobId> = self
            .local
            .iter()
            .filter(|(id, l)| l.exit.is_none() && wanted_ids.get(id) != Some(&l.attempt))
            .map(|(id, _)| *id)
            .collect();
        for id in unwanted {
            self.stop(id, None);
        }
        // An attempt the server no longer lists will never be listed again.
        self.done.retain(|(id, attempt)| wanted_ids.get(id) == Some(attempt));
        for a in wanted {
            if let Some(l) = self.local.get_mut(&a.job_id) {
                if l.attempt == a.attempt
                    && !a.outputs.is_empty()
                    && l.outputs.is_none()
                    && l.exit.is_none()
                    && l.fetching.is_none()
                {
                    // An attempt adopted after a restart: its output directories are there still.
                    let root = self.ctx.sandbox.output_root(a.job_id, a.attempt);
                    let uid = self.ctx.sandbox.user_for(&a.team).map(|(u, _)| u.uid);
                    l.outputs = uid.ok().and_then(|uid| super::outputs::existing(&root, &a.outputs, uid));
                }
                continue;
            }
            if self.done.contains(&(a.job_id, a.attempt)) {
                continue;
            }
            self.start(a, gpus);
        }
    }

    /// Takes up the attempts a previous run of the agent left ([`record::recover`]): running ones
    /// are adopted, ended ones are reported with how they ended, and dead ones are cleaned up
    /// and left out (the server requeues them). Returns the `<job>-<attempt>` names of the
    /// adopted attempts, whose cgroups and work directories must be kept. Blocks briefly.
    pub fn recover(&mut self, found: Vec<Found>, gpus: &Gpus) -> HashSet<String> {
        let mut keep = HashSet::new();
        for f in found {
            match f {
                Found::Running(r) => {
                    tracing::info!(job = r.job_id, attempt = r.attempt, pid = r.pid, "adopted a running job");
                    keep.insert(format!("{}-{}", r.job_id, r.attempt));
                    attempt::adopt(&r, &self.ctx, &self.exits, &mut self.tasks);
                    let local = self.adopted(&r, gpus);
                    self.local.insert(r.job_id, local);
                }
                Found::Ended(r, exit) => {
                    tracing::info!(
                        job = r.job_id,
                        attempt = r.attempt,
                        "a job ended while the agent was away"
                    );
                    let mut local = self.adopted(&r, gpus);
                    local.stop_reason = None;
                    self.local.insert(r.job_id, local);
                    let status = Ok(super::shim::status(&exit));
                    let ended =
                        Ended { job_id: r.job_id, attempt: r.attempt, status, oom_killed: exit.oom_killed };
                    self.exited(ended, gpus);
                }
                Found::Dead(r) => {
                    tracing::warn!(
                        job = r.job_id,
                        attempt = r.attempt,
                        "a job died while the agent was away"
                    );
                    attempt::end_orphaned(&r);
                    super::sandbox::remove_dir(&self.ctx.sandbox.workdir(r.job_id, r.attempt));
                    super::sandbox::remove_dir(&self.ctx.sandbox.output_root(r.job_id, r.attempt));
                    record::forget(&self.ctx.state, r.job_id, r.attempt);
                }
            }
        }
        keep
    }

    fn adopted(&self, r: &Record, gpus: &Gpus) -> Local {
        let memory = if r.grant_mib > 0 { r.grant_mib } else { 4096 };
        let now_ms = unix_ms();
        let deadline = r.deadline.map(|(at, limit)| {
            let left = Duration::from_millis(u64::try_from(at - now_ms).unwrap_or(0));
            (Instant::now() + left, limit)
        });
        Local {
            attempt: r.attempt,
            pgid: Some(r.pid),
            cgroup: r.cgroup.as_ref().map(|c| Arc::new(c.open())),
            grant_mib: r.grant_mib,
            memory_mib: r.memory_mib,
            sim_pids: gpus.load(r.job_id, r.pid, &r.gpu_uuids, memory, &Default::default()),
            stopping_since: None,
            stop_reason: None,
            exit: None,
            deadline,
            timed_out: false,
            fetching: None,
            outputs: None,
        }
    }

    /// Every attempt this node still has (running, or ended and not yet acknowledged), for the
    /// server to keep when the node registers again.
    pub fn claims(&self) -> Vec<(JobId, u32)> {
        let mut out: Vec<_> = self.local.iter().map(|(id, l)| (*id, l.attempt)).collect();
        out.sort_unstable();
        out
    }

    fn start(&mut self, a: Assignment, gpus: &Gpus) {
        let a = self.ctx.sandbox.with_defaults(a);
        let (job_id, attempt) = (a.job_id, a.attempt);
        let mut local = Local {
            attempt,
            pgid: None,
            cgroup: None,
            grant_mib: a.gpu_memory_mib,
            memory_mib: a.memory_mib,
            sim_pids: Vec::new(),
            stopping_since: None,
            stop_reason: None,
            exit: None,
            deadline: a.time_limit_s.map(|s| (Instant::now() + Duration::from_secs(s), s)),
            timed_out: false,
            fetching: None,
            outputs: None,
        };
        if a.upload.is_some() || !a.inputs.is_empty() || a.image.is_some() {
            let (Some(client), Some(stager)) = (self.client.clone(), self.stager.clone()) else {
                local.exit =
                    Some(not_started("no connection to fetch its working directory or inputs over".into()));
                self.local.insert(job_id, local);
                return;
            };
            let staging = self.ctx.sandbox.staging_dir(job_id, attempt);
            let (task_a, fetched, images) = (a.clone(), self.fetched.clone(), self.ctx.images.clone());
            let task = tokio::spawn(async move {
                let result = prepare(&client, &stager, images.as_deref(), &task_a, &staging).await;
                let _ = fetched.send(Fetched { job_id, attempt, result });
            });
            local.fetching = Some((Box::new(a), task.abort_handle()));
            self.local.insert(job_id, local);
            return;
        }
        self.launch(local, &a, Prepared::default(), gpus);
    }

    /// A fetch ended: starts its attempt in the fetched directory, or fails it with the reason.
    /// One for an attempt no longer waiting (stopped meanwhile) only has its directory removed.
    pub fn fetched(&mut self, f: Fetched, gpus: &Gpus) {
        let waiting = self.local.get_mut(&f.job_id).filter(|l| l.attempt == f.attempt);
        let Some((a, _)) = waiting.and_then(|l| l.fetching.take()) else {
            if let Ok(Prepared { staging: Some(staging), .. }) = &f.result {
                super::sandbox::remove_dir(staging);
            }
            self.release_inputs(f.job_id);
            return;
        };
        let Some(local) = self.local.remove(&f.job_id) else { return };
        match f.result {
            Ok(prepared) => self.launch(local, &a, prepared, gpus),
            Err(e) => {
                tracing::warn!(job = f.job_id, error = %e, "the job's working directory or inputs could not be fetched");
                let mut local = local;
                local.exit = Some(not_started(e));
                self.local.insert(f.job_id, local);
            }
        }
    }

    fn release_inputs(&self, id: JobId) {
        if let Some(stager) = &self.stager {
            stager.release(id);
        }
    }

    fn launch(&mut self, mut local: Local, a: &Assignment, prepared: Prepared, gpus: &Gpus) {
        let (job_id, attempt) = (a.job_id, a.attempt);
        let deadline =
            a.time_limit_s.map(|s| (unix_ms() + i64::try_from(s * 1000).unwrap_or(i64::MAX / 2), s));
        let staged = prepared.staging.as_deref();
        let started = attempt::start(
            a,
            &self.ctx,
            deadline,
            (staged, &prepared.inputs, prepared.image.as_ref()),
            &self.exits,
            &mut self.tasks,
        );
        if let (Err(_), Some(staged)) = (&started, staged) {
            super::sandbox::remove_dir(staged);
        }
        match started {
            Ok(started) => {
                local.pgid = Some(started.pid);
                local.cgroup = started.cgroup;
                local.outputs = started.outputs;
                let memory = if a.gpu_memory_mib > 0 { a.gpu_memory_mib } else { 4096 };
                local.sim_pids = gpus.load(job_id, started.pid, &a.gpu_uuids, memory, &a.env);
                tracing::info!(job = job_id, attempt, gpus = ?a.gpu_uuids, "job started");
            }
            Err(e) => {
                tracing::warn!(job = job_id, error = %e, "job could not start");
                local.exit = Some(not_started(e.to_string()));
            }
        }
        self.local.insert(job_id, local);
    }

    /// Asks a job to stop: SIGTERM to all its processes now, SIGKILL after the grace period.
    pub fn stop(&mut self, id: JobId, reason: Option<String>) {
        let Some(l) = self.local.get_mut(&id) else {
            return;
        };
        if l.exit.is_some() || l.stopping_since.is_some() {
            return;
        }
        l.stopping_since = Some(Instant::now());
        l.stop_reason = reason.or(l.stop_reason.take());
        if let Some((_, task)) = l.fetching.take() {
            // Nothing ran: it ends now, and its staging directory goes.
            task.abort();
            super::sandbox::remove_dir(&self.ctx.sandbox.staging_dir(id, l.attempt));
            if let Some(stager) = &self.stager {
                stager.release(id);
            }
            let reason = l.stop_reason.clone().unwrap_or_else(|| "stopped before it started".into());
            l.exit = Some(JobExit { exit_code: None, reason: Some(reason), timed_out: l.timed_out });
            return;
        }
        l.signal(libc::SIGTERM);
    }

    /// SIGKILLs jobs whose grace period ran out (the rest of the attempt is ended once its first
    /// process has gone).
    pub fn enforce_grace(&mut self) {
        for l in self.local.values() {
            if let (Some(since), None) = (l.stopping_since, &l.exit)
                && since.elapsed() >= self.grace
            {
                l.signal(libc::SIGKILL);
            }
        }
    }

    /// Stops jobs whose time limit ran out (SIGTERM now, SIGKILL after the grace period); they
    /// end in state `timeout`.
    pub fn enforce_time_limits(&mut self) {
        let now = Instant::now();
        let expired: Vec<(JobId, u64)> = self
            .local
            .iter()
            .filter(|(_, l)| l.exit.is_none() && l.stopping_since.is_none())
            .filter_map(|(id, l)| l.deadline.filter(|(at, _)| now >= *at).map(|(_, s)| (*id, s)))
            .collect();
        for (id, limit) in expired {
            if let Some(l) = self.local.get_mut(&id) {
                l.timed_out = true;
            }
            self.stop(id, Some(format!("time limit of {limit}s reached")));
        }
    }

    /// Adds to each GPU's sample the utilisation of each job's own processes on it (`jobs`: job
    /// id to percent, the busiest of its processes), attributed as [`Jobs::enforce_grants`]
    /// attributes memory. Only where the backend reads every process's utilisation there: a
    /// GPU running a lent owner and its borrower is told apart by it (`docs/capacity.md`).
    pub fn attribute(&self, reports: &mut [gantry_api::model::GpuReport], processes: &[ProcessUsage]) {
        let mut by_gpu: std::collections::BTreeMap<u32, Vec<&ProcessUsage>> = Default::default();
        for p in processes {
            by_gpu.entry(p.gpu_index).or_default().push(p);
        }
        let members: Vec<(JobId, Vec<u32>, Option<u32>)> = self
            .local
            .iter()
            .filter(|(_, l)| l.exit.is_none())
            .map(|(id, l)| (*id, l.cgroup.as_ref().map(|c| c.pids()).unwrap_or_default(), l.pgid))
            .collect();
        for report in reports.iter_mut() {
            let Some(sample) = report.sample.as_mut().and_then(serde_json::Value::as_object_mut) else {
                continue;
            };
            let index = sample.get("info").and_then(|i| i.get("index")).and_then(serde_json::Value::as_u64);
            let Some(procs) = index.and_then(|i| by_gpu.get(&(i as u32))) else { continue };
            if procs.iter().any(|p| p.util_percent.is_none()) {
                continue;
            }
            let mut own = serde_json::Map::new();
            for (id, pids, pgid) in &members {
                let mine = procs.iter().filter(|p| {
                    p.job_id.as_deref() == Some(&id.to_string())
                        || pids.contains(&p.pid)
                        || (pgid.is_some() && process::pgid_of(p.pid) == *pgid)
                });
                if let Some(busiest) = mine.filter_map(|p| p.util_percent).max() {
                    own.insert(id.to_string(), busiest.into());
                }
            }
            sample.insert("jobs".into(), own.into());
        }
    }

    /// Stops slice jobs whose processes hold more GPU memory than their grant.
    pub fn enforce_grants(&mut self, processes: &[ProcessUsage]) {
        let mut over = Vec::new();
        for (id, l) in &self.local {
            if l.grant_mib == 0 || l.exit.is_some() {
                continue;
            }
            // A process that left the job's process group is still in its cgroup.
            let members = l.cgroup.as_ref().map(|c| c.pids()).unwrap_or_default();
            let used: u64 = processes
                .iter()
                .filter(|p| {
                    p.job_id.as_deref() == Some(&id.to_string())
                        || members.contains(&p.pid)
                        || (l.pgid.is_some() && process::pgid_of(p.pid) == l.pgid)
                })
                .map(|p| p.memory_used_bytes / MIB)
                .sum();
            if used > l.grant_mib {
                over.push((
                    *id,
                    format!("GPU memory grant exceeded: used {used} MiB of {} MiB", l.grant_mib),
                ));
            }
        }
        for (id, reason) in over {
            self.stop(id, Some(reason));
        }
    }

    /// Records an attempt's end.
    pub fn exited(&mut self, ended: Ended, gpus: &Gpus) {
        while self.tasks.try_join_next().is_some() {}
        let Ended { job_id: id, attempt, status, oom_killed } = ended;
        let Some(l) = self.local.get_mut(&id).filter(|l| l.attempt == attempt) else {
            // Forgotten already (the agent was fenced off): nobody will report it.
            record::forget(&self.ctx.state, id, attempt);
            return;
        };
        gpus.unload(&l.sim_pids);
        if let Some(stager) = &self.stager {
            stager.release(id);
        }
        let out_of_memory = oom_killed
            .then(|| format!("out of memory: the job used more than its {} MiB memory limit", l.memory_mib));
        let exit = match status {
            Ok(s) => JobExit {
                exit_code: s.code(),
                reason: l
                    .stop_reason
                    .clone()
                    .or(out_of_memory)
                    .or_else(|| s.signal().map(|sig| format!("killed by signal {sig}"))),
                timed_out: l.timed_out,
            },
            Err(e) => JobExit {
                exit_code: None,
                reason: Some(format!("lost track of the process: {e}")),
                timed_out: false,
            },
        };
        tracing::info!(job = id, attempt, ?exit, "job ended");
        l.exit = Some(exit);
        if let Some(dirs) = l.outputs.take() {
            // In a task of its own: the exit, which releases the GPUs, is reported meanwhile.
            match &self.reporter {
                Some(r) => {
                    tokio::spawn(super::outputs::upload_attempt(Arc::clone(r), id, attempt, dirs));
                }
                None => super::sandbox::remove_dir(&dirs.root),
            }
        }
    }

    /// Kills every process at once (fenced: the server already gave the GPUs away) and forgets all.
    /// Each attempt's task still ends the rest of it and cleans up.
    pub fn kill_all(&mut self, gpus: &Gpus) {
        for (id, l) in self.local.drain() {
            if let Some((_, task)) = &l.fetching {
                task.abort();
            }
            if l.exit.is_none() {
                l.signal(libc::SIGKILL);
            }
            gpus.unload(&l.sim_pids);
            if let Some(dirs) = &l.outputs {
                super::sandbox::remove_dir(&dirs.root);
            }
            record::forget(&self.ctx.state, id, l.attempt);
        }
    }

    /// SIGTERMs everything, waits up to the grace period, then SIGKILLs what is left and waits
    /// for the attempts to be cleaned up.
    pub async fn shutdown(&mut self, exits: &mut mpsc::UnboundedReceiver<Ended>, gpus: &Gpus) {
        let ids: Vec<JobId> = self.local.keys().copied().collect();
        for id in ids {
            self.stop(id, Some("agent shut down".into()));
        }
        let deadline = tokio::time::Instant::now() + self.grace;
        while self.local.values().any(|l| l.exit.is_none() && l.pgid.is_some()) {
            match tokio::time::timeout_at(deadline, exits.recv()).await {
                Ok(Some(exit)) => self.exited(exit, gpus),
                _ => break,
            }
        }
        self.kill_all(gpus);
        let cleaned = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(CLEAN_UP, cleaned).await.is_err() {
            tracing::warn!("some jobs were not cleaned up before the agent stopped");
        }
    }
}

/// How an attempt that never started ends.
/// What a job needs before it starts: its declared inputs in the node's cache, then its
/// uploaded working directory in `staging`.
async fn prepare(
    client: &super::client::Client,
    stager: &super::stage::Stager,
    images: Option<&super::images::Images>,
    a: &Assignment,
    staging: &std::path::Path,
) -> Result<Prepared, String> {
    let (job_id, attempt) = (a.job_id, a.attempt);
    let image = match &a.image {
        None => None,
        Some(wanted) => {
            let images =
                images.ok_or_else(|| format!("node {} cannot run container images", super::hostname()))?;
            let started = std::time::Instant::now();
            let creds = match &wanted.secret {
                None => None,
                Some(_) => {
                    let c = client
                        .registry_credentials(job_id)
                        .await
                        .map_err(|e| format!("fetching its registry credentials: {e}"))?;
                    Some(gantry_image::registry::Credentials { username: c.username, password: c.password })
                }
            };
            let image = images
                .pull(&wanted.reference, wanted.digest.as_deref(), creds.as_ref(), Some(&a.team))
                .await
                .map_err(|e| format!("pulling its image: {e}"))?;
            tracing::info!(job = job_id, attempt, image = %image.reference, secs = started.elapsed().as_secs_f64(), "pulled the job's image");
            if wanted.digest.is_none()
                && let Err(e) = client.report_image(job_id, attempt, image.digest.as_str()).await
            {
                tracing::warn!(job = job_id, error = %e, "could not report the image's digest");
            }
            Some(image)
        }
    };
    let inputs = if a.inputs.is_empty() {
        Vec::new()
    } else {
        stager.inputs_for(a, &Default::default()).await.map_err(|e| format!("staging its inputs: {e}"))?
    };
    if a.upload.is_none() {
        return Ok(Prepared { staging: None, inputs, image });
    }
    match super::upload::fetch(client, a, staging).await {
        Ok(bytes) => {
            tracing::info!(job = job_id, attempt, bytes, "fetched the job's working directory");
            Ok(Prepared { staging: Some(staging.to_owned()), inputs, image })
        }
        Err(e) => {
            stager.release(job_id);
            Err(format!("fetching its working directory: {e}"))
        }
    }
}

fn not_started(why: String) -> JobExit {
    JobExit { exit_code: None, reason: Some(format!("could not start: {why}")), timed_out: false }
}

/// Milliseconds since the Unix epoch (time limits are kept in attempt records as such, so
/// that they hold across agent restarts).
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Local {
    /// Signals every process of the attempt: its cgroup, else its process group.
    fn signal(&self, signal: i32) {
        match (&self.cgroup, self.pgid) {
            (Some(cgroup), _) => cgroup.signal(signal),
            (None, Some(pgid)) => process::signal_group(pgid, signal),
            (None, None) => {}
        }
    }
}
