//! The controller's loop: load, decide (through [`super::plan`] and [`super::scale`]), carry
//! out, hand the gateway its table, probe. The I/O edge of the service controller.
//!
//! One idea a module: this one is the loop and one service's step; [`autoscale`] the
//! autoscaler's step, [`read`] the store read, [`replica`] the job a replica is submitted as,
//! [`address`] where the gateway reaches it, [`activity`] the gateway activity server replicas
//! share.

mod activity;
mod address;
mod autoscale;
mod read;
mod replica;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use gantry_store::{Gpu, JobId, JobState, NewJob, Replica, Service, ServiceDecision, StoreError};
use tokio::sync::{mpsc, watch};

use self::address::{address, resolve};
use self::read::{Series, load};
use self::replica::replica_job;
use super::plan::{self, Action, Phase, ReplicaState};
use super::probe::{self, Probe};
use super::quota::TeamQuota;
use super::scale::Scaler;
use super::{ReplicaStatus, ServiceStatus};
use crate::app::{App, now_ms};
use crate::gateway::{Demand, ReplicaEndpoint, Route, RoutingTable, ServiceKey};

/// Longest a drained replica waits for its in-flight requests before it is stopped anyway,
/// unless its service says otherwise (`drain_timeout_s`).
const DRAIN_TIMEOUT_MS: i64 = 30_000;

/// Ended replicas read per service (for back-off).
const ENDED_READ: u32 = 5;

/// One service as loaded: the row and its replicas.
struct Loaded {
    service: Service,
    replicas: Vec<Replica>,
    /// The team's volumes its replicas mount.
    volumes: Vec<gantry_store::Volume>,
}

/// What the autoscaler reads besides the gateway: the GPUs' latest samples by UUID, and the
/// nodes heard from within the heartbeat timeout.
struct Signals<'a> {
    gpus: HashMap<&'a str, &'a Gpu>,
    fresh: HashSet<String>,
}

/// The tick's shared reads: node addresses, signals, now (ms).
struct At<'a> {
    addrs: &'a HashMap<String, Option<IpAddr>>,
    signals: &'a Signals<'a>,
    /// What the other server replicas' gateways saw (read by the leader only).
    elsewhere: &'a HashMap<ServiceKey, activity::Elsewhere>,
    now: i64,
}

/// What one tick writes.
#[derive(Default)]
struct Effects {
    scale: Vec<(i64, u32, ServiceDecision)>,
    submit: Vec<NewJob>,
    stop: Vec<(JobId, String, Option<String>)>,
    /// Events to record: (subject, message, team).
    events: Vec<(String, String, String)>,
}

/// Runs the controller until `stop` turns true.
pub async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let Some(mut demand) = app.gateway.demand() else {
        tracing::warn!("the gateway's demand was taken by another: the service controller does not run");
        return;
    };
    let (tx, mut results) = mpsc::unbounded_channel();
    let (scrape_tx, mut scrapes) = mpsc::unbounded_channel();
    let mut c = Controller {
        probe_tx: Some(tx),
        scrape_tx: Some(scrape_tx),
        started_at: now_ms(),
        ..Controller::default()
    };
    let mut every = tokio::time::interval(app.config.service_tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            Some(d) = demand.recv() => c.held(d),
            _ = stop.changed() => return,
        }
        while let Ok(d) = demand.try_recv() {
            c.held(d);
        }
        while let Ok((job, ok)) = results.try_recv() {
            c.results.entry(job).or_default().push(ok);
        }
        while let Ok((job, scraped)) = scrapes.try_recv() {
            c.scraping.remove(&job);
            match scraped {
                Some(series) => c.scraped.insert(job, (now_ms(), series)),
                None => c.scraped.remove(&job),
            };
        }
        if let Err(e) = c.tick(&app).await {
            tracing::warn!(error = %e, "service controller tick failed");
        }
    }
}

/// Replicas of one generation that failed in a row (none of that generation ready since).
#[derive(Debug, Clone, Default)]
struct Failures {
    generation: u64,
    count: u32,
    /// When the last one ended (ms).
    last_at: i64,
    /// The last one's reason, and its last line of output when there is one.
    last: Option<String>,
}

#[derive(Default)]
struct Controller {
    probe_tx: Option<mpsc::UnboundedSender<(JobId, bool)>>,
    probes: HashMap<JobId, Probe>,
    results: HashMap<JobId, Vec<bool>>,
    scrape_tx: Option<mpsc::UnboundedSender<(JobId, Option<Series>)>>,
    /// Each replica's last good scrape of its `/metrics`: (when, the wanted series).
    scraped: HashMap<JobId, (i64, BTreeMap<String, f64>)>,
    /// Replicas with a scrape out, and when it was sent.
    scraping: HashMap<JobId, i64>,
    /// When each replica was last scraped.
    scraped_at: HashMap<JobId, i64>,
    scalers: HashMap<ServiceKey, (u64, Scaler)>,
    /// Replicas out of the table waiting for their requests: (tick it began, when, why).
    draining: HashMap<JobId, (u64, i64, String)>,
    /// Each draining replica's longest drain (its service's `drain_timeout_s`), ms.
    drain_limit: HashMap<JobId, i64>,
    /// Failures in a row of one generation's replicas, per service.
    failures: HashMap<ServiceKey, Failures>,
    /// Each service's generation, its ready replicas and when it last made progress (a new
    /// generation seen, one more of its replicas ready, or all of them ready).
    progress: HashMap<ServiceKey, (u64, usize, i64)>,
    /// The generation whose stuck rollout was last recorded as an event, per service.
    reported: HashMap<ServiceKey, u64>,
    counted: HashSet<JobId>,
    held: HashMap<ServiceKey, usize>,
    /// When a service began to come back from zero.
    cold: HashMap<ServiceKey, i64>,
    ticks: u64,
    started_at: i64,
    /// The table last handed to the gateway (the gateway starts with an empty one): an
    /// unchanged table is not handed again, so a tick that changes nothing disturbs nothing.
    routes: RoutingTable,
    /// What this replica, as a follower, last wrote of its gateway's activity.
    sent: HashMap<ServiceKey, activity::Sent>,
}

impl Controller {
    fn held(&mut self, d: Demand) {
        let n = self.held.entry(d.service).or_default();
        *n = (*n).max(d.held);
    }

    async fn tick(&mut self, app: &Arc<App>) -> Result<(), StoreError> {
        self.ticks += 1;
        let store = Arc::clone(&app.store);
        let borrow_limit = app.queue.read().map_or(1.0, |q| q.weights.borrow_limit);
        let (loaded, nodes, mut quotas, gpus) =
            tokio::task::spawn_blocking(move || load(&*store, borrow_limit))
                .await
                .map_err(|e| StoreError::Corrupt(e.to_string()))??;
        let addrs = resolve(&nodes).await;
        let now = now_ms();
        let elsewhere = self.elsewhere(app, now).await;
        let heard_after = now - i64::try_from(app.config.heartbeat_timeout.as_millis()).unwrap_or(i64::MAX);
        let signals = Signals {
            gpus: gpus.iter().map(|g| (g.info.uuid.as_str(), g)).collect(),
            fresh: nodes.iter().filter(|n| n.last_heartbeat >= heard_after).map(|n| n.id.clone()).collect(),
        };
        let mut effects = Effects::default();
        let mut table = RoutingTable::new();
        let mut status = HashMap::new();
        let mut seen = HashSet::new();
        for l in loaded {
            seen.extend(l.replicas.iter().map(|r| r.job.id));
            let key = ServiceKey::new(&l.service.team, &l.service.name);
            let quota = quotas.get_mut(&l.service.team);
            let at = At { addrs: &addrs, signals: &signals, elsewhere: &elsewhere, now };
            let (route, st) = self.service(app, &key, l, quota, &at, &mut effects);
            table.insert(key.clone(), route);
            status.insert((key.team, key.service), st);
        }
        self.probes.retain(|job, _| seen.contains(job));
        self.scraped.retain(|job, _| seen.contains(job));
        self.scraped_at.retain(|job, _| seen.contains(job));
        self.draining.retain(|job, _| seen.contains(job));
        self.drain_limit.retain(|job, _| self.draining.contains_key(job));
        self.scalers.retain(|key, _| table.contains_key(key));
        self.sent.retain(|key, _| table.contains_key(key));
        self.share_activity(app, &table, now).await;
        self.held.clear();
        if table != self.routes {
            app.gateway.set_routes(&table);
            self.routes = table;
        }
        app.service_status.replace(status);
        self.carry_out(app, effects).await
    }

    /// The leader's view of the other replicas' gateways ([`activity`]); none for a lone server
    /// (no lease) or a follower, or when the read fails (logged: the tick goes on without it).
    async fn elsewhere(&self, app: &Arc<App>, now: i64) -> HashMap<ServiceKey, activity::Elsewhere> {
        let Some(lease) = app.config.lease.as_ref().filter(|_| app.leadership.leads()) else {
            return HashMap::new();
        };
        let store = Arc::clone(&app.store);
        let read = tokio::task::spawn_blocking(move || store.service_activity())
            .await
            .map_err(|e| StoreError::Corrupt(e.to_string()))
            .and_then(|read| read);
        match read {
            Ok(rows) => activity::elsewhere(&rows, &lease.replica, now),
            Err(e) => {
                tracing::warn!(error = %e, "reading the other replicas' gateway activity failed");
                HashMap::new()
            }
        }
    }

    /// A follower's share of [`activity`]: what its gateway saw of each service, for the
    /// leader's autoscaler (a failed write is logged; the next tick writes again).
    async fn share_activity(&mut self, app: &Arc<App>, table: &RoutingTable, now: i64) {
        let Some(lease) = app.config.lease.as_ref().filter(|_| !app.leadership.leads()) else {
            return;
        };
        let seen: Vec<_> = table
            .keys()
            .map(|key| (key.clone(), app.gateway.snapshot(key), self.held.get(key).copied().unwrap_or(0)))
            .collect();
        let rows = activity::rows(&lease.replica, now, &seen, &mut self.sent);
        if rows.is_empty() {
            return;
        }
        let store = Arc::clone(&app.store);
        let written = tokio::task::spawn_blocking(move || store.note_service_activity(&rows)).await;
        if !matches!(written, Ok(Ok(()))) {
            tracing::warn!(?written, "writing this replica's gateway activity failed");
            // Written again at the next tick.
            self.sent.clear();
        }
    }

    /// One service: decide, plan, and its route.
    #[allow(clippy::too_many_arguments)] // reason: the tick's shared pieces, borrowed separately
    fn service(
        &mut self,
        app: &App,
        key: &ServiceKey,
        l: Loaded,
        mut quota: Option<&mut TeamQuota>,
        at: &At<'_>,
        effects: &mut Effects,
    ) -> (Route, ServiceStatus) {
        let (addrs, now) = (at.addrs, at.now);
        let spec = &l.service.spec;
        let threshold = spec.readiness.failure_threshold;
        self.count_failures(app, key, &l.replicas);
        let mut states = Vec::new();
        let mut st = ServiceStatus::default();
        let mut endpoints = Vec::new();
        for r in l.replicas.iter().filter(|r| !r.job.state.is_terminal()) {
            let addr = address(&r.job, addrs);
            let mut probe = self.probes.get(&r.job.id).copied().unwrap_or_default();
            for ok in self.results.remove(&r.job.id).unwrap_or_default() {
                probe = probe.record(ok, threshold);
            }
            let phase = match (&r.job.stop, r.job.state) {
                (Some(_), _) => Phase::Stopping,
                _ if self.draining.contains_key(&r.job.id) => Phase::Draining,
                (None, JobState::Running) if addr.is_some() => probe.phase(threshold),
                (None, JobState::Running) => Phase::Starting,
                _ => Phase::Pending,
            };
            let ready = phase == Phase::Ready;
            if let Some(addr) = addr.filter(|_| r.job.state == JobState::Running) {
                let max_concurrency = spec.max_concurrency.map(|n| n as usize);
                endpoints.push(ReplicaEndpoint { id: r.job.id.to_string(), addr, ready, max_concurrency });
                let started = r.job.started_at.unwrap_or(now);
                if phase != Phase::Stopping && probe.due(&spec.readiness, started, now) {
                    probe.in_flight = true;
                    probe.last_at = Some(now);
                    self.send_probe(r.job.id, addr, &spec.readiness);
                }
            }
            self.probes.insert(r.job.id, probe);
            let reason = match phase {
                Phase::Pending => app.waiting.read().ok().and_then(|w| w.get(&r.job.id).cloned()),
                Phase::Starting if addr.is_none() && r.job.state == JobState::Running => {
                    Some("its node's address does not resolve".into())
                }
                Phase::Starting => Some("waiting for its readiness probe to pass".into()),
                Phase::Unready | Phase::Dead => {
                    Some(format!("failing its readiness probe ({} in a row)", probe.failures))
                }
                Phase::Draining => Some("draining: answering its last requests".into()),
                Phase::Stopping => r.job.reason.clone().or(Some("stopping".into())),
                Phase::Ready => None,
            };
            st.replicas.insert(r.job.id, ReplicaStatus { ready, address: addr, reason });
            states.push(ReplicaState { job: r.job.id, generation: r.generation, phase });
        }
        let generation = l.service.generation;
        let new_ready =
            states.iter().filter(|s| s.phase == Phase::Ready && s.generation >= generation).count();
        if new_ready > 0 || self.failures.get(key).is_some_and(|f| f.generation < generation) {
            // One of the generation's replicas is ready, or the file changed: a fresh start.
            self.failures.remove(key);
        }
        let ready_replicas: Vec<(&gantry_store::Job, SocketAddr)> = l
            .replicas
            .iter()
            .filter(|r| st.replicas.get(&r.job.id).is_some_and(|s| s.ready))
            .filter_map(|r| Some((&r.job, st.replicas.get(&r.job.id)?.address?)))
            .collect();
        let desired = self.autoscale(app, key, &l.service, &ready_replicas, at, effects);
        self.finish_drains(app, key, now, effects);
        let failed = self.failures.get(key).cloned().unwrap_or_default();
        let since = self.progressed(key, generation, new_ready, desired as usize, now);
        let (max_surge, max_unavailable) = spec.rollout_bounds();
        let rollout = plan::Rollout {
            max_surge,
            max_unavailable,
            since,
            deadline_ms: i64::try_from(spec.progress_deadline_s()).unwrap_or(i64::MAX / 1000) * 1000,
            last_failure: failed.last.clone(),
        };
        let input = plan::Input {
            generation,
            desired,
            replicas: states,
            failures: failed.count,
            last_failure_at: failed.last_at,
            now,
            room: quota.as_ref().map(|q| q.room(spec.gpus)),
            rollout,
        };
        let p = plan::plan(&input);
        st.short = p.short.clone();
        st.rollout = p.stuck.clone();
        match &p.stuck {
            Some(why) if self.reported.get(key) != Some(&generation) => {
                self.reported.insert(key.clone(), generation);
                tracing::warn!(service = %key, "{why}");
                effects.events.push((
                    format!("service/{}/{}", l.service.team, l.service.name),
                    why.clone(),
                    l.service.team.clone(),
                ));
            }
            Some(_) => {}
            None => {
                self.reported.remove(key);
            }
        }
        for action in p.actions {
            match action {
                // Its `$PORT` is its node's to choose, once it is placed (`assign_ports`).
                Action::Start => {
                    if let Some(q) = quota.as_deref_mut() {
                        q.charge(spec.gpus);
                    }
                    effects.submit.push(replica_job(&l.service, &l.volumes, now));
                }
                Action::Drain(job, why) => {
                    self.draining.insert(job, (self.ticks, now, why));
                    self.drain_limit.insert(job, spec.drain_timeout_ms());
                }
                Action::Stop(job, why) => {
                    let node =
                        l.replicas.iter().find(|r| r.job.id == job).and_then(|r| r.job.node_id.clone());
                    effects.stop.push((job, why, node));
                }
            }
        }
        // Draining replicas stay in the table, not ready, so their requests finish.
        for e in &mut endpoints {
            if e.id.parse().is_ok_and(|id: JobId| self.draining.contains_key(&id)) {
                e.ready = false;
            }
        }
        let route = Route {
            replicas: endpoints,
            public: spec.public,
            can_start: spec.replicas.min == 0 || desired > 0,
            queue_limit: Route::DEFAULT_QUEUE_LIMIT,
            cold_start_timeout: Some(std::time::Duration::from_secs(spec.cold_start_timeout_s())),
            failing: (failed.count > 0).then(|| {
                let last = failed.last.as_deref().unwrap_or("no reason recorded");
                gantry_api::inputs::reason(&format!(
                    "its replicas keep failing ({} in a row): {last}",
                    failed.count
                ))
            }),
        };
        (route, st)
    }

    /// Counts replicas that failed since the controller started (back-off), per generation: a
    /// failure of an older generation's replica does not hold the newer one back.
    fn count_failures(&mut self, app: &App, key: &ServiceKey, replicas: &[Replica]) {
        for r in replicas.iter().filter(|r| r.job.state.is_terminal()) {
            if !self.counted.insert(r.job.id) {
                continue;
            }
            let recent = r.job.finished_at.is_some_and(|t| t >= self.started_at);
            if !(recent && matches!(r.job.state, JobState::Failed | JobState::Timeout)) {
                continue;
            }
            let f = self.failures.entry(key.clone()).or_default();
            if r.generation < f.generation {
                continue;
            }
            if r.generation > f.generation {
                *f = Failures { generation: r.generation, ..Failures::default() };
            }
            f.count += 1;
            f.last_at = r.job.finished_at.unwrap_or(0);
            f.last = Some(last_words(app, &r.job));
        }
    }

    /// When `key`'s generation last made progress: the generation first seen, one more of its
    /// replicas ready, or as many ready as desired (a healthy service progresses every tick).
    fn progressed(
        &mut self,
        key: &ServiceKey,
        generation: u64,
        ready: usize,
        desired: usize,
        now: i64,
    ) -> i64 {
        let p = self.progress.entry(key.clone()).or_insert((generation, ready, now));
        if p.0 != generation || ready > p.1 || ready >= desired {
            *p = (generation, ready, now);
        }
        p.1 = ready;
        p.2
    }

    /// Stops drained replicas whose requests are answered (or whose drain took too long).
    fn finish_drains(&mut self, app: &App, key: &ServiceKey, now: i64, effects: &mut Effects) {
        let ticks = self.ticks;
        let done: Vec<JobId> = self
            .draining
            .iter()
            .filter(|(job, (tick, since, _))| {
                let idle = app.gateway.replica_in_flight(key, &job.to_string()).is_none_or(|n| n == 0);
                let limit = self.drain_limit.get(job).copied().unwrap_or(DRAIN_TIMEOUT_MS);
                (*tick < ticks && idle) || now - since > limit
            })
            .map(|(job, _)| *job)
            .collect();
        for job in done {
            if let Some((_, _, why)) = self.draining.remove(&job) {
                effects.stop.push((job, why, None));
            }
        }
    }

    fn send_probe(&self, job: JobId, addr: SocketAddr, spec: &gantry_api::service::Readiness) {
        let Some(tx) = self.probe_tx.clone() else { return };
        let path = spec.path.clone();
        let timeout = std::time::Duration::from_secs_f64(spec.timeout_s);
        tokio::spawn(async move {
            let ok = probe::check(addr, &path, timeout).await;
            let _ = tx.send((job, ok));
        });
    }

    async fn carry_out(&mut self, app: &Arc<App>, effects: Effects) -> Result<(), StoreError> {
        if effects.scale.is_empty()
            && effects.submit.is_empty()
            && effects.stop.is_empty()
            && effects.events.is_empty()
        {
            return Ok(());
        }
        // The leader's controller alone scales, submits and stops replicas (one set of
        // replicas, not one per server replica); a follower's routes its gateway's requests.
        if !app.leadership.leads() {
            return Ok(());
        }
        let store = Arc::clone(&app.store);
        let submitted = !effects.submit.is_empty();
        let now = now_ms();
        let nodes = tokio::task::spawn_blocking(move || -> Result<Vec<String>, StoreError> {
            for (id, desired, d) in effects.scale {
                store.scale_service(id, desired, Some(d))?;
            }
            for job in &effects.submit {
                match store.submit(job) {
                    // The service was deleted or changed since this tick read it: a stale
                    // decision, not a failure (the next tick decides on what is there now).
                    Err(StoreError::NotFound(why) | StoreError::Conflict(why)) => {
                        tracing::info!(%why, "a replica decided before its service changed is not started");
                    }
                    Err(e) => return Err(e),
                    Ok(_) => {}
                }
            }
            let mut nodes = Vec::new();
            for (subject, message, team) in &effects.events {
                store.record_event(now, "service.rollout_stuck", subject, message, Some(team))?;
            }
            for (job, why, node) in effects.stop {
                store.stop_replica(job, &why, now)?;
                nodes.extend(node.or_else(|| store.job(job).ok().flatten().and_then(|j| j.node_id)));
            }
            Ok(nodes)
        })
        .await
        .map_err(|e| StoreError::Corrupt(e.to_string()))??;
        for node in &nodes {
            app.assigned.changed(node);
        }
        if submitted || !nodes.is_empty() {
            app.changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            app.wake.notify_one();
        }
        Ok(())
    }
}

/// A failed replica's reason, with its last line of output (stderr, else stdout) when there is
/// one: what `rollout stuck: …` ends with.
fn last_words(app: &App, job: &gantry_store::Job) -> String {
    let reason = job.reason.clone().unwrap_or_else(|| format!("replica {} {}", job.id, job.state.as_str()));
    let line = ["stderr", "stdout"].iter().find_map(|stream| {
        let dir = gantry_api::job_logs::read_dir_for(&app.config.logs_dir, job.id, job.attempt, job.attempt);
        let path = dir.join(stream);
        let text = read_tail(&path, 4096)?;
        text.lines().rev().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned)
    });
    match line {
        Some(l) => format!("{reason}: {l}"),
        None => reason,
    }
}

/// The last `max` bytes of a file, as text.
fn read_tail(path: &std::path::Path, max: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max))).ok()?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

fn decision(at: i64, from: u32, to: u32, reason: String) -> ServiceDecision {
    ServiceDecision { at, from, to, reason }
}
