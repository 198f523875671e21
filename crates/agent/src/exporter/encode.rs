//! Prometheus text format (0.0.4) for one collection.

use super::metrics::{self, DCGM_METRICS, GPU_LABELS, GantryMetric, Kind, POD_LABELS};
use super::pods::{PodMap, ProcessPod};
use gantry_gpu::Collection;
use gantry_gpu::findings::FindingKind;
use std::fmt::Write;
use std::time::Duration;

/// Content type of the body.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Exporter-wide numbers kept by the sampler.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// Collections done.
    pub collections: u64,
    /// Collections that failed.
    pub errors: u64,
    /// Time the last collection took.
    pub last_duration: Duration,
}

/// Escapes a label value (backslash, quote, newline).
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn header(out: &mut String, name: &str, kind: Kind, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {}", kind.as_str());
}

fn gantry_header(out: &mut String, m: &GantryMetric) {
    header(out, m.name, m.kind, m.help);
}

/// Kubernetes attribution for one encoding.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pods<'a> {
    /// Who holds each GPU (none: not on Kubernetes, no pod labels).
    pub map: Option<&'a PodMap>,
    /// `uids[i]` is the pod of `c.processes[i]` (empty: none known).
    pub uids: &'a [Option<ProcessPod>],
}

/// Encodes `c`; `jobs[i]` is the job of `c.processes[i]`.
pub fn encode(c: &Collection, hostname: &str, jobs: &[impl AsRef<str>], counters: &Counters) -> String {
    encode_with_pods(c, hostname, jobs, Pods::default(), counters)
}

/// Encodes `c` with pod labels: `container`, `namespace`, `pod` on the series of a GPU one
/// container holds, `pod_uid` (and, when named, `container`, `namespace`, `pod`: the process's
/// own pod) on the series of a process in a pod.
pub fn encode_with_pods(
    c: &Collection,
    hostname: &str,
    jobs: &[impl AsRef<str>],
    pods: Pods<'_>,
    counters: &Counters,
) -> String {
    // GPU labels alone (process series: a process's pod is its own, not the GPU holder's), and
    // with the holding pod's labels (GPU series).
    let base: Vec<String> = c
        .gpus
        .iter()
        .map(|g| {
            let i = &g.info;
            let values = [
                i.index.to_string(),
                i.uuid.clone(),
                i.pci_bus_id.clone(),
                format!("nvidia{}", i.index),
                i.name.clone(),
                hostname.to_owned(),
                c.driver_version.clone(),
            ];
            let pairs: Vec<String> =
                GPU_LABELS.iter().zip(values).map(|(k, v)| format!("{k}=\"{}\"", escape(&v))).collect();
            pairs.join(",")
        })
        .collect();
    let labels: Vec<String> = c
        .gpus
        .iter()
        .zip(&base)
        .map(|(g, l)| match pods.map.and_then(|m| m.sole_holder(g.info.index, &g.info.uuid)) {
            Some(h) => {
                let mut l = l.clone();
                for (k, v) in POD_LABELS.iter().zip([&h.container, &h.namespace, &h.pod]) {
                    let _ = write!(l, ",{k}=\"{}\"", escape(v));
                }
                l
            }
            None => l.clone(),
        })
        .collect();
    let mut out = String::with_capacity(16 * 1024 + c.processes.len() * 300);
    for m in DCGM_METRICS {
        header(&mut out, m.name, m.kind, m.help);
        for (g, l) in c.gpus.iter().zip(&labels) {
            if let Some(v) = g.sample.as_ref().and_then(m.read) {
                let _ = writeln!(out, "{}{{{l}}} {v}", m.name);
            }
        }
    }
    gantry_header(&mut out, &metrics::HEALTH_STATE);
    for (g, l) in c.gpus.iter().zip(&labels) {
        let _ = writeln!(out, "{}{{{l}}} {}", metrics::HEALTH_STATE.name, g.health as u8);
    }
    gantry_header(&mut out, &metrics::XID_ERRORS);
    for (g, l) in c.gpus.iter().zip(&labels) {
        for (xid, n) in &g.xid_counts {
            let _ = writeln!(out, "{}{{{l},xid=\"{xid}\"}} {n}", metrics::XID_ERRORS.name);
        }
    }
    gantry_header(&mut out, &metrics::FINDING);
    for (g, l) in c.gpus.iter().zip(&labels) {
        for kind in FindingKind::ALL {
            let on = u8::from(g.findings.iter().any(|f| f.kind == kind));
            let _ = writeln!(out, "{}{{{l},finding=\"{}\"}} {on}", metrics::FINDING.name, kind.as_str());
        }
    }
    gantry_header(&mut out, &metrics::PROCESS_MEMORY);
    for (n, (p, job)) in c.processes.iter().zip(jobs).enumerate() {
        let Some(l) = c.gpus.iter().position(|g| g.info.index == p.gpu_index).map(|i| &base[i]) else {
            continue;
        };
        let job = escape(job.as_ref());
        let mut uid = String::new();
        if let Some(Some(pp)) = pods.uids.get(n) {
            if let Some(c) = &pp.container {
                let _ = write!(uid, ",container=\"{}\"", escape(c));
            }
            if let Some((ns, pod)) = &pp.names {
                let _ = write!(uid, ",namespace=\"{}\",pod=\"{}\"", escape(ns), escape(pod));
            }
            let _ = write!(uid, ",pod_uid=\"{}\"", escape(&pp.uid));
        }
        let _ = writeln!(
            out,
            "{}{{{l},pid=\"{}\",job_id=\"{job}\"{uid}}} {}",
            metrics::PROCESS_MEMORY.name,
            p.pid,
            p.memory_used_bytes
        );
    }
    encode_counters(&mut out, counters);
    out
}

/// Exporter-wide series only (also used before the first collection succeeds).
pub fn encode_counters(out: &mut String, counters: &Counters) {
    let rows = [
        (metrics::COLLECTION_DURATION, counters.last_duration.as_secs_f64()),
        (metrics::COLLECTIONS, counters.collections as f64),
        (metrics::COLLECTION_ERRORS, counters.errors as f64),
    ];
    for (m, v) in rows {
        gantry_header(out, &m);
        let _ = writeln!(out, "{} {v}", m.name);
    }
}
