//! Times to first byte as a histogram that adds up across server replicas.
//!
//! A gateway keeps each request's time to first byte over its window and reads exact
//! percentiles from them; a percentile of two gateways' requests cannot be made from their two
//! percentiles. So each gateway also sums its window into logarithmic buckets, which add: the
//! leader adds the other replicas' buckets to its own and reads the 95th percentile of every
//! request the service's gateways answered. Bucket `b` holds the times in
//! `(1 ms × 2^((b-1)/4), 1 ms × 2^(b/4)]` (bucket 0 everything up to 1 ms, the last everything
//! beyond about 4.6 h), and a percentile read from them is its bucket's upper end: never below
//! the exact figure, at most 19 % above it, which errs toward scaling up.

use std::collections::BTreeMap;

/// Buckets per doubling of the time.
const PER_DOUBLING: f64 = 4.0;

/// The upper end of bucket 0, seconds.
const FLOOR_S: f64 = 0.001;

/// Buckets in all: the last one's upper end is 1 ms × 2^(95/4), about 4.6 hours.
pub const BUCKETS: u32 = 96;

/// Counts of times per bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: BTreeMap<u32, u32>,
}

impl Histogram {
    /// The histogram of `seconds`.
    pub fn of(seconds: impl IntoIterator<Item = f64>) -> Self {
        let mut h = Self::default();
        for s in seconds {
            h.put(bucket(s), 1);
        }
        h
    }

    /// A histogram read back from its pairs (see [`Self::pairs`]); a bucket past the last counts
    /// in the last.
    pub fn from_pairs(pairs: &[(u32, u32)]) -> Self {
        let mut h = Self::default();
        for &(b, n) in pairs.iter().filter(|(_, n)| *n > 0) {
            h.put(b.min(BUCKETS - 1), n);
        }
        h
    }

    /// `(bucket, count)` for every bucket that holds a time, in increasing order.
    pub fn pairs(&self) -> Vec<(u32, u32)> {
        self.counts.iter().map(|(b, n)| (*b, *n)).collect()
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Self) {
        for (b, n) in &other.counts {
            self.put(*b, *n);
        }
    }

    /// Counts `n` more times in bucket `b`.
    fn put(&mut self, b: u32, n: u32) {
        let c = self.counts.entry(b).or_default();
        *c = c.saturating_add(n);
    }

    /// Times counted.
    pub fn count(&self) -> u64 {
        self.counts.values().map(|n| u64::from(*n)).sum()
    }

    /// The nearest-rank `q` quantile, as its bucket's upper end, seconds; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0u64;
        let (b, _) = self.counts.iter().find(|(_, n)| {
            seen += u64::from(**n);
            seen >= rank
        })?;
        Some(upper(*b))
    }
}

/// The bucket of a time of `s` seconds.
fn bucket(s: f64) -> u32 {
    if s.is_nan() || s <= FLOOR_S {
        return 0;
    }
    let b = ((s / FLOOR_S).log2() * PER_DOUBLING).ceil();
    if b >= f64::from(BUCKETS - 1) { BUCKETS - 1 } else { b as u32 }
}

/// The upper end of bucket `b`, seconds.
fn upper(b: u32) -> f64 {
    FLOOR_S * (f64::from(b) / PER_DOUBLING).exp2()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_falls_in_the_bucket_whose_upper_end_is_at_most_a_fifth_above_it() {
        for s in [0.0005, 0.001, 0.0013, 0.05, 0.2, 1.0, 1.9, 7.5, 300.0] {
            let up = upper(bucket(s));
            assert!(up >= s && up <= (s.max(FLOOR_S)) * 1.19, "{s} s in a bucket up to {up} s");
        }
        assert_eq!(bucket(1.0e9), BUCKETS - 1, "beyond the last bucket counts in it");
        assert_eq!(bucket(f64::NAN), 0);
    }

    #[test]
    fn two_gateways_histograms_add_to_the_histogram_of_all_their_requests() {
        // One gateway answered 95 fast requests, another 5 slow ones: the 95th percentile of the
        // service is fast, and the 96th slow, whichever gateway's own figure says otherwise.
        let fast: Vec<f64> = (0..95).map(|i| 0.1 + f64::from(i) * 0.001).collect();
        let slow = [4.0, 4.5, 5.0, 5.5, 6.0];
        let mut both = Histogram::of(fast.iter().copied());
        both.add(&Histogram::from_pairs(&Histogram::of(slow).pairs()));
        assert_eq!(both, Histogram::of(fast.iter().copied().chain(slow)));
        assert_eq!(both.count(), 100);
        let p95 = both.quantile(0.95).expect("p95");
        assert!((0.194..0.25).contains(&p95), "p95 {p95}");
        assert!(both.quantile(0.96).expect("p96") >= 4.0);
        assert_eq!(Histogram::default().quantile(0.95), None);
    }

    #[test]
    fn pairs_read_back_drop_empty_buckets_and_clamp_foreign_ones() {
        let h = Histogram::from_pairs(&[(3, 2), (7, 0), (500, 1)]);
        assert_eq!(h.pairs(), vec![(3, 2), (BUCKETS - 1, 1)]);
    }
}
