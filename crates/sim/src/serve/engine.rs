//! The event loop: arrivals through the gateway to replicas, the autoscaler on its sync.
//!
//! The gateway is the one the server runs (issue 19, point 2): a request goes to a ready replica
//! below its concurrency cap, the less loaded of two picked at random (least outstanding
//! requests with two random choices); when every replica is full it waits in a bounded FIFO
//! queue, and when the queue is full it is refused (it counts as a miss). Every second the loop
//! takes a [`Sample`] as the gateway would; every `sync_s` it asks the policy for a
//! [`Decision`] and applies it: a scale-up first takes back draining replicas, then starts new
//! ones (each a cold start, holding its GPUs while it loads); a scale-down first cancels
//! replicas still starting, then drains the least loaded ready ones (their requests finish).
//! Events at the same instant are handled in one fixed order, and the only randomness is the
//! seeded two-choice pick, so a seed gives the same run.

use std::collections::VecDeque;

use gantry_core::autoscale::{Autoscaler, Decision, Input, Sample};
use gantry_core::{RandomSource, SplitMix64};

use super::profile::Profile;
use super::replica::{Phase, Replica};
use super::trace::RequestRow;

/// How one run is set up.
#[derive(Debug, Clone, Copy)]
pub struct RunConfig {
    /// Arrival times are divided by this.
    pub rate_scale: f64,
    /// Replicas ready at time 0.
    pub initial: u32,
    /// Requests one replica takes from the gateway at once.
    pub max_concurrency: u32,
    /// Requests the gateway queue holds.
    pub queue_cap: usize,
    /// Seed of the two-choice balancer.
    pub seed: u64,
    /// Replay the trace once before the measured pass, so that every policy starts measured
    /// time with the history (windows, delays, replicas) it built on the same load.
    pub warmup: bool,
}

/// One point of the time series, per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Seconds.
    pub t: f64,
    /// Arrivals in the last second.
    pub rps: f64,
    /// Requests at replicas.
    pub in_flight: f64,
    /// Requests in the gateway queue.
    pub queue: f64,
    /// Replicas starting or ready.
    pub replicas: u32,
    /// Replicas ready.
    pub ready: u32,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Time to first token per request, seconds (infinite when refused).
    pub ttft: Vec<f64>,
    /// End-to-end latency per request, seconds (infinite when refused).
    pub e2e: Vec<f64>,
    /// Seconds of replica life (starting, ready or draining), summed.
    pub replica_s: f64,
    /// GPUs per replica.
    pub gpus: u32,
    /// Replicas started after time 0.
    pub cold_starts: u32,
    /// Decisions that changed the count.
    pub decisions: Vec<Decision>,
    /// Per-second series.
    pub series: Vec<Point>,
}

struct World<'a> {
    profile: &'a Profile,
    cfg: RunConfig,
    replicas: Vec<Replica>,
    queue: VecDeque<usize>,
    rng: SplitMix64,
    requests: &'a [RequestRow],
    ttft: Vec<f64>,
    e2e: Vec<f64>,
    arrival: Vec<f64>,
    recent_ttft: VecDeque<(f64, f64)>,
}

/// The least simulated time the warm-up lasts (see [`warmup_passes`]).
pub const WARMUP_MIN_S: f64 = 1800.0;

/// Replays `requests` against replicas of `profile` under `policy`.
pub fn simulate(requests: &[RequestRow], profile: &Profile, policy: Autoscaler, cfg: RunConfig) -> RunResult {
    if !cfg.warmup || requests.is_empty() {
        return replay(requests, profile, policy, cfg, 0);
    }
    let span = requests.last().map_or(0.0, |r| r.at_s);
    let offset = span + span / requests.len() as f64;
    let passes = warmup_passes(offset / cfg.rate_scale);
    let mut repeated = Vec::with_capacity(requests.len() * (passes + 1));
    for pass in 0..=passes {
        let shift = offset * pass as f64;
        repeated.extend(requests.iter().map(|r| RequestRow { at_s: r.at_s + shift, ..*r }));
    }
    replay(&repeated, profile, policy, cfg, requests.len() * passes)
}

/// Passes of a trace lasting `period_s` (after the rate scale) replayed before the measured
/// one: enough to last [`WARMUP_MIN_S`], at least one.
///
/// Why: every policy starts with no history (no past recommendations, no delay counters) and
/// with the same replicas; what it does in the measured pass depends on that start until its
/// longest window or delay has passed (Ray Serve's 600 s downscale delay, HPA's 300 s, Gantry's
/// three cold starts) and the replicas it asked for have started. One warm-up pass of a
/// compressed trace is shorter than that (115 s at ×30, barely one cold start of 96 s), so the
/// measured pass began in the start's transient for every policy alike: a policy that scaled
/// down in the warm-up's first seconds entered it with thousands of requests still queued.
/// Thirty minutes of the same load, repeated, let every policy reach the state this load
/// leads it to.
pub fn warmup_passes(period_s: f64) -> usize {
    if period_s <= 0.0 { 1 } else { ((WARMUP_MIN_S / period_s).ceil() as usize).max(1) }
}

/// The run of `requests`, measuring from request `measured` on (earlier ones are warm-up).
fn replay(
    requests: &[RequestRow],
    profile: &Profile,
    mut policy: Autoscaler,
    cfg: RunConfig,
    measured: usize,
) -> RunResult {
    let arrival: Vec<f64> = requests.iter().map(|r| r.at_s / cfg.rate_scale).collect();
    let from = arrival.get(measured).copied().unwrap_or(0.0);
    let n = requests.len();
    let mut w = World {
        profile,
        cfg,
        replicas: (0..cfg.initial).map(|_| Replica::new(0.0, 0.0)).collect(),
        queue: VecDeque::new(),
        rng: SplitMix64::new(cfg.seed),
        requests,
        ttft: vec![f64::NAN; n],
        e2e: vec![f64::NAN; n],
        arrival,
        recent_ttft: VecDeque::new(),
    };
    let sync = policy.sync_s().round().max(1.0) as u64;
    let (mut next, mut tick, mut resolved) = (0usize, 1u64, 0usize);
    let (mut samples, mut series, mut decisions) = (VecDeque::new(), Vec::new(), Vec::new());
    let mut arrived_since = 0.0;
    let limit = w.arrival.last().copied().unwrap_or(0.0) + 3600.0;
    let mut now = 0.0;
    while resolved < n && now < limit {
        let t_ready = w
            .replicas
            .iter()
            .filter_map(|r| if let Phase::Starting(at) = r.phase { Some(at) } else { None })
            .fold(f64::INFINITY, f64::min);
        let t_iter = w.replicas.iter().filter_map(|r| r.busy_until).fold(f64::INFINITY, f64::min);
        let t_arrive = w.arrival.get(next).copied().unwrap_or(f64::INFINITY);
        let t_tick = tick as f64;
        now = t_ready.min(t_iter).min(t_arrive).min(t_tick);
        if t_ready <= now {
            for r in w.replicas.iter_mut().filter(|r| r.phase == Phase::Starting(now)) {
                r.phase = Phase::Ready;
            }
        } else if t_iter <= now {
            resolved += w.finish_iterations(now);
        } else if t_arrive <= now {
            arrived_since += 1.0;
            if w.queue.len() >= w.cfg.queue_cap {
                w.ttft[next] = f64::INFINITY;
                w.e2e[next] = f64::INFINITY;
                resolved += 1;
            } else {
                w.queue.push_back(next);
            }
            next += 1;
        } else {
            let sample = w.sample(now, arrived_since);
            arrived_since = 0.0;
            series.push(w.point(&sample));
            samples.push_back(sample);
            while samples.front().is_some_and(|s: &Sample| s.at_s < now - 700.0) {
                samples.pop_front();
            }
            if tick % sync == 0 {
                let (current, ready) = w.counts();
                let window = samples.make_contiguous();
                let d = policy.decide(&Input { now_s: now, current, ready, window });
                if d.changes() {
                    w.apply(now, d.to);
                    decisions.push(d);
                }
            }
            tick += 1;
        }
        w.dispatch();
        w.start_iterations(now);
    }
    let replica_s = w
        .replicas
        .iter()
        .map(|r| ((if let Phase::Stopped(t) = r.phase { t } else { now }) - r.started_s.max(from)).max(0.0))
        .sum();
    let cold_starts = w.replicas.iter().filter(|r| r.started_s > 0.0 && r.started_s >= from).count() as u32;
    decisions.retain(|d: &Decision| d.at_s >= from);
    for d in &mut decisions {
        d.at_s -= from;
    }
    let series =
        series.into_iter().filter(|p: &Point| p.t >= from).map(|p| Point { t: p.t - from, ..p }).collect();
    let ttft = w.ttft.split_off(measured);
    let e2e = w.e2e.split_off(measured);
    RunResult { ttft, e2e, replica_s, gpus: profile.gpus, cold_starts, decisions, series }
}

impl World<'_> {
    fn counts(&self) -> (u32, u32) {
        let current =
            self.replicas.iter().filter(|r| matches!(r.phase, Phase::Starting(_) | Phase::Ready)).count();
        let ready = self.replicas.iter().filter(|r| r.phase == Phase::Ready).count();
        (current as u32, ready as u32)
    }

    fn finish_iterations(&mut self, now: f64) -> usize {
        let mut resolved = 0;
        for r in &mut self.replicas {
            if r.busy_until != Some(now) {
                continue;
            }
            let out = r.finish();
            for q in out.first_tokens {
                self.ttft[q] = now - self.arrival[q];
                self.recent_ttft.push_back((now, self.ttft[q]));
            }
            for q in out.finished {
                self.e2e[q] = now - self.arrival[q];
                resolved += 1;
            }
            if r.phase == Phase::Draining && r.outstanding() == 0 {
                r.phase = Phase::Stopped(now);
            }
        }
        resolved
    }

    fn dispatch(&mut self) {
        while let Some(&q) = self.queue.front() {
            let cap = self.cfg.max_concurrency as usize;
            let open: Vec<usize> = (0..self.replicas.len())
                .filter(|&i| self.replicas[i].phase == Phase::Ready && self.replicas[i].outstanding() < cap)
                .collect();
            let pick = match open.len() {
                0 => break,
                1 => open[0],
                n => {
                    let a = self.rng.index(n);
                    let b = (a + 1 + self.rng.index(n - 1)) % n;
                    let (ra, rb) = (open[a], open[b]);
                    if self.replicas[rb].outstanding() < self.replicas[ra].outstanding() { rb } else { ra }
                }
            };
            self.queue.pop_front();
            let r = &self.requests[q];
            self.replicas[pick].admit(q, r.context, r.generated);
        }
    }

    fn start_iterations(&mut self, now: f64) {
        for r in &mut self.replicas {
            r.start(now, self.profile);
        }
    }

    fn sample(&mut self, now: f64, arrived: f64) -> Sample {
        while self.recent_ttft.front().is_some_and(|x| x.0 < now - 15.0) {
            self.recent_ttft.pop_front();
        }
        let mut recent: Vec<f64> = self.recent_ttft.iter().map(|x| x.1).collect();
        recent.sort_by(f64::total_cmp);
        let p95 = (!recent.is_empty())
            .then(|| recent[((recent.len() as f64 * 0.95).ceil() as usize).clamp(1, recent.len()) - 1]);
        let in_flight: usize = self
            .replicas
            .iter()
            .filter(|r| matches!(r.phase, Phase::Ready | Phase::Draining))
            .map(Replica::outstanding)
            .sum();
        Sample {
            at_s: now,
            in_flight: in_flight as f64,
            queue_length: self.queue.len() as f64,
            rps: arrived,
            ttft_p95_s: p95,
            ..Sample::default()
        }
    }

    fn point(&self, s: &Sample) -> Point {
        let (replicas, ready) = self.counts();
        Point { t: s.at_s, rps: s.rps, in_flight: s.in_flight, queue: s.queue_length, replicas, ready }
    }

    fn apply(&mut self, now: f64, to: u32) {
        let (current, _) = self.counts();
        if to > current {
            let mut missing = to - current;
            for r in self.replicas.iter_mut().rev().filter(|r| r.phase == Phase::Draining) {
                if missing == 0 {
                    break;
                }
                r.phase = Phase::Ready;
                missing -= 1;
            }
            for _ in 0..missing {
                self.replicas.push(Replica::new(now, self.profile.cold_start_s));
            }
        } else {
            let mut extra = current - to;
            for r in self.replicas.iter_mut().rev().filter(|r| matches!(r.phase, Phase::Starting(_))) {
                if extra == 0 {
                    break;
                }
                r.phase = Phase::Stopped(now);
                extra -= 1;
            }
            while extra > 0 {
                let Some(r) = self
                    .replicas
                    .iter_mut()
                    .filter(|r| r.phase == Phase::Ready)
                    .min_by_key(|r| r.outstanding())
                else {
                    break;
                };
                r.phase = if r.outstanding() == 0 && r.busy_until.is_none() {
                    Phase::Stopped(now)
                } else {
                    Phase::Draining
                };
                extra -= 1;
            }
        }
    }
}
