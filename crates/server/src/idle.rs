//! The idle reconciler: feeds each running job's GPU utilisation, as its agent reports it in
//! heartbeats, to the core's decision ([`gantry_core::idle::decide`]) under its team's policy
//! for its kind (admin-set, else [`IdlePolicy::BATCH`]), and carries out what it says through
//! the dispatcher: a warning (an event), a requeue (the preemption path: retries unspent) or a
//! cancel, each an event and an audit row naming the samples.
//!
//! Every [`POLL`] it reads the running jobs, the GPUs' latest samples and the nodes; a job's
//! sample is the busiest of its GPUs (`gpu_util_percent`; the agent reports no SM-active
//! reading yet). A job on a node whose heartbeat is older than the heartbeat timeout gets no
//! sample, so the gap restarts its idle stretch rather than counting as idle time. Gangs are
//! left alone (one idle worker does not make its gang idle; stopping the gang is the owner's
//! call). What it keeps per job is its samples since it was last busy and whether it was warned;
//! a job that ends or starts a new attempt starts afresh.
//!
//! Service replicas follow their team's `service` policy ([`IdlePolicy::SERVICE`] by default)
//! and only while the controller does not see them ready: a ready replica with idle GPUs is
//! waiting for requests (scaling to zero is the service's own setting), but one that holds GPUs
//! and never becomes ready (or stopped being ready) serves nobody. Its action is always to stop
//! it as failed (`fail`), whatever the policy names, so that its service counts the failure,
//! backs off and says why; a `lend` policy only warns.
//!
//! Under `lend` the job keeps running and its GPUs are lent (the store's loans; the scheduling
//! pass places preemptible jobs there). A GPU then runs two jobs, so the GPU's utilisation says
//! nothing about the owner: a lend needs the agent's reading of each job's own processes (the
//! `jobs` map of a GPU's sample, job id to percent; the simulated fleet gives it, NVML's
//! per-process utilisation is not read yet, so on NVML a `lend` policy only warns). Every poll
//! the owner's own readings since the loan go to [`idle::give_back`]; the first busy one gives
//! the GPUs back (the borrowers are preempted in the same transaction), as does an owner that
//! no longer runs. With [`POLL`] at 2 s and the agent's heartbeat, that is well within 30 s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gantry_core::idle::{self, IdlePolicy, UtilSample, Verdict};
use gantry_store::{Gpu, Job, JobFilter, JobId, JobState, Node, NodeState, Store, StoreError};
use tokio::sync::watch;

use crate::app::{App, now_ms};
use crate::command::{Command, CommandError};

/// How often utilisation is read.
pub const POLL: Duration = Duration::from_secs(2);
/// Most samples kept per job (beyond: the first and the latest, see [`idle::trim`]).
const KEEP: usize = 16_384;

#[derive(Debug, Default)]
struct Track {
    attempt: u32,
    samples: Vec<UtilSample>,
    warned: bool,
    /// The owner's own readings since it lent its GPUs.
    lent: Vec<UtilSample>,
}

/// Runs until `stop` turns true.
pub async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut tracks: HashMap<JobId, Track> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(POLL) => {}
        }
        if *stop.borrow() || stop.has_changed().is_err() {
            break;
        }
        // The leader's reconciler (one replica warns, lends and requeues, not each of them); a
        // follower's tracks would go stale, so the next leadership starts afresh.
        if !app.leadership.leads() {
            tracks.clear();
            continue;
        }
        if let Err(e) = pass(&app, &mut tracks).await {
            tracing::warn!(error = %e, "idle pass failed");
        }
    }
}

struct Input {
    running: Vec<Job>,
    gpus: Vec<Gpu>,
    nodes: Vec<Node>,
    policies: Vec<gantry_api::idle::IdlePolicyView>,
    loans: Vec<gantry_api::idle::Loan>,
}

fn read(store: &dyn Store) -> Result<Input, StoreError> {
    Ok(Input {
        running: store.jobs(&JobFilter { state: Some(JobState::Running), ..JobFilter::default() })?,
        gpus: store.gpus()?,
        nodes: store.nodes()?,
        policies: store.idle_policies()?,
        loans: store.loans()?,
    })
}

async fn pass(app: &Arc<App>, tracks: &mut HashMap<JobId, Track>) -> Result<(), CommandError> {
    let store = Arc::clone(&app.store);
    let input = tokio::task::spawn_blocking(move || read(&*store))
        .await
        .map_err(|e| CommandError::Aborted(e.to_string()))??;
    let now = now_ms();
    let fresh_after = now - i64::try_from(app.config.heartbeat_timeout.as_millis()).unwrap_or(i64::MAX);
    let max_gap = i64::try_from((POLL * 5 + app.config.heartbeat_timeout).as_millis()).unwrap_or(i64::MAX);
    let running: HashMap<JobId, &Job> = input.running.iter().map(|j| (j.id, j)).collect();
    tracks.retain(|id, _| running.contains_key(id));
    let nodes: HashMap<&str, &Node> = input.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let gpus: HashMap<&str, &Gpu> = input.gpus.iter().map(|g| (g.info.uuid.as_str(), g)).collect();
    let readings = Readings { nodes: &nodes, gpus: &gpus, fresh_after };
    let mut owners: Vec<(JobId, u32)> = input.loans.iter().map(|l| (l.owner, l.owner_attempt)).collect();
    owners.sort_unstable();
    owners.dedup();
    let borrowers: std::collections::HashSet<JobId> = input.loans.iter().filter_map(|l| l.borrower).collect();
    for (owner, attempt) in owners {
        let Some(job) = running.get(&owner).filter(|j| j.attempt == attempt && j.stop.is_none()) else {
            let why = "the owner no longer runs".to_owned();
            act(app, owner, "give-back", why).await?;
            continue;
        };
        let policy = policy_of(&input.policies, &job.team, "batch");
        let track = tracks.entry(owner).or_default();
        if let Some(percent) = readings.own(job) {
            track.lent.push(UtilSample { at_ms: now, percent });
        }
        if let Some(e) = idle::give_back(&policy, &track.lent) {
            let why = format!(
                "its processes use its GPUs again: {} samples, at most {:.1}%",
                e.samples, e.max_percent
            );
            act(app, owner, "give-back", why).await?;
            tracks.remove(&owner);
        }
    }
    let lent: std::collections::HashSet<JobId> = input.loans.iter().map(|l| l.owner).collect();
    for job in input.running.iter().filter(|j| {
        j.gang.is_none()
            && j.stop.is_none()
            && !j.gpu_uuids.is_empty()
            && !lent.contains(&j.id)
            && !borrowers.contains(&j.id)
    }) {
        let track = tracks.entry(job.id).or_default();
        if track.attempt != job.attempt {
            *track = Track { attempt: job.attempt, ..Track::default() };
        }
        let replica = job.service.is_some();
        if replica && app.service_status.replica_ready(job.id) != Some(false) {
            // Ready (or not yet seen by the controller): serving, or about to be judged.
            *track = Track { attempt: job.attempt, ..Track::default() };
            continue;
        }
        let policy = policy_of(&input.policies, &job.team, if replica { "service" } else { "batch" });
        let own = readings.own(job);
        if let Some(percent) = own.or_else(|| readings.gpu(job)) {
            track.samples.push(UtilSample { at_ms: now, percent });
        }
        let verdict = idle::decide(&policy, &track.samples, track.warned, now, max_gap);
        idle::trim(&policy, &mut track.samples, KEEP);
        if track.samples.is_empty() {
            track.warned = false;
        }
        let (action, evidence) = match verdict {
            Verdict::Leave => continue,
            // Without the job's own reading a lent GPU's owner could not be told apart from
            // its borrower: the job is only warned.
            Verdict::Act(idle::IdleAction::Lend, e) if own.is_none() || replica => ("warn", e),
            Verdict::Warn(e) => ("warn", e),
            Verdict::Act(_, e) if replica => ("fail", e),
            Verdict::Act(a, e) => (a.as_str(), e),
        };
        if action == "warn" && track.warned {
            continue;
        }
        let evidence = format!(
            "below {}% for {} s: {} samples, at most {:.1}%",
            policy.below_percent,
            evidence.idle_s(),
            evidence.samples,
            evidence.max_percent
        );
        act(app, job.id, action, evidence).await?;
        if action == "warn" {
            track.warned = true;
        } else {
            tracks.remove(&job.id);
        }
    }
    Ok(())
}

/// Dispatches one idle action; one the store refuses (the job moved on) is not an error.
async fn act(app: &Arc<App>, job: JobId, action: &str, evidence: String) -> Result<(), CommandError> {
    match app.dispatch(Command::Idle { job, action: action.to_owned(), evidence }).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_stale() => {
            tracing::debug!(why = %e, job, action, "idle action refused by the store");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The team's policy for jobs of `kind` (`batch`, `service`), else the kind's default.
fn policy_of(policies: &[gantry_api::idle::IdlePolicyView], team: &str, kind: &str) -> IdlePolicy {
    let default = if kind == "service" { IdlePolicy::SERVICE } else { IdlePolicy::BATCH };
    policies
        .iter()
        .find(|p| p.team == team && p.kind == kind)
        .and_then(|p| {
            Some(IdlePolicy {
                warn_after_s: p.warn_after_s,
                act_after_s: p.act_after_s,
                below_percent: p.below_percent,
                action: idle::IdleAction::parse(&p.action)?,
            })
        })
        .unwrap_or(default)
}

/// The latest GPU samples of nodes that report.
struct Readings<'a> {
    nodes: &'a HashMap<&'a str, &'a Node>,
    gpus: &'a HashMap<&'a str, &'a Gpu>,
    fresh_after: i64,
}

impl Readings<'_> {
    /// The busiest of the job's GPUs now; none when its node is not reporting or a GPU has no
    /// reading.
    fn gpu(&self, job: &Job) -> Option<f64> {
        self.busiest(job, |sample| sample.get("sample")?.get("gpu_util_percent")?.as_f64())
    }

    /// The busiest reading of the job's own processes on its GPUs (the agent's `jobs` map of
    /// each GPU's sample; a job with no process there reads 0); none where the agent does not
    /// tell jobs apart.
    fn own(&self, job: &Job) -> Option<f64> {
        let id = job.id.to_string();
        self.busiest(job, |sample| {
            let jobs = sample.get("jobs")?.as_object()?;
            Some(jobs.get(&id).and_then(serde_json::Value::as_f64).unwrap_or(0.0))
        })
    }

    fn busiest(&self, job: &Job, read: impl Fn(&serde_json::Value) -> Option<f64>) -> Option<f64> {
        let node = self.nodes.get(job.node_id.as_deref()?)?;
        if node.state != NodeState::Ready || node.last_heartbeat < self.fresh_after {
            return None;
        }
        let mut busiest = 0.0f64;
        for uuid in &job.gpu_uuids {
            let gpu = self.gpus.get(uuid.as_str())?;
            busiest = busiest.max(read(gpu.sample.as_ref()?)?);
        }
        Some(busiest)
    }
}
