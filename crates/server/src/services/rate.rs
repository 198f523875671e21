//! Whether a service's replicas serve the rate its `autoscale.replica_rps` declares.
//!
//! Gantry's policy sizes a service on its arrivals over the requests per second one busy replica
//! serves, and that figure is the service file's: a wrong one sizes every decision wrongly
//! (too few replicas when they are slower than declared, too many when faster). The gateway
//! can measure it, but only while the replicas are busy: when requests wait in its queue every
//! ready replica holds `max_concurrency` requests, and the requests answered per ready replica
//! per second are what a busy replica serves. [`RateCheck`] keeps the last
//! [`MEASURED_S`] of such intervals and says, once per figure, when the measured rate is off
//! the declared one by [`OFF_BY`] or more. It only speaks: the declared figure stays the one
//! the policy uses (a rate measured under one mix of prompts is not the next hour's).

use std::collections::VecDeque;

/// Seconds of busy intervals the measurement keeps.
pub const MEASURED_S: f64 = 120.0;

/// Seconds of busy intervals before anything is said.
pub const LEAST_S: f64 = 30.0;

/// How far off (either way) the measured rate must be to be said.
pub const OFF_BY: f64 = 1.5;

/// The measurement of one service.
#[derive(Debug, Clone)]
pub struct RateCheck {
    declared: f64,
    /// Busy intervals, oldest first: (seconds, ready replicas, requests answered).
    busy: VecDeque<(f64, u32, u64)>,
    /// The last tick: (seconds, requests answered so far).
    last: Option<(f64, u64)>,
    /// The measured rate last said.
    said: Option<f64>,
}

impl RateCheck {
    /// A check of a declared `replica_rps`.
    pub fn new(declared: f64) -> Self {
        Self { declared, busy: VecDeque::new(), last: None, said: None }
    }

    /// A tick at `at_s`: the gateway had answered `answered` requests so far, `ready` replicas
    /// were ready, and `saturated` says requests were waiting in its queue (and no other
    /// server replica's gateway sent the service requests this one does not count).
    pub fn tick(&mut self, at_s: f64, ready: u32, answered: u64, saturated: bool) {
        if let Some((then, before)) = self.last.replace((at_s, answered))
            && saturated
            && ready > 0
            && at_s > then
        {
            self.busy.push_back((at_s - then, ready, answered.saturating_sub(before)));
            let mut kept = self.busy_s();
            while let Some(&(oldest, ..)) = self.busy.front()
                && kept - oldest >= MEASURED_S
            {
                kept -= oldest;
                self.busy.pop_front();
            }
        }
    }

    fn busy_s(&self) -> f64 {
        self.busy.iter().map(|b| b.0).sum()
    }

    /// Requests per second one busy replica served over the kept intervals (`None` before
    /// [`LEAST_S`] of them).
    pub fn measured(&self) -> Option<f64> {
        if self.busy_s() < LEAST_S {
            return None;
        }
        let replica_s: f64 = self.busy.iter().map(|(dt, ready, _)| dt * f64::from(*ready)).sum();
        let answered: u64 = self.busy.iter().map(|b| b.2).sum();
        Some(answered as f64 / replica_s)
    }

    /// A sentence when the measured rate is [`OFF_BY`] off the declared one and was not said
    /// yet (or has moved by a quarter since it was).
    pub fn note(&mut self) -> Option<String> {
        let m = self.measured()?;
        let ratio = self.declared / m.max(1e-9);
        let off = !(1.0 / OFF_BY..OFF_BY).contains(&ratio);
        let new = self.said.is_none_or(|said| !(0.8..1.25).contains(&(m / said)));
        if !off || !new {
            return None;
        }
        self.said = Some(m);
        let (declared, busy) = (self.declared, self.busy_s());
        let effect = if ratio > 1.0 {
            format!("{ratio:.1}× what they serve: too few replicas")
        } else {
            format!("{:.1}× less than they serve: more replicas than needed", 1.0 / ratio)
        };
        Some(format!(
            "replica rate: busy replicas served {m:.2} req/s each over {busy:.0} s with requests queued; \
             the block declares replica_rps {declared}, so Gantry sizes for {effect} (set replica_rps: {m:.1})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ticks every second for `secs` seconds from `from`, `ready` replicas answering `rate`
    /// requests per second each; returns the answered count at the end.
    fn run(
        c: &mut RateCheck,
        from: f64,
        secs: u32,
        ready: u32,
        rate: f64,
        saturated: bool,
        answered: u64,
    ) -> u64 {
        let mut total = answered;
        for i in 0..=secs {
            if i > 0 {
                total += (f64::from(ready) * rate) as u64;
            }
            c.tick(from + f64::from(i), ready, total, saturated);
        }
        total
    }

    #[test]
    fn replicas_slower_than_declared_are_said_once_with_the_measured_rate() {
        let mut c = RateCheck::new(5.0);
        let n = run(&mut c, 0.0, 20, 4, 2.0, true, 0);
        assert_eq!(c.note(), None, "20 busy seconds are not enough");
        let n = run(&mut c, 20.0, 20, 4, 2.0, true, n);
        assert_eq!(c.measured(), Some(2.0));
        let said = c.note().expect("said");
        assert!(said.contains("served 2.00 req/s each") && said.contains("2.5× what they serve"), "{said}");
        assert!(said.contains("set replica_rps: 2.0"), "{said}");
        run(&mut c, 40.0, 20, 4, 2.0, true, n);
        assert_eq!(c.note(), None, "said once");
    }

    #[test]
    fn idle_replicas_measure_nothing_and_a_rate_near_the_declared_one_is_not_said() {
        let mut c = RateCheck::new(5.0);
        // Not saturated: replicas answering 1 req/s each with nothing queued say nothing.
        run(&mut c, 0.0, 100, 4, 1.0, false, 0);
        assert_eq!(c.measured(), None);
        let mut close = RateCheck::new(5.0);
        run(&mut close, 0.0, 60, 2, 4.0, true, 0);
        assert_eq!(close.measured(), Some(4.0));
        assert_eq!(close.note(), None, "4 against 5 is within 1.5×");
        let mut fast = RateCheck::new(2.0);
        run(&mut fast, 0.0, 60, 2, 8.0, true, 0);
        assert!(fast.note().expect("said").contains("4.0× less than they serve"));
    }

    #[test]
    fn only_the_last_two_minutes_of_busy_time_count() {
        let mut c = RateCheck::new(5.0);
        let n = run(&mut c, 0.0, 200, 1, 5.0, true, 0);
        run(&mut c, 200.0, 200, 1, 1.0, true, n);
        assert_eq!(c.measured(), Some(1.0), "the old rate has left the window");
    }
}
