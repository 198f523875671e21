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
}

fn read(store: &dyn Store) -> Result<Input, StoreError> {
    Ok(Input {
        running: store.jobs(&JobFilter { state: Some(JobState::Running), ..JobFilter::default() })?,
        gpus: store.gpus()?,
        nodes: store.nodes()?,
        policies: store.idle_policies()?,
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
    let running: std::collections::HashSet<JobId> = input.running.iter().map(|j| j.id).collect();
    tracks.retain(|id, _| running.contains(id));
    let nodes: HashMap<&str, &Node> = input.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let gpus: HashMap<&str, &Gpu> = input.gpus.iter().map(|g| (g.info.uuid.as_str(), g)).collect();
    for job in
        input.running.iter().filter(|j| j.gang.is_none() && j.stop.is_none() && !j.gpu_uuids.is_empty())
    {
        let track = tracks.entry(job.id).or_default();
        if track.attempt != job.attempt {
            *track = Track { attempt: job.attempt, ..Track::default() };
        }
        let policy = policy_of(&input.policies, &job.team);
        if let Some(percent) = utilisation(job, &nodes, &gpus, fresh_after) {
            track.samples.push(UtilSample { at_ms: now, percent });
        }
        let verdict = idle::decide(&policy, &track.samples, track.warned, now, max_gap);
        idle::trim(&policy, &mut track.samples, KEEP);
        if track.samples.is_empty() {
            track.warned = false;
        }
        let (action, evidence) = match verdict {
            Verdict::Leave => continue,
            Verdict::Warn(e) => ("warn", e),
            Verdict::Act(a, e) => (a.as_str(), e),
        };
        let evidence = format!(
            "below {}% for {} s: {} samples, at most {:.1}%",
            policy.below_percent,
            evidence.idle_s(),
            evidence.samples,
            evidence.max_percent
        );
        match app.dispatch(Command::Idle { job: job.id, action: action.to_owned(), evidence }).await {
            Ok(_) => {}
            Err(e) if e.is_stale() => {
                tracing::debug!(why = %e, job = job.id, "idle action refused by the store")
            }
            Err(e) => return Err(e),
        }
        if action == "warn" {
            track.warned = true;
        } else {
            tracks.remove(&job.id);
        }
    }
    Ok(())
}

/// The team's policy for batch jobs, else the default.
fn policy_of(policies: &[gantry_api::idle::IdlePolicyView], team: &str) -> IdlePolicy {
    policies
        .iter()
        .find(|p| p.team == team && p.kind == "batch")
        .and_then(|p| {
            Some(IdlePolicy {
                warn_after_s: p.warn_after_s,
                act_after_s: p.act_after_s,
                below_percent: p.below_percent,
                action: idle::IdleAction::parse(&p.action)?,
            })
        })
        .unwrap_or(IdlePolicy::BATCH)
}

/// The busiest of the job's GPUs now, from their latest samples; none when its node is not
/// reporting or a GPU has no reading.
fn utilisation(
    job: &Job,
    nodes: &HashMap<&str, &Node>,
    gpus: &HashMap<&str, &Gpu>,
    fresh_after: i64,
) -> Option<f64> {
    let node = nodes.get(job.node_id.as_deref()?)?;
    if node.state != NodeState::Ready || node.last_heartbeat < fresh_after {
        return None;
    }
    let mut busiest = 0.0f64;
    for uuid in &job.gpu_uuids {
        let gpu = gpus.get(uuid.as_str())?;
        let percent = gpu.sample.as_ref()?.get("sample")?.get("gpu_util_percent")?.as_f64()?;
        busiest = busiest.max(percent);
    }
    Some(busiest)
}
