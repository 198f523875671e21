//! Staging declared inputs into the node's cache while their jobs wait (issue 22).
//!
//! About once a second the agent reports to `POST /v1/agent/staging` how each staging it was
//! ordered stands and what its cache holds, and is answered the stagings ordered of it now
//! ([`Stager::apply`]). Each order runs in a task of its own: it lists every input's source
//! (its version and declared size, [`super::sources::list`]), finds in the cache what it holds
//! already (a hit: no byte copied), reserves room for the rest and copies it under a temporary
//! name, renamed into place once complete ([`super::cache`]). A failure (the source refuses,
//! breaks off mid-copy, sends more than it declared, the cache has no room) removes the partial
//! copy, is reported with its reason, and is tried again after a back-off (1 s, doubling, at
//! most a minute): the job stays pending, never lost. An order no longer listed (the job was
//! placed, cancelled or given another node) is given up.
//!
//! When the job starts on this node, [`Stager::inputs_for`] names the cached copies (staging
//! them first, GPUs held, for a job that was not staged ahead: one placed before its staging
//! was heard of; a gang's other workers on a node find there the copy staged for its first) and pins them, so that no eviction removes an input a
//! running job reads; [`Stager::release`] unpins them when it ends. The job finds each as
//! `GANTRY_INPUT_<NAME>`, read-only, in its team's directory of the cache, which no other
//! team's user can enter.
//!
//! An input whose source an admin marked public (`StageOrder::public`) is copied into the
//! cache's public scope instead, once per node, and any team's job finds it there. A lookup
//! tries the job's team first, then the public scope; either is keyed by the version the
//! job's own listing of the source found (with its own secret), so a job finds a public copy
//! only of a source it can list itself, and never another team's private copy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use gantry_api::inputs::{Input, PUBLIC_SCOPE, StageOrder, StageReport};
use gantry_api::types::Assignment;

use super::cache::{Cache, remove_any};
use super::egress::Egress;
use super::sandbox::Sandbox;
use super::sources::{self, Secret};

/// Longest wait between two tries of a failing staging.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A staged input: name, data path, and what names its cache entry (scope, url, version).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Staged {
    name: String,
    /// The team, or [`PUBLIC_SCOPE`].
    scope: String,
    path: String,
    url: String,
    version: String,
}

#[derive(Debug, Default)]
struct Progress {
    done_bytes: Arc<AtomicU64>,
    total: u64,
    error: Option<String>,
    finished: Option<(Vec<Input>, Vec<Staged>)>,
}

#[derive(Debug)]
struct Task {
    order: StageOrder,
    progress: Arc<Mutex<Progress>>,
    abort: tokio::task::AbortHandle,
    /// Bytes and when, at the last report (for the rate).
    last: (u64, Instant),
}

/// The node's stagings (see the module documentation).
#[derive(Debug)]
pub struct Stager {
    cache: Arc<Cache>,
    sandbox: Arc<Sandbox>,
    tasks: Mutex<HashMap<i64, Task>>,
    /// Inputs pinned by running jobs, by job.
    pinned: Mutex<HashMap<i64, Vec<Staged>>>,
    /// Stagings done whose order is no longer listed (the job was placed): what its start
    /// finds, by job.
    ready: Mutex<HashMap<i64, Vec<Staged>>>,
    /// The exporter's cache and staging counters.
    metrics: Option<Arc<crate::exporter::cache::CacheMetrics>>,
    /// Where sources may connect.
    egress: Arc<Egress>,
    /// The node's images: a waiting job's image is pulled with its inputs.
    images: Option<Arc<super::images::Images>>,
}

/// Most finished stagings kept for jobs that have not started yet.
const MAX_READY: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Stager {
    /// A stager over `cache`, whose team directories open to each team's user of `sandbox`.
    pub fn new(cache: Arc<Cache>, sandbox: Arc<Sandbox>) -> Self {
        Self {
            cache,
            sandbox,
            tasks: Mutex::default(),
            pinned: Mutex::default(),
            ready: Mutex::default(),
            metrics: None,
            egress: Arc::default(),
            images: None,
        }
    }

    /// Sources connect only where `egress` allows (the default: no address of the node or its
    /// networks).
    pub fn with_egress(mut self, egress: Arc<Egress>) -> Self {
        self.egress = egress;
        self
    }

    /// How `order`'s input `name` is read: its team secret, and whether an admin marked it public.
    fn access<'a>(&'a self, order: &'a StageOrder, name: &str) -> sources::Access<'a> {
        sources::Access {
            secret: &order.secret,
            public: order.public.iter().any(|p| p == name),
            egress: &self.egress,
        }
    }

    /// Pulls waiting jobs' images into `images` while they wait.
    pub fn with_images(mut self, images: Option<Arc<super::images::Images>>) -> Self {
        self.images = images;
        self
    }

    /// Counts what it stages, and what the cache holds, into the node exporter's `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::exporter::cache::CacheMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The cache.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Starts the orders not running yet and gives up those no longer listed.
    pub fn apply(self: &Arc<Self>, orders: Vec<StageOrder>) {
        let mut tasks = lock(&self.tasks);
        let mut ready = lock(&self.ready);
        tasks.retain(|id, t| {
            let keep = orders.iter().any(|o| o.job_id == *id && o.inputs == t.order.inputs);
            if !keep {
                t.abort.abort();
                if let Some((_, staged)) = lock(&t.progress).finished.take() {
                    if ready.len() >= MAX_READY {
                        ready.clear();
                    }
                    ready.insert(*id, staged);
                }
            }
            keep
        });
        drop(ready);
        for order in orders {
            if tasks.contains_key(&order.job_id) {
                continue;
            }
            let progress = Arc::new(Mutex::new(Progress::default()));
            let (me, p, o) = (Arc::clone(self), Arc::clone(&progress), order.clone());
            let task = tokio::spawn(async move { me.stage_until_done(&o, &p).await });
            tracing::info!(job = order.job_id, inputs = order.inputs.len(), "staging a pending job's inputs");
            let last = (0, Instant::now());
            tasks.insert(order.job_id, Task { order, progress, abort: task.abort_handle(), last });
        }
    }

    /// How each staging stands, for the server.
    pub fn reports(&self) -> Vec<StageReport> {
        let mut tasks = lock(&self.tasks);
        let mut out: Vec<StageReport> = tasks
            .iter_mut()
            .map(|(id, t)| {
                let p = lock(&t.progress);
                let done_bytes = p.done_bytes.load(Ordering::Relaxed);
                let secs = t.last.1.elapsed().as_secs_f64().max(0.001);
                let rate_bps = (done_bytes.saturating_sub(t.last.0) as f64 / secs) as u64;
                t.last = (done_bytes, Instant::now());
                StageReport {
                    job_id: *id,
                    done: p.finished.is_some(),
                    bytes_done: done_bytes,
                    bytes_total: p.total,
                    rate_bps,
                    error: if p.finished.is_some() { None } else { p.error.clone() },
                    inputs: p.finished.as_ref().map(|f| f.0.clone()).unwrap_or_default(),
                }
            })
            .collect();
        out.sort_by_key(|r| r.job_id);
        out
    }

    async fn stage_until_done(&self, order: &StageOrder, progress: &Mutex<Progress>) {
        let mut backoff = Duration::from_secs(1);
        loop {
            let done = Arc::clone(&lock(progress).done_bytes);
            done.store(0, Ordering::Relaxed);
            match self.stage_once(order, &done, progress).await {
                Ok(finished) => {
                    let mut p = lock(progress);
                    (p.error, p.finished) = (None, Some(finished));
                    tracing::info!(job = order.job_id, "staged the job's inputs");
                    return;
                }
                Err(e) => {
                    tracing::warn!(job = order.job_id, error = %e, "staging failed; trying again later");
                    lock(progress).error = Some(sources::reason(&e));
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One try at every input of `order`.
    async fn stage_once(
        &self,
        order: &StageOrder,
        done: &AtomicU64,
        progress: &Mutex<Progress>,
    ) -> Result<(Vec<Input>, Vec<Staged>), String> {
        if let Some(image) = &order.image {
            let images =
                self.images.as_ref().ok_or_else(|| "this node cannot run container images".to_owned())?;
            let login = order.registry_login.as_ref().map(|l| gantry_image::registry::Credentials {
                username: l.username.clone(),
                password: l.password.clone(),
            });
            let started = Instant::now();
            let pulled = images
                .pull(&image.reference, image.digest.as_deref(), login.as_ref(), Some(&order.team))
                .await;
            match pulled {
                Ok(pulled) => {
                    tracing::info!(job = order.job_id, image = %pulled.reference, secs = started.elapsed().as_secs_f64(), "pulled a waiting job's image");
                }
                // Not a staging to retry for ever (a refused login, no such image, an address the
                // node may not reach): the job goes on to its node, whose attempt pulls again and
                // fails with the reason, as a job that was not staged ahead does.
                Err(e) => {
                    tracing::warn!(job = order.job_id, error = %e, "pulling a waiting job's image failed; its start will try again");
                }
            }
        }
        let mut listings = Vec::new();
        for i in &order.inputs {
            let access = self.access(order, &i.name);
            listings.push(sources::list(&i.url, access).await.map_err(|e| format!("{}: {e}", i.name))?);
        }
        lock(progress).total = listings.iter().map(sources::Listing::bytes).sum();
        let gid = self.sandbox.user_for(&order.team).ok().and_then(|(id, creds)| creds.map(|_| id.gid));
        let (mut results, mut staged) = (Vec::new(), Vec::new());
        for (i, l) in order.inputs.iter().zip(&listings) {
            let started = Instant::now();
            let team = order.team.as_str();
            let found =
                self.cache.lookup(team, &i.url, &l.version).map(|f| (f, team)).or_else(|| {
                    self.cache.lookup(PUBLIC_SCOPE, &i.url, &l.version).map(|f| (f, PUBLIC_SCOPE))
                });
            let (path, hit, scope) = match found {
                Some(((path, bytes), scope)) => {
                    done.fetch_add(bytes, Ordering::Relaxed);
                    (path, true, scope)
                }
                None => {
                    let scope = if order.public.contains(&i.name) { PUBLIC_SCOPE } else { team };
                    let dir = self.cache.team_dir(scope, gid).map_err(|e| e.to_string())?;
                    let room =
                        self.cache.reserve(scope, l.bytes()).map_err(|e| format!("{}: {e}", i.name))?;
                    let tmp = self.cache.tmp_path(&dir, &i.url, &l.version);
                    if let Err(e) = sources::copy(&i.url, self.access(order, &i.name), l, &tmp, done).await {
                        remove_any(&tmp);
                        return Err(format!("{}: {e}", i.name));
                    }
                    let path = self.cache.commit(room, scope, &i.url, &l.version, &tmp, l.bytes());
                    (path.map_err(|e| format!("{}: {e}", i.name))?, false, scope)
                }
            };
            let staged_s = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
            let input =
                Input { bytes: Some(l.bytes()), cache_hit: Some(hit), staged_s: Some(staged_s), ..i.clone() };
            if let Some(m) = &self.metrics {
                m.observe(&input);
            }
            results.push(input);
            let path = path.display().to_string();
            staged.push(Staged {
                name: i.name.clone(),
                scope: scope.to_owned(),
                path,
                url: i.url.clone(),
                version: l.version.clone(),
            });
        }
        Ok((results, staged))
    }

    /// The environment naming `a`'s inputs (`GANTRY_INPUT_<NAME>`), once each is in the cache
    /// (staged now, with `secret`, when it was not staged ahead); pins them until
    /// [`Stager::release`].
    pub async fn inputs_for(&self, a: &Assignment, secret: &Secret) -> Result<Vec<(String, String)>, String> {
        let ahead = lock(&self.tasks).get(&a.job_id).and_then(|t| lock(&t.progress).finished.clone());
        let ahead = ahead.map(|f| f.1).or_else(|| lock(&self.ready).remove(&a.job_id));
        let staged = match ahead {
            Some(staged) => staged,
            None => {
                let order = StageOrder {
                    job_id: a.job_id,
                    team: a.team.clone(),
                    inputs: a.inputs.clone(),
                    secret: secret.clone(),
                    public: Vec::new(),
                    image: None,
                    registry_login: None,
                };
                let progress = Mutex::new(Progress::default());
                self.stage_once(&order, &AtomicU64::new(0), &progress).await?.1
            }
        };
        for s in &staged {
            self.cache.pin(&s.scope, &s.url, &s.version);
        }
        let env = a
            .inputs
            .iter()
            .filter_map(|i| staged.iter().find(|s| s.name == i.name).map(|s| (i.env_name(), s.path.clone())))
            .collect();
        lock(&self.pinned).insert(a.job_id, staged);
        Ok(env)
    }

    /// Job `id` ended: its inputs may be evicted again.
    pub fn release(&self, id: i64) {
        if let Some(staged) = lock(&self.pinned).remove(&id) {
            for s in staged {
                self.cache.unpin(&s.scope, &s.url, &s.version);
            }
        }
    }
}

/// A task that ends when this is dropped.
#[derive(Debug)]
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reports staging and cache, applies the answer, about once a second until the task is
/// aborted (the agent registers again under a new epoch: a new loop starts).
pub async fn report_loop(
    stager: Arc<Stager>,
    images: Option<Arc<super::images::Images>>,
    client: super::Client,
    node: String,
    epoch: u64,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let cache = stager.cache().entries();
        if let Some(m) = &stager.metrics {
            m.set_cached(&cache);
        }
        let req = gantry_api::types::StagingRequest {
            node_id: node.clone(),
            epoch,
            reports: stager.reports(),
            cache,
            images: images.as_ref().map(|i| i.listing()).unwrap_or_default(),
        };
        match client.staging(&req).await {
            Ok(resp) => stager.apply(resp.orders),
            Err(e) => tracing::debug!(error = %e, "staging report failed"),
        }
    }
}

#[cfg(test)]
mod tests;
