//! One simulated replica: continuous batching with chunked prefill, as vLLM schedules it.
//!
//! A replica holds at most `kv_seqs` sequences in its batch; further requests the gateway sent
//! wait in the replica's own queue. Each iteration decodes one token for every sequence past its
//! prefill and fills the rest of a [`CHUNK_TOKENS`] budget with prefill chunks, oldest first. Its
//! duration is the profile's `T = α + β·P + γ·Σp² + δ·D + ε·K`. A sequence's first token comes
//! with the iteration that finishes its prefill (that instant is its TTFT); it is done after
//! `generated − 1` more decode iterations.

use std::collections::VecDeque;

use super::profile::{CHUNK_TOKENS, Profile};

/// Where a replica is in its life.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// Loading; ready at this time.
    Starting(f64),
    /// Serving.
    Ready,
    /// No new requests; stops when empty.
    Draining,
    /// Gone, at this time.
    Stopped(f64),
}

#[derive(Debug, Clone)]
struct Seq {
    request: usize,
    prompt: u32,
    prefilled: u32,
    left: u32,
    context: u32,
}

/// What an iteration produced for the engine to record.
#[derive(Debug, Default)]
pub struct Emitted {
    /// Requests whose first token came at the iteration's end.
    pub first_tokens: Vec<usize>,
    /// Requests finished at the iteration's end.
    pub finished: Vec<usize>,
}

/// A replica and its batch.
#[derive(Debug, Clone)]
pub struct Replica {
    /// Its life phase.
    pub phase: Phase,
    /// When it was started (GPU time counts from here).
    pub started_s: f64,
    /// End of the iteration in progress, if one is.
    pub busy_until: Option<f64>,
    /// Seconds spent iterating (for utilisation).
    pub busy_s: f64,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    plan: Vec<(usize, u32)>,
}

impl Replica {
    /// A replica started at `now`, ready after `cold_start_s` (0: ready at once).
    pub fn new(now: f64, cold_start_s: f64) -> Self {
        let phase = if cold_start_s > 0.0 { Phase::Starting(now + cold_start_s) } else { Phase::Ready };
        Self {
            phase,
            started_s: now,
            busy_until: None,
            busy_s: 0.0,
            waiting: VecDeque::new(),
            running: Vec::new(),
            plan: Vec::new(),
        }
    }

    /// Requests sent here and not finished.
    pub fn outstanding(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    /// Accepts a request from the gateway.
    pub fn admit(&mut self, request: usize, prompt: u32, generated: u32) {
        self.waiting.push_back(Seq { request, prompt, prefilled: 0, left: generated, context: prompt });
    }

    /// Starts an iteration at `now` if idle with work; returns when it ends.
    pub fn start(&mut self, now: f64, profile: &Profile) -> Option<f64> {
        if self.busy_until.is_some() || !matches!(self.phase, Phase::Ready | Phase::Draining) {
            return None;
        }
        while self.running.len() < profile.kv_seqs as usize {
            let Some(seq) = self.waiting.pop_front() else { break };
            self.running.push(seq);
        }
        if self.running.is_empty() {
            return None;
        }
        let (mut decoding, mut kv, mut prefill, mut prefill_sq) = (0usize, 0u64, 0u64, 0.0f64);
        self.plan.clear();
        for s in self.running.iter().filter(|s| s.prefilled >= s.prompt) {
            decoding += 1;
            kv += u64::from(s.context);
        }
        let mut budget = u64::from(CHUNK_TOKENS).saturating_sub(decoding as u64);
        for (i, s) in self.running.iter().enumerate() {
            if s.prefilled < s.prompt && budget > 0 {
                let chunk = u64::from(s.prompt - s.prefilled).min(budget);
                budget -= chunk;
                prefill += chunk;
                prefill_sq += (chunk * chunk) as f64;
                self.plan.push((i, chunk as u32));
            }
        }
        let t = profile.iteration_s(prefill, prefill_sq, decoding, kv);
        self.busy_until = Some(now + t);
        self.busy_s += t;
        self.busy_until
    }

    /// Ends the iteration in progress: advances every sequence in it.
    pub fn finish(&mut self) -> Emitted {
        self.busy_until = None;
        let mut out = Emitted::default();
        let mut in_plan = vec![false; self.running.len()];
        for &(i, chunk) in &self.plan {
            in_plan[i] = true;
            let s = &mut self.running[i];
            s.prefilled += chunk;
            if s.prefilled >= s.prompt {
                out.first_tokens.push(s.request);
                s.left -= 1;
            }
        }
        for (i, s) in self.running.iter_mut().enumerate() {
            if !in_plan[i] && s.prefilled >= s.prompt {
                s.left = s.left.saturating_sub(1);
                s.context += 1;
            }
        }
        self.running.retain(|s| {
            let done = s.prefilled >= s.prompt && s.left == 0;
            if done {
                out.finished.push(s.request);
            }
            !done
        });
        self.plan.clear();
        out
    }
}
