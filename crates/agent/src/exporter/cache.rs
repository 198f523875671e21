//! The node's dataset cache and staging on its own exporter: `gantry_cache_bytes{node,team}`,
//! `gantry_cache_hits_total`, `gantry_stage_bytes_total` and
//! `gantry_stage_duration_seconds` — the families the control plane's `/metrics` has from the
//! agents' reports, here from the agent itself, so a node's Prometheus sees its cache without
//! the server.
//!
//! The stager counts each staged input ([`CacheMetrics::observe`]); its report loop sets the
//! bytes per team from the cache's entries ([`CacheMetrics::set_cached`]); the publisher
//! appends [`CacheMetrics::encode`] to every snapshot.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Mutex, PoisonError};

use gantry_api::inputs::{CacheEntry, Input};

use super::encode::escape;

/// Upper bounds of the staging duration histogram, seconds (as the server's: 0.01 doubling).
const BUCKETS: [f64; 20] = {
    let mut b = [0.0; 20];
    let mut i = 0;
    let mut v = 0.01;
    while i < 20 {
        b[i] = v;
        v *= 2.0;
        i += 1;
    }
    b
};

#[derive(Debug, Default)]
struct Inner {
    cached: BTreeMap<String, u64>,
    hits: u64,
    stage_bytes: u64,
    counts: [u64; 20],
    count: u64,
    sum: f64,
}

/// The cache's and staging's numbers on one node.
#[derive(Debug)]
pub struct CacheMetrics {
    node: String,
    inner: Mutex<Inner>,
}

impl CacheMetrics {
    /// Nothing counted yet on node `node` (its `node` label).
    pub fn new(node: &str) -> Self {
        Self { node: node.to_owned(), inner: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One input staged: a hit, or the bytes copied; its duration either way.
    pub fn observe(&self, input: &Input) {
        let mut m = self.lock();
        if input.cache_hit == Some(true) {
            m.hits += 1;
        } else if let Some(b) = input.bytes {
            m.stage_bytes = m.stage_bytes.saturating_add(b);
        }
        if let Some(s) = input.staged_s.filter(|s| s.is_finite() && *s >= 0.0) {
            for (n, le) in m.counts.iter_mut().zip(BUCKETS) {
                if s <= le {
                    *n += 1;
                }
            }
            m.count += 1;
            m.sum += s;
        }
    }

    /// What the cache holds now, per team.
    pub fn set_cached(&self, entries: &[CacheEntry]) {
        let mut per: BTreeMap<String, u64> = BTreeMap::new();
        for e in entries {
            *per.entry(e.team.clone()).or_default() += e.bytes;
        }
        self.lock().cached = per;
    }

    /// Appends the four families in Prometheus text (0.0.4).
    pub fn encode(&self, out: &mut String) {
        let m = self.lock();
        let node = escape(&self.node);
        let _ = writeln!(
            out,
            "# HELP gantry_cache_bytes Bytes of datasets in this node's cache per team\n# TYPE gantry_cache_bytes gauge"
        );
        for (team, bytes) in &m.cached {
            let _ = writeln!(out, "gantry_cache_bytes{{node=\"{node}\",team=\"{}\"}} {bytes}", escape(team));
        }
        let _ = writeln!(
            out,
            "# HELP gantry_cache_hits_total Declared inputs found in this node's cache\n# TYPE gantry_cache_hits_total counter\ngantry_cache_hits_total {}",
            m.hits
        );
        let _ = writeln!(
            out,
            "# HELP gantry_stage_bytes_total Bytes of declared inputs copied into this node's cache\n# TYPE gantry_stage_bytes_total counter\ngantry_stage_bytes_total {}",
            m.stage_bytes
        );
        let _ = writeln!(
            out,
            "# HELP gantry_stage_duration_seconds Seconds each declared input took to stage\n# TYPE gantry_stage_duration_seconds histogram"
        );
        for (n, le) in m.counts.iter().zip(BUCKETS) {
            let _ = writeln!(out, "gantry_stage_duration_seconds_bucket{{le=\"{le}\"}} {n}");
        }
        let _ = writeln!(out, "gantry_stage_duration_seconds_bucket{{le=\"+Inf\"}} {}", m.count);
        let _ = writeln!(out, "gantry_stage_duration_seconds_sum {}", m.sum);
        let _ = writeln!(out, "gantry_stage_duration_seconds_count {}", m.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(hit: bool, bytes: u64, s: f64) -> Input {
        Input {
            bytes: Some(bytes),
            cache_hit: Some(hit),
            staged_s: Some(s),
            ..Input::new("data", "s3://b/k")
        }
    }

    fn entry(team: &str, bytes: u64) -> CacheEntry {
        serde_json::from_value(serde_json::json!({
            "team": team, "url": "s3://b/k", "version": "v", "bytes": bytes, "last_used_ms": 0, "hits": 0, "in_use": 0
        }))
        .expect("entry")
    }

    #[test]
    fn staged_inputs_and_the_cache_are_counted_per_team_with_the_node() {
        let m = CacheMetrics::new("gpu-\"3\"");
        m.observe(&input(false, 50 << 20, 0.8));
        m.observe(&input(true, 50 << 20, 0.001));
        m.set_cached(&[entry("vision", 50 << 20), entry("vision", 1), entry("nlp", 7)]);
        let mut out = String::new();
        m.encode(&mut out);
        assert!(
            out.contains(&format!(
                "gantry_cache_bytes{{node=\"gpu-\\\"3\\\"\",team=\"vision\"}} {}",
                (50 << 20) + 1
            )),
            "{out}"
        );
        assert!(out.contains("gantry_cache_bytes{node=\"gpu-\\\"3\\\"\",team=\"nlp\"} 7"), "{out}");
        assert!(out.contains("gantry_cache_hits_total 1\n"), "{out}");
        assert!(
            out.contains(&format!("gantry_stage_bytes_total {}\n", 50 << 20)),
            "hits copy nothing: {out}"
        );
        assert!(out.contains("gantry_stage_duration_seconds_count 2\n"), "{out}");
        assert!(out.contains("gantry_stage_duration_seconds_bucket{le=\"0.01\"} 1\n"), "{out}");
        assert!(out.contains("gantry_stage_duration_seconds_bucket{le=\"+Inf\"} 2\n"), "{out}");
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().expect("value");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
