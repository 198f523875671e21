//! Where the pending jobs with declared inputs are being staged (issue 22): the scheduler's
//! `Stage` decisions and the agents' reports, between passes.
//!
//! The core decides (`gantry_core::sched::Stage`: stage job J on node N before placing it);
//! this table remembers the decision and what N's agent says of it (`POST /v1/agent/staging`,
//! about once a second), and hands both back to the next pass as the snapshot's `staging`. It
//! is the leader's memory, not the store's: a staging is cheap to order again (a new leader
//! orders it anew, and the node's cache makes the second copy a cache hit), and progress
//! changes far too often to be written down. What staging found of each input (bytes, cache
//! hit, time) is written to the job once, when it is done, and is what `gantry job N -o json`
//! shows. The nodes' cache listings (`gantry cache`) are kept here too, as last reported.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use gantry_api::inputs::{CacheEntry, Input, StageReport};
use gantry_core::sched::{Cached, DEFAULT_BANDWIDTH_BPS, Locality, Stage, Staging as CoreStaging};
use gantry_store::{Job, JobId};

/// One job's staging.
#[derive(Debug, Clone)]
struct Entry {
    node: String,
    team: String,
    inputs: Vec<Input>,
    secret: Option<String>,
    image: Option<gantry_api::model::JobImage>,
    report: Option<StageReport>,
    /// Its results were written to the job.
    recorded: bool,
}

/// The table (see the module documentation).
#[derive(Debug, Default)]
pub struct Staging {
    jobs: Mutex<HashMap<JobId, Entry>>,
    caches: Mutex<HashMap<String, Vec<CacheEntry>>>,
    /// Each node's container images, as last reported.
    images: Mutex<HashMap<String, Vec<gantry_api::types::NodeImage>>>,
    /// Each node's last reported copy rate, bytes a second.
    rates: Mutex<HashMap<String, u64>>,
}

/// What a node must stage.
#[derive(Debug, Clone)]
pub struct Order {
    /// The job.
    pub job: JobId,
    /// Its team.
    pub team: String,
    /// Its inputs.
    pub inputs: Vec<Input>,
    /// The name of the secret its inputs are read with.
    pub secret: Option<String>,
    /// Its image (with the name of its registry secret).
    pub image: Option<gantry_api::model::JobImage>,
}

impl Staging {
    /// Remembers a `Stage` decision for `job` (replacing one on another node).
    pub fn order(&self, stage: &Stage, job: &Job) {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        if jobs.get(&stage.job_id).is_some_and(|e| e.node == stage.node_id) {
            return;
        }
        let entry = Entry {
            node: stage.node_id.clone(),
            team: job.team.clone(),
            inputs: job.inputs.clone(),
            secret: job.input_secret.clone(),
            image: job.image.clone(),
            report: None,
            recorded: false,
        };
        jobs.insert(stage.job_id, entry);
    }

    /// The stagings ordered of `node`.
    pub fn orders(&self, node: &str) -> Vec<Order> {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<Order> = jobs
            .iter()
            .filter(|(_, e)| e.node == node)
            .map(|(id, e)| Order {
                job: *id,
                team: e.team.clone(),
                inputs: e.inputs.clone(),
                secret: e.secret.clone(),
                image: e.image.clone(),
            })
            .collect();
        out.sort_by_key(|o| o.job);
        out
    }

    /// Takes `node`'s reports (of stagings ordered of it; others are ignored) and its cache
    /// listing. Returns whether a pass should look again (a staging finished, failed or
    /// recovered: its reason or its place changes) and the finished stagings whose results are
    /// to be written to their jobs.
    pub fn report(
        &self,
        node: &str,
        reports: Vec<StageReport>,
        cache: Vec<CacheEntry>,
    ) -> (bool, Vec<(JobId, Vec<Input>)>) {
        let (mut wake, mut finished) = (false, Vec::new());
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let rate = reports.iter().map(|r| r.rate_bps).max().unwrap_or(0);
        if rate > 0 {
            self.rates.lock().unwrap_or_else(PoisonError::into_inner).insert(node.to_owned(), rate);
        }
        for r in reports {
            let Some(e) = jobs.get_mut(&r.job_id).filter(|e| e.node == node) else { continue };
            let before = e.report.as_ref().map(|b| (b.done, b.error.is_some()));
            wake |= before != Some((r.done, r.error.is_some()));
            if r.done && !e.recorded {
                e.recorded = true;
                finished.push((r.job_id, r.inputs.clone()));
            }
            e.report = Some(r);
        }
        drop(jobs);
        let cache = cache.into_iter().map(|c| CacheEntry { node: node.to_owned(), ..c }).collect();
        self.caches.lock().unwrap_or_else(PoisonError::into_inner).insert(node.to_owned(), cache);
        (wake, finished)
    }

    /// The snapshot's `staging` for the pending jobs `pending`; every other staging is
    /// forgotten (its job started, ended or was cancelled).
    pub fn snapshot(&self, pending: &dyn Fn(JobId) -> bool) -> HashMap<JobId, CoreStaging> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        jobs.retain(|id, _| pending(*id));
        jobs.iter()
            .map(|(id, e)| {
                let done = e.report.as_ref().is_some_and(|r| r.done);
                let reason = e.report.as_ref().map(|r| r.reason(&e.node)).unwrap_or_default();
                (*id, CoreStaging { node: e.node.clone(), done, reason })
            })
            .collect()
    }

    /// What placement knows of the data (`gantry_core::sched::Locality`): every node's cache
    /// as last reported, and the stage bandwidth, the median of the nodes' last copy rates (the
    /// core's default before any copy was seen).
    pub fn locality(&self) -> Locality {
        let cached = self
            .caches()
            .into_iter()
            .map(|c| Cached {
                node: c.node,
                team: c.team,
                url: c.url,
                version: c.version,
                bytes: c.bytes,
                last_used_ms: c.last_used_ms,
            })
            .collect();
        let mut rates: Vec<u64> =
            self.rates.lock().unwrap_or_else(PoisonError::into_inner).values().copied().collect();
        rates.sort_unstable();
        let bandwidth_bps = rates.get(rates.len() / 2).copied().unwrap_or(DEFAULT_BANDWIDTH_BPS);
        Locality { cached, bandwidth_bps, ..Locality::default() }
    }

    /// Records the images `node` holds, as it reported them.
    pub fn report_images(&self, node: &str, images: Vec<gantry_api::types::NodeImage>) {
        let images =
            images.into_iter().map(|i| gantry_api::types::NodeImage { node: node.to_owned(), ..i }).collect();
        self.images.lock().unwrap_or_else(PoisonError::into_inner).insert(node.to_owned(), images);
    }

    /// Every node's images, by node and reference.
    pub fn images(&self) -> Vec<gantry_api::types::NodeImage> {
        let images = self.images.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<_> = images.values().flatten().cloned().collect();
        out.sort_by(|a, b| (&a.node, &a.reference).cmp(&(&b.node, &b.reference)));
        out
    }

    /// Every node's cache, as last reported, by node, team and URL.
    pub fn caches(&self) -> Vec<CacheEntry> {
        let caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<CacheEntry> = caches.values().flatten().cloned().collect();
        out.sort_by(|a, b| (&a.node, &a.team, &a.url).cmp(&(&b.node, &b.team, &b.url)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(job_id: JobId, done: bool, error: Option<&str>) -> StageReport {
        StageReport {
            job_id,
            done,
            bytes_done: 1,
            bytes_total: 2,
            rate_bps: 0,
            error: error.map(str::to_owned),
            inputs: vec![Input { bytes: Some(2), ..Input::new("d", "s3://bucket/d") }],
        }
    }

    #[test]
    fn a_node_reports_only_the_stagings_ordered_of_it_and_a_finished_one_is_recorded_once() {
        let t = Staging::default();
        let job = Job {
            id: 7,
            team: "ml".into(),
            inputs: vec![Input::new("d", "s3://bucket/d")],
            ..Job::default()
        };
        t.order(&Stage { job_id: 7, node_id: "n1".into(), at: 0, ahead: false }, &job);
        assert_eq!(t.orders("n1").len(), 1);
        assert!(t.orders("n2").is_empty());
        let (wake, finished) = t.report("n2", vec![report(7, true, None)], vec![]);
        assert!(!wake && finished.is_empty(), "another node's report is ignored");
        let (wake, finished) = t.report("n1", vec![report(7, false, Some("connection refused"))], vec![]);
        assert!(wake && finished.is_empty());
        let snap = t.snapshot(&|_| true);
        assert!(snap[&7].reason.contains("failed, retrying: connection refused"), "{snap:?}");
        let (wake, finished) = t.report("n1", vec![report(7, true, None)], vec![]);
        assert!(wake && finished.len() == 1);
        let (_, finished) = t.report("n1", vec![report(7, true, None)], vec![]);
        assert!(finished.is_empty(), "recorded once");
        assert!(t.snapshot(&|_| true)[&7].done);
        assert!(t.snapshot(&|_| false).is_empty() && t.orders("n1").is_empty(), "forgotten once started");
    }
}
