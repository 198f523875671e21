//! Retrying a server that does not answer: exponential back-off with jitter, and one log line
//! per change of state instead of one per try.
//!
//! A control plane that is down (restarting, or lost with its host) must not be hammered by
//! every agent at the heartbeat interval, nor fill the agents' logs: a fleet of agents retrying
//! in lock step after an outage is the thundering herd. Each failure doubles the wait from the
//! heartbeat interval up to [`MAX`], and the wait is drawn at random from its upper half
//! ("equal jitter"), so agents that failed together spread out. The first failure is logged as a
//! warning, the later ones at debug level, and the first success after failures says how many
//! there were.

use std::time::Duration;

/// The longest wait between two tries.
pub const MAX: Duration = Duration::from_secs(10);

/// The wait before the next try, and what to log.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    failures: u32,
}

/// What a try's outcome changed, for the one log line a change deserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The first failure after successes.
    Failing,
    /// Another failure: nothing new to say.
    StillFailing,
    /// A success after this many failures.
    Recovered(u32),
    /// A success after successes.
    Fine,
}

impl Backoff {
    /// Waits grow from `base` (the normal interval between tries).
    pub fn new(base: Duration) -> Self {
        Self { base: base.max(Duration::from_millis(1)), failures: 0 }
    }

    /// Records a failed try.
    pub fn failed(&mut self) -> Change {
        self.failures = self.failures.saturating_add(1);
        if self.failures == 1 { Change::Failing } else { Change::StillFailing }
    }

    /// Records a successful try.
    pub fn succeeded(&mut self) -> Change {
        let failures = std::mem::take(&mut self.failures);
        if failures == 0 { Change::Fine } else { Change::Recovered(failures) }
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The wait before the next try: the base while tries succeed; after `n` failures a time in
    /// the upper half of `min(base × 2ⁿ, MAX)`, placed by `jitter` in `[0, 1)`.
    pub fn delay(&self, jitter: f64) -> Duration {
        if self.failures == 0 {
            return self.base;
        }
        let exp = self.base.saturating_mul(1u32 << self.failures.min(16)).min(MAX.max(self.base));
        let half = exp / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// A number in `[0, 1)` that differs between calls and between processes (std's randomly keyed
/// hasher over a counter): enough to spread retries, not for anything secret.
pub fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_the_interval_up_to_ten_seconds_within_their_upper_half() {
        let mut b = Backoff::new(Duration::from_millis(250));
        assert_eq!(b.delay(0.5), Duration::from_millis(250), "no failure: the interval");
        let mut uppers = Vec::new();
        for _ in 0..10 {
            b.failed();
            let (low, high) = (b.delay(0.0), b.delay(1.0));
            assert!(low * 2 >= high - Duration::from_millis(1), "jitter stays in the upper half");
            assert!(high <= MAX);
            uppers.push(high);
        }
        assert_eq!(uppers[0], Duration::from_millis(500));
        assert_eq!(uppers[1], Duration::from_secs(1));
        assert_eq!(*uppers.last().expect("ten"), MAX, "capped at 10 s");
        assert!(uppers.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn only_the_first_failure_and_the_recovery_are_news() {
        let mut b = Backoff::new(Duration::from_secs(1));
        assert_eq!(b.succeeded(), Change::Fine);
        assert_eq!(b.failed(), Change::Failing);
        assert_eq!(b.failed(), Change::StillFailing);
        assert_eq!(b.failed(), Change::StillFailing);
        assert_eq!(b.succeeded(), Change::Recovered(3));
        assert_eq!(b.succeeded(), Change::Fine);
        assert_eq!(b.delay(0.9), Duration::from_secs(1));
    }

    #[test]
    fn jitter_is_in_the_unit_interval_and_varies() {
        let draws: Vec<f64> = (0..100).map(|_| jitter()).collect();
        assert!(draws.iter().all(|j| (0.0..1.0).contains(j)));
        assert!(draws.windows(2).any(|w| w[0] != w[1]));
    }
}
