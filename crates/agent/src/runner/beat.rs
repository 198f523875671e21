//! The heartbeat exchange with the server, one heartbeat in flight at a time.
//!
//! Each heartbeat asks the server to hold its answer for up to the heartbeat interval while the
//! node's assignments are still the ones the agent applied last (`wait_ms`, and `known`: the
//! `version` of the last answer). A server that holds heartbeats answers as soon as a command
//! changes the node's work (a placement, a cancel, a preemption), and the agent sends the next
//! heartbeat as soon as it has applied the answer: new work starts without waiting for a poll,
//! and the server still hears from the node at least every interval. A server that does not
//! (an older one) answers at once without a `version`; the agent then sends a heartbeat per
//! tick of its interval, as agents did before the hold.
//!
//! The exchange is a future the agent's loop selects on beside its ticks and its jobs' exits,
//! so that time limits, stop grace periods and exits are handled while a heartbeat is held.
//! Heartbeats stay sequential: an answer is applied before the next report is built, so a
//! report never contradicts an answer the agent has already acted on. A job that ends while a
//! heartbeat is held would be reported only when the hold passes, and its GPUs would stay taken
//! until then (a quarter of a second with the default interval, for every job queued behind
//! it): the agent then asks the server to answer the held heartbeat at once
//! ([`Beats::wake`], `POST /v1/agent/wake`), and the next heartbeat carries the exit.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use gantry_api::model::Heartbeat;
use gantry_api::types::HeartbeatResponse;

use super::error::AgentError;
use super::jobs::Jobs;
use super::meter::InputMeter;
use super::ship::Shipper;
use super::{Client, Gpus};

/// A heartbeat sent and its answer.
#[derive(Debug)]
pub struct Beat {
    /// What was sent.
    pub heartbeat: Heartbeat,
    /// What the server answered.
    pub answer: Result<HeartbeatResponse, AgentError>,
}

type InFlight = Pin<Box<dyn Future<Output = Beat> + Send>>;

/// The heartbeat in flight, if any, and what the server last said about holding.
pub struct Beats {
    client: Client,
    wait: Duration,
    known: Option<String>,
    in_flight: Option<InFlight>,
    meter: InputMeter,
}

impl std::fmt::Debug for Beats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Beats")
            .field("wait", &self.wait)
            .field("known", &self.known)
            .field("in_flight", &self.in_flight.is_some())
            .finish_non_exhaustive()
    }
}

impl Beats {
    /// No heartbeat in flight yet; each may be held up to `wait` (the heartbeat interval).
    pub fn new(client: Client, wait: Duration) -> Self {
        Self { client, wait, known: None, in_flight: None, meter: InputMeter::default() }
    }

    /// Whether no heartbeat is in flight.
    pub fn idle(&self) -> bool {
        self.in_flight.is_none()
    }

    /// Whether the server holds heartbeats (its last answer had a version): then the next
    /// heartbeat goes out as soon as an answer is applied, else on the next tick.
    pub fn held(&self) -> bool {
        self.known.is_some()
    }

    /// Collects the GPUs (enforcing slice grants on what it finds), reports them and the jobs,
    /// and sends the heartbeat.
    pub fn send(
        &mut self,
        node_id: &str,
        epoch: u64,
        gpus: &Gpus,
        jobs: &mut Jobs,
        shipper: Option<&mut Shipper>,
    ) {
        let (mut reports, processes) = gpus.collect();
        jobs.enforce_grants(&processes);
        jobs.attribute(&mut reports, &processes);
        self.meter.judge(&mut reports, jobs, gpus);
        let attempts = jobs.attempts();
        let shipping = shipper.is_some();
        let (logs, drained) = match shipper {
            Some(s) => {
                s.retain(&attempts);
                s.collect(&attempts)
            }
            None => (Vec::new(), Default::default()),
        };
        let hold = |job| shipping && !drained.contains(&job);
        let heartbeat =
            Heartbeat { node_id: node_id.to_owned(), epoch, gpus: reports, jobs: jobs.reports(&hold), logs };
        let (client, wait, known) = (self.client.clone(), self.wait, self.known.clone());
        self.in_flight = Some(Box::pin(async move {
            let answer = client.heartbeat_waiting(&heartbeat, wait, known.as_deref()).await;
            Beat { heartbeat, answer }
        }));
    }

    /// Has the server answer the heartbeat it holds now, when it holds one: the agent has news
    /// (a job ended) that the next heartbeat carries, and with it the room the job frees. Sent
    /// beside the held heartbeat, not in its place, so heartbeats stay sequential; a failed
    /// wake costs only the wait it would have saved.
    pub fn wake(&self, node_id: &str) {
        if self.in_flight.is_none() || self.known.is_none() {
            return;
        }
        let (client, node) = (self.client.clone(), node_id.to_owned());
        tokio::spawn(async move {
            if let Err(e) = client.wake(&node).await {
                tracing::debug!(error = %e, "waking the held heartbeat failed; the report goes with the next one");
            }
        });
    }

    /// The answer to the heartbeat in flight; never resolves while none is. Cancel-safe: the
    /// heartbeat stays in flight when another branch of a `select!` wins.
    pub async fn answered(&mut self) -> Beat {
        let Some(in_flight) = self.in_flight.as_mut() else {
            return std::future::pending().await;
        };
        let beat = in_flight.await;
        self.in_flight = None;
        if let Ok(answer) = &beat.answer {
            self.known.clone_from(&answer.version);
        }
        beat
    }
}
