//! The autoscaler's inputs beyond the gateway's own figures: GPU levels from the agents'
//! heartbeats, and series scraped from the replicas' own `/metrics`.
//!
//! - **`gpu_utilization`, `sm_active`**: each agent's heartbeat carries the latest reading of
//!   every GPU of its node (the collection its dcgm-compatible exporter serves), which the
//!   server keeps per GPU. A service's level is the mean over the GPUs its *ready* replicas
//!   hold of `gpu_util_percent / 100` and of `sm_active` (GPM's SM utilisation, 0..1). A GPU whose
//!   node has not been heard from within the heartbeat timeout, or that reports no such
//!   reading, is left out; with none left the metric is absent and HPA skips it (as Kubernetes
//!   does for a metric it cannot read). A slice's GPU is shared with whoever else holds it, so
//!   for `gpu_memory` replicas the level is the GPU's, not the replica's.
//! - **`prometheus`**: the controller scrapes `GET /metrics` of every ready replica of a service
//!   whose `autoscale` block names a `series` (every `sync_s`, at most every 5 s; 2 s timeout,
//!   1 MiB at most), reads the text exposition format, and sums each wanted series over its
//!   label sets, then over the replicas whose last scrape is recent: a total, which HPA divides
//!   by the current count (`vllm:num_requests_waiting` per replica). No Prometheus server is
//!   involved. A replica whose scrape fails contributes nothing until it answers again.
//!
//! The parsing and the arithmetic are pure and tested here; [`fetch`] is the one I/O piece.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use gantry_store::Gpu;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;

/// The most of a `/metrics` answer that is read.
pub const SCRAPE_LIMIT: usize = 1 << 20;
/// Longest a scrape may take.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// The sum over label sets of each series in `wanted`, from Prometheus text exposition format
/// (`name{labels} value [timestamp]`; comments and other series are skipped, as are values that
/// are not finite numbers). A series that does not appear is absent from the result.
pub fn parse_series(text: &str, wanted: &[String]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(|c: char| c == '{' || c.is_whitespace()).unwrap_or(line.len());
        let name = &line[..name_end];
        if !wanted.iter().any(|w| w == name) {
            continue;
        }
        let rest = &line[name_end..];
        // Label values may hold spaces and braces inside quotes: the value follows the last `}`.
        let rest = if rest.starts_with('{') { rest.rfind('}').map_or("", |i| &rest[i + 1..]) } else { rest };
        let Some(value) = rest.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        if value.is_finite() {
            *out.entry(name.to_owned()).or_insert(0.0) += value;
        }
    }
    out
}

/// Each series summed over replicas' scrapes.
pub fn sum_scrapes<'a>(
    scrapes: impl IntoIterator<Item = &'a BTreeMap<String, f64>>,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for scrape in scrapes {
        for (series, value) in scrape {
            *out.entry(series.clone()).or_insert(0.0) += value;
        }
    }
    out
}

/// The mean GPU utilisation (0..1) and SM activity (0..1) over `uuids`, from the GPUs' latest
/// samples as the store keeps them; a GPU whose node is not in `fresh` (heard from recently) is
/// left out, and so is a reading a GPU does not report.
pub fn gpu_levels<'a>(
    uuids: impl IntoIterator<Item = &'a str>,
    gpus: &HashMap<&str, &Gpu>,
    fresh: &dyn Fn(&str) -> bool,
) -> (Option<f64>, Option<f64>) {
    let (mut util, mut sm) = (Vec::new(), Vec::new());
    for uuid in uuids {
        let Some(gpu) = gpus.get(uuid).filter(|g| fresh(&g.node_id)) else { continue };
        let Some(sample) = gpu.sample.as_ref().and_then(|s| s.get("sample")) else { continue };
        util.extend(sample.get("gpu_util_percent").and_then(serde_json::Value::as_f64).map(|p| p / 100.0));
        sm.extend(sample.get("sm_active").and_then(serde_json::Value::as_f64));
    }
    let mean =
        |v: Vec<f64>| (!v.is_empty()).then(|| (v.iter().sum::<f64>() / v.len() as f64).clamp(0.0, 1.0));
    (mean(util), mean(sm))
}

/// `GET /metrics` of a replica: the body when it answered 200 within [`SCRAPE_TIMEOUT`] and
/// [`SCRAPE_LIMIT`].
pub async fn fetch(addr: SocketAddr) -> Option<String> {
    tokio::time::timeout(SCRAPE_TIMEOUT, get(addr)).await.ok().flatten()
}

async fn get(addr: SocketAddr) -> Option<String> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io).await.ok()?;
    let driver = tokio::spawn(conn);
    let req = hyper::Request::get("/metrics")
        .header(hyper::header::HOST, addr.to_string())
        .header(hyper::header::USER_AGENT, "gantry-autoscaler")
        .body(Empty::new())
        .ok()?;
    let answer = async {
        let response = sender.send_request(req).await.ok()?;
        if response.status() != hyper::StatusCode::OK {
            return None;
        }
        let body = Limited::new(response.into_body(), SCRAPE_LIMIT).collect().await.ok()?.to_bytes();
        String::from_utf8(body.to_vec()).ok()
    }
    .await;
    driver.abort();
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_summed_over_its_label_sets_and_others_comments_and_bad_values_are_skipped() {
        let text = "# HELP vllm:num_requests_waiting Requests waiting.\n\
            # TYPE vllm:num_requests_waiting gauge\n\
            vllm:num_requests_waiting{model_name=\"a b}\",engine=\"0\"} 3.0\n\
            vllm:num_requests_waiting{engine=\"1\"} 2 1700000000000\n\
            vllm:num_requests_waiting_total 100\n\
            vllm:gpu_cache_usage_perc 0.5\n\
            queue_depth NaN\n\
            queue_depth junk\n";
        let wanted = ["vllm:num_requests_waiting".to_owned(), "queue_depth".to_owned(), "absent".to_owned()];
        let got = parse_series(text, &wanted);
        assert_eq!(got.get("vllm:num_requests_waiting"), Some(&5.0));
        assert!(!got.contains_key("queue_depth"), "no finite value: absent, not 0");
        assert!(!got.contains_key("absent"));
        assert_eq!(got.len(), 1);
        let both = sum_scrapes([&got, &got]);
        assert_eq!(both.get("vllm:num_requests_waiting"), Some(&10.0));
    }

    fn gpu(uuid: &str, node: &str, sample: serde_json::Value) -> Gpu {
        let mut g: Gpu = serde_json::from_value(serde_json::json!({
            "uuid": uuid, "index": 0, "model": "A100-80GB", "memory_mib": 81920,
            "node_id": node, "health": "healthy",
        }))
        .expect("gpu");
        g.sample = Some(serde_json::json!({ "sample": sample }));
        g
    }

    #[test]
    fn gpu_levels_are_the_mean_of_fresh_gpus_that_report_them() {
        let a = gpu("a", "n1", serde_json::json!({"gpu_util_percent": 80.0, "sm_active": 0.6}));
        let b = gpu("b", "n1", serde_json::json!({"gpu_util_percent": 40.0}));
        let stale = gpu("c", "n2", serde_json::json!({"gpu_util_percent": 0.0, "sm_active": 0.0}));
        let gpus: HashMap<&str, &Gpu> = [("a", &a), ("b", &b), ("c", &stale)].into();
        let fresh = |node: &str| node == "n1";
        let (util, sm) = gpu_levels(["a", "b", "c", "missing"], &gpus, &fresh);
        assert!((util.expect("util") - 0.6).abs() < 1e-9, "{util:?}");
        assert_eq!(sm, Some(0.6), "only a reports SM activity; the stale GPU is left out");
        assert_eq!(gpu_levels(["c"], &gpus, &fresh), (None, None));
    }
}
