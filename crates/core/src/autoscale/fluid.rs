//! Sizing on the recent arrivals: the fewest replicas that would have served them in time.
//!
//! A replica of an LLM service serves requests at some rate `μ` (requests per second when it
//! is busy: continuous batching overlaps one request's decode with the next one's prefill, so
//! the prefill throughput bounds it). Requests beyond what the replicas serve wait, and their
//! time to first token grows with the work ahead of them. [`replicas_for`] replays a window of
//! samples (their arrivals, `rps × interval`) through a fluid queue of `n` replicas, each
//! draining `μ` requests per second: the backlog after an interval's arrivals is `B`, and the
//! arrivals at its back wait `B / (n μ)`; those that would wait longer than `wait_s` are late.
//! The answer is the smallest `n` whose late share stays within `late_share`.
//!
//! Why a replay and not a mean: the bursts of LLM traffic last seconds and recur within
//! minutes, while a replica takes a minute or more to start. A mean over a window smooths the
//! burst away (too few replicas when it recurs); the peak concurrency of a burst counts every
//! request queued in it as needing its own slot (far too many, since a short burst may wait a
//! second within the SLO). Replaying the window asks the question the SLO asks: how many
//! replicas would have kept these requests' waits in bound.

use super::Sample;

/// The fewest replicas, at most `max`, that would have served the arrivals of `window` with at
/// most `late_share` of them waiting longer than `wait_s`, each replica serving `rate`
/// requests per second. 0 when nothing arrived.
pub fn replicas_for(window: &[Sample], rate: f64, wait_s: f64, late_share: f64, max: u32) -> u32 {
    let arrivals = arrivals(window);
    let total: f64 = arrivals.iter().map(|a| a.1).sum();
    if total <= 0.0 || rate <= 0.0 || max == 0 {
        return 0;
    }
    let allowed = total * late_share.max(0.0);
    let (mut lo, mut hi) = (1u32, max);
    if late(&arrivals, f64::from(hi) * rate, wait_s) > allowed {
        return max;
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if late(&arrivals, f64::from(mid) * rate, wait_s) <= allowed {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// `(interval seconds, requests arrived)` per sample; the first sample's interval is the next
/// one's (1 s when alone).
fn arrivals(window: &[Sample]) -> Vec<(f64, f64)> {
    let first_dt = match window {
        [a, b, ..] => (b.at_s - a.at_s).max(0.0),
        _ => 1.0,
    };
    let mut prev: Option<f64> = None;
    window
        .iter()
        .map(|s| {
            let dt = prev.map_or(first_dt, |p| (s.at_s - p).max(0.0));
            prev = Some(s.at_s);
            (dt, (s.rps * dt).max(0.0))
        })
        .collect()
}

/// Requests of `arrivals` waiting longer than `wait_s` behind a fleet serving `served` per second.
fn late(arrivals: &[(f64, f64)], served: f64, wait_s: f64) -> f64 {
    let in_time = served * wait_s;
    let mut backlog = 0.0f64;
    let mut late = 0.0;
    for &(dt, a) in arrivals {
        backlog += a;
        late += (backlog - in_time).clamp(0.0, a);
        backlog = (backlog - served * dt).max(0.0);
    }
    late
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(rps: &[f64]) -> Vec<Sample> {
        rps.iter().enumerate().map(|(i, &rps)| Sample { at_s: i as f64, rps, ..Sample::default() }).collect()
    }

    #[test]
    fn a_steady_rate_needs_its_rate_over_the_replicas_rate() {
        let w = window(&[20.0; 60]);
        assert_eq!(replicas_for(&w, 5.0, 1.0, 0.0, 64), 4);
        assert_eq!(replicas_for(&w, 3.0, 1.0, 0.0, 64), 7);
        assert_eq!(replicas_for(&window(&[0.0; 10]), 5.0, 1.0, 0.0, 64), 0);
    }

    #[test]
    fn a_short_burst_may_wait_within_the_bound_and_a_long_one_may_not() {
        let mut rps = vec![5.0; 60];
        rps[30] = 60.0;
        let w = window(&rps);
        let short = replicas_for(&w, 5.0, 2.0, 0.0, 64);
        assert!(short < 12, "60 requests in one second wait up to 2 s: {short}");
        assert!(short >= 6, "60 requests within 2 s need 6 replicas: {short}");
        let rps: Vec<f64> = (0..60).map(|i| if (20..40).contains(&i) { 60.0 } else { 5.0 }).collect();
        assert_eq!(replicas_for(&window(&rps), 5.0, 2.0, 0.0, 64), 12, "20 s at 60 req/s");
    }

    #[test]
    fn a_late_share_lets_the_rarest_peak_wait() {
        let mut rps = vec![10.0; 1000];
        rps[500] = 500.0;
        let strict = replicas_for(&window(&rps), 5.0, 1.0, 0.0, 200);
        let lenient = replicas_for(&window(&rps), 5.0, 1.0, 0.05, 200);
        assert!(lenient < strict, "{lenient} vs {strict}");
        assert_eq!(replicas_for(&window(&rps), 5.0, 1.0, 0.0, 8), 8, "never more than max");
    }
}
