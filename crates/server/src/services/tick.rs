//! The controller's loop: load, decide (through [`super::plan`] and [`super::scale`]), carry
//! out, hand the gateway its table, probe. The I/O edge of the service controller.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use gantry_api::elastic::GpuRange;
use gantry_core::autoscale::Sample;
use gantry_store::{
    Gpu, JobFilter, JobId, JobState, NewJob, Node, Replica, Service, ServiceDecision, Store, StoreError,
    SubmitRequest,
};
use tokio::sync::{mpsc, watch};

use super::plan::{self, Action, Phase, ReplicaState};
use super::probe::{self, Probe};
use super::quota::{self, TeamQuota};
use super::scale::Scaler;
use super::signals;
use super::{ReplicaStatus, ServiceStatus};
use crate::app::{App, now_ms};
use crate::gateway::{Demand, ReplicaEndpoint, Route, RoutingTable, ServiceKey};

/// Longest a drained replica waits for its in-flight requests before it is stopped anyway.
const DRAIN_TIMEOUT_MS: i64 = 30_000;

/// Ended replicas read per service (for back-off).
const ENDED_READ: u32 = 5;

/// One service as loaded: the row and its replicas.
struct Loaded {
    service: Service,
    replicas: Vec<Replica>,
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
    now: i64,
}

/// What one tick writes.
#[derive(Default)]
struct Effects {
    scale: Vec<(i64, u32, ServiceDecision)>,
    submit: Vec<NewJob>,
    stop: Vec<(JobId, String, Option<String>)>,
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
    /// Failures in a row and when the last ended, per service.
    failures: HashMap<ServiceKey, (u32, i64)>,
    counted: HashSet<JobId>,
    held: HashMap<ServiceKey, usize>,
    /// When a service began to come back from zero.
    cold: HashMap<ServiceKey, i64>,
    last_port: u16,
    ticks: u64,
    started_at: i64,
    /// The table last handed to the gateway (the gateway starts with an empty one): an
    /// unchanged table is not handed again, so a tick that changes nothing disturbs nothing.
    routes: RoutingTable,
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
        let heard_after = now - i64::try_from(app.config.heartbeat_timeout.as_millis()).unwrap_or(i64::MAX);
        let signals = Signals {
            gpus: gpus.iter().map(|g| (g.info.uuid.as_str(), g)).collect(),
            fresh: nodes.iter().filter(|n| n.last_heartbeat >= heard_after).map(|n| n.id.clone()).collect(),
        };
        let mut effects = Effects::default();
        let mut table = RoutingTable::new();
        let mut status = HashMap::new();
        let mut used_ports: HashSet<u16> = HashSet::new();
        for l in &loaded {
            used_ports.extend(
                l.replicas.iter().filter(|r| !r.job.state.is_terminal()).filter_map(|r| port(&r.job)),
            );
        }
        let mut seen = HashSet::new();
        for l in loaded {
            seen.extend(l.replicas.iter().map(|r| r.job.id));
            let key = ServiceKey::new(&l.service.team, &l.service.name);
            let quota = quotas.get_mut(&l.service.team);
            let at = At { addrs: &addrs, signals: &signals, now };
            let (route, st) = self.service(app, &key, l, quota, &at, &mut used_ports, &mut effects);
            table.insert(key.clone(), route);
            status.insert((key.team, key.service), st);
        }
        self.probes.retain(|job, _| seen.contains(job));
        self.scraped.retain(|job, _| seen.contains(job));
        self.scraped_at.retain(|job, _| seen.contains(job));
        self.draining.retain(|job, _| seen.contains(job));
        self.scalers.retain(|key, _| table.contains_key(key));
        self.held.clear();
        if table != self.routes {
            app.gateway.set_routes(&table);
            self.routes = table;
        }
        app.service_status.replace(status);
        self.carry_out(app, effects).await
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
        used_ports: &mut HashSet<u16>,
        effects: &mut Effects,
    ) -> (Route, ServiceStatus) {
        let (addrs, now) = (at.addrs, at.now);
        let spec = &l.service.spec;
        let threshold = spec.readiness.failure_threshold;
        self.count_failures(key, &l.replicas);
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
        let ready = states.iter().filter(|s| s.phase == Phase::Ready).count() as u32;
        if ready > 0 {
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
        let (failures, last_failure_at) = self.failures.get(key).copied().unwrap_or_default();
        let input = plan::Input {
            generation: l.service.generation,
            desired,
            replicas: states,
            failures,
            last_failure_at,
            now,
            room: quota.as_ref().map(|q| q.room(spec.gpus)),
        };
        let p = plan::plan(&input);
        st.short = p.short.clone();
        for action in p.actions {
            match action {
                Action::Start => match super::next_port(app.config.service_ports, self.last_port, used_ports)
                {
                    Some(port) => {
                        self.last_port = port;
                        used_ports.insert(port);
                        if let Some(q) = quota.as_deref_mut() {
                            q.charge(spec.gpus);
                        }
                        effects.submit.push(replica_job(&l.service, port, now));
                    }
                    None => {
                        let (lo, hi) = app.config.service_ports;
                        st.short = Some(format!("every replica port ({lo}-{hi}, --service-ports) is in use"));
                    }
                },
                Action::Drain(job, why) => {
                    self.draining.insert(job, (self.ticks, now, why));
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
        };
        (route, st)
    }

    /// The autoscaler's decision for this tick (recorded when it changes the count); returns
    /// the count to keep.
    fn autoscale(
        &mut self,
        app: &App,
        key: &ServiceKey,
        service: &Service,
        ready_replicas: &[(&gantry_store::Job, SocketAddr)],
        at: &At<'_>,
        effects: &mut Effects,
    ) -> u32 {
        let (now, ready) = (at.now, ready_replicas.len() as u32);
        let now_s = now as f64 / 1000.0;
        let generation = service.generation;
        let stale = self.scalers.get(key).is_none_or(|(g, _)| *g != generation);
        if stale {
            match Scaler::new(&service.spec, now_s) {
                Ok(s) => {
                    self.scalers.insert(key.clone(), (generation, s));
                }
                Err(e) => {
                    tracing::warn!(service = %key, error = %e, "a stored service has a bad autoscale block")
                }
            }
        }
        let Some((_, scaler)) = self.scalers.get_mut(key) else { return service.desired };
        let (gpu_utilization, sm_active) = if scaler.gpu_metrics() {
            let uuids = ready_replicas.iter().flat_map(|(job, _)| job.gpu_uuids.iter().map(String::as_str));
            signals::gpu_levels(uuids, &at.signals.gpus, &|node| at.signals.fresh.contains(node))
        } else {
            (None, None)
        };
        let series = scaler.series().to_vec();
        let every = scaler.scrape_every_ms();
        let prometheus = self.scrape(ready_replicas, &series, every, now);
        let Some((_, scaler)) = self.scalers.get_mut(key) else { return service.desired };
        let snapshot = app.gateway.snapshot(key);
        let (queued, total) = snapshot.as_ref().map_or((0, 0), |s| (s.queue_length, s.requests_total));
        if let Some(s) = &snapshot {
            let sample = Sample {
                at_s: now_s,
                in_flight: s.in_flight as f64,
                queue_length: s.queue_length as f64,
                rps: s.rps,
                ttft_p95_s: (s.rps > 0.0).then_some(s.ttft_p95_s),
                gpu_utilization,
                sm_active,
                prometheus,
            };
            scaler.observe(sample, total);
        }
        let held = self.held.get(key).copied().unwrap_or(0).max(if ready == 0 { queued } else { 0 });
        if let Some(since) = self.cold.get(key).copied().filter(|_| ready > 0) {
            self.cold.remove(key);
            let took = (now - since) as f64 / 1000.0;
            let reason = format!("cold start: the first replica was ready after {took:.1} s");
            effects.scale.push((
                service.id,
                service.desired,
                decision(now, service.desired, service.desired, reason),
            ));
        }
        let Some(d) = scaler.decide(now_s, service.desired, ready, held) else { return service.desired };
        if d.from == 0 {
            self.cold.insert(key.clone(), now);
        }
        effects.scale.push((service.id, d.to, decision(now, d.from, d.to, d.reason)));
        d.to
    }

    /// Sends the scrapes of `ready` replicas that are due (when `series` names any), and
    /// returns the wanted series summed over the ready replicas' recent scrapes.
    fn scrape(
        &mut self,
        ready: &[(&gantry_store::Job, SocketAddr)],
        series: &[String],
        every_ms: i64,
        now: i64,
    ) -> BTreeMap<String, f64> {
        if series.is_empty() {
            return BTreeMap::new();
        }
        for (job, addr) in ready {
            let due = self.scraped_at.get(&job.id).is_none_or(|last| now - last >= every_ms);
            if !due || self.scraping.contains_key(&job.id) {
                continue;
            }
            let Some(tx) = self.scrape_tx.clone() else { break };
            self.scraping.insert(job.id, now);
            self.scraped_at.insert(job.id, now);
            let (id, addr, wanted) = (job.id, *addr, series.to_vec());
            tokio::spawn(async move {
                let scraped = signals::fetch(addr).await.map(|text| signals::parse_series(&text, &wanted));
                let _ = tx.send((id, scraped));
            });
        }
        // A scrape older than three intervals (the replica stopped answering) counts no more.
        let recent = |at: i64| now - at <= 3 * every_ms.max(1000);
        signals::sum_scrapes(
            ready
                .iter()
                .filter_map(|(job, _)| self.scraped.get(&job.id))
                .filter(|(at, _)| recent(*at))
                .map(|(_, s)| s),
        )
    }

    /// Counts replicas that failed since the controller started (back-off).
    fn count_failures(&mut self, key: &ServiceKey, replicas: &[Replica]) {
        for r in replicas.iter().filter(|r| r.job.state.is_terminal()) {
            if !self.counted.insert(r.job.id) {
                continue;
            }
            let recent = r.job.finished_at.is_some_and(|t| t >= self.started_at);
            if recent && matches!(r.job.state, JobState::Failed | JobState::Timeout) {
                let f = self.failures.entry(key.clone()).or_default();
                *f = (f.0 + 1, r.job.finished_at.unwrap_or(0));
            }
        }
    }

    /// Stops drained replicas whose requests are answered (or whose drain took too long).
    fn finish_drains(&mut self, app: &App, key: &ServiceKey, now: i64, effects: &mut Effects) {
        let ticks = self.ticks;
        let done: Vec<JobId> = self
            .draining
            .iter()
            .filter(|(job, (tick, since, _))| {
                let idle = app.gateway.replica_in_flight(key, &job.to_string()).is_none_or(|n| n == 0);
                (*tick < ticks && idle) || now - since > DRAIN_TIMEOUT_MS
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
        if effects.scale.is_empty() && effects.submit.is_empty() && effects.stop.is_empty() {
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
                store.submit(job)?;
            }
            let mut nodes = Vec::new();
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

fn decision(at: i64, from: u32, to: u32, reason: String) -> ServiceDecision {
    ServiceDecision { at, from, to, reason }
}

/// What binds each service's team, by team.
type Quotas = HashMap<String, TeamQuota>;

/// One tick's read: the services, the nodes, the teams' quotas and the GPUs.
type Read = (Vec<Loaded>, Vec<Node>, Quotas, Vec<Gpu>);

/// Scraped series of one replica.
type Series = BTreeMap<String, f64>;

/// Services with their replicas, the nodes, and what binds each service's team.
fn load(store: &dyn Store, borrow_limit: f64) -> Result<Read, StoreError> {
    let mut out = Vec::new();
    for service in store.services(None)? {
        let replicas = store.service_replicas(&service.team, &service.name, ENDED_READ)?;
        out.push(Loaded { service, replicas });
    }
    let mut quotas = HashMap::new();
    let mut all_gpus = Vec::new();
    if !out.is_empty() {
        all_gpus = store.gpus()?;
        let (teams, counts, gpus) = (store.teams()?, store.job_counts()?, all_gpus.len() as u32);
        for l in &out {
            let name = &l.service.team;
            if quotas.contains_key(name) {
                continue;
            }
            let team = teams.iter().find(|t| t.name == *name);
            let guarantee = team.and_then(|t| t.gpu_quota);
            let pending = counts.iter().filter(|(t, s, _)| t == name && *s == JobState::Pending).map(|c| c.2);
            let quota = TeamQuota {
                team: name.clone(),
                guarantee,
                cap: quota::cap(guarantee, borrow_limit, gpus),
                used_gpus: active_gpus(store, name)?,
                pending: pending.sum(),
                pending_limit: team
                    .and_then(|t| t.pending_limit)
                    .unwrap_or(crate::command::DEFAULT_PENDING_LIMIT),
            };
            quotas.insert(name.clone(), quota);
        }
    }
    Ok((out, store.nodes()?, quotas, all_gpus))
}

/// Whole GPUs the team's jobs that have not ended ask for (a gang counts its workers).
fn active_gpus(store: &dyn Store, team: &str) -> Result<u32, StoreError> {
    let mut total = 0;
    for state in [JobState::Pending, JobState::Scheduled, JobState::Running] {
        let filter = JobFilter { state: Some(state), team: Some(team.to_owned()), ..JobFilter::default() };
        for job in store.jobs(&filter)? {
            let parent = job.gang.as_ref().is_some_and(|g| !g.is_worker());
            if !parent && job.stop.is_none() {
                total += job.request.gpus;
            }
        }
    }
    Ok(total)
}

/// The replica job for a service's current generation, listening on `port`.
fn replica_job(s: &Service, port: u16, now: i64) -> NewJob {
    let spec = &s.spec;
    let mut env = spec.env.clone();
    env.insert("PORT".into(), port.to_string());
    let request = SubmitRequest {
        command: spec.command.clone(),
        gpus: GpuRange::count(spec.gpus),
        gpu_memory_mib: spec.gpu_memory.unwrap_or(0),
        cpu_milli: spec.cpu.map_or(0, |c| (c * 1000.0).round() as u64),
        memory_mib: spec.memory.unwrap_or(0),
        team: Some(s.team.clone()),
        priority: spec.priority,
        name: Some(s.name.clone()),
        max_retries: Some(0),
        env,
        labels: spec.labels.clone(),
        wait_for_capacity: true,
        ..SubmitRequest::default()
    };
    NewJob {
        spec: request,
        team: s.team.clone(),
        name: s.name.clone(),
        submitted_at: now,
        user: None,
        service: Some((s.name.clone(), s.generation)),
    }
}

fn port(job: &gantry_store::Job) -> Option<u16> {
    job.env.get("PORT").and_then(|p| p.parse().ok())
}

/// Where the gateway reaches a running replica: its node's address and its port.
fn address(job: &gantry_store::Job, addrs: &HashMap<String, Option<IpAddr>>) -> Option<SocketAddr> {
    let ip = addrs.get(job.node_id.as_deref()?)?.as_ref()?;
    Some(SocketAddr::new(*ip, port(job)?))
}

/// Each node's address: its advertised address, else its host name, resolved.
///
/// A node whose jobs have network namespaces publishes a replica's port with `portmap`, whose
/// rule catches connections to the node's own addresses but, with `route_localnet` off (the
/// agent keeps it off so that jobs never reach the node's loopback), not to `127.0.0.0/8`. A node
/// that names itself by a loopback address is this machine: the gateway reaches its replicas
/// through one of this machine's other addresses instead.
async fn resolve(nodes: &[Node]) -> HashMap<String, Option<IpAddr>> {
    let mut out = HashMap::new();
    for n in nodes {
        let host = n.advertise_addr.clone().unwrap_or_else(|| n.hostname.clone());
        let ip = match host.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => tokio::net::lookup_host((host.as_str(), 0))
                .await
                .ok()
                .and_then(|mut a| a.next())
                .map(|a| a.ip()),
        };
        let ip = match ip {
            Some(ip) if ip.is_loopback() && n.network == gantry_store::NodeNetwork::Cni => {
                Some(own_address().unwrap_or(ip))
            }
            other => other,
        };
        out.insert(n.id.clone(), ip);
    }
    out
}

/// A non-loopback address of this machine: the source of its route toward a private address
/// (a UDP "connection" sends nothing).
fn own_address() -> Option<IpAddr> {
    let socket = std::net::UdpSocket::bind(("0.0.0.0", 0)).ok()?;
    socket.connect(("10.255.255.254", 9)).ok()?;
    Some(socket.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}
