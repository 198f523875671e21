//! The exporter speaks dcgm-exporter's default metric set, and its values follow the fleet.

use crate::support::{Running, gpu_value, parse, quick_health};
use gantry_agent::exporter::metrics::{DCGM_METRICS, DCGM_NOT_EXPORTED, GANTRY_METRICS, GPU_LABELS};
use gantry_gpu::{FaultKind, UtilProfile};
use std::collections::BTreeSet;
use std::time::Duration;

fn reference() -> (Vec<(String, String)>, Vec<String>) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dcgm-default-counters.txt");
    let text = std::fs::read_to_string(path).expect("reference list");
    let mut metrics = Vec::new();
    let mut labels = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["labels", rest @ ..] => labels = rest.iter().map(|s| s.to_string()).collect(),
            [name, kind] => metrics.push((name.to_string(), kind.to_string())),
            other => panic!("bad reference line {other:?}"),
        }
    }
    (metrics, labels)
}

#[test]
fn the_declared_gpu_metrics_are_exactly_dcgm_exporters_default_set_minus_the_documented_exceptions() {
    let (reference, labels) = reference();
    let skipped: BTreeSet<&str> = DCGM_NOT_EXPORTED.iter().map(|(n, _)| *n).collect();
    let expected: Vec<(String, String)> =
        reference.into_iter().filter(|(n, _)| !skipped.contains(n.as_str())).collect();
    let declared: Vec<(String, String)> =
        DCGM_METRICS.iter().map(|m| (m.name.to_owned(), m.kind.as_str().to_owned())).collect();
    assert_eq!(declared, expected);
    assert_eq!(GPU_LABELS.to_vec(), labels);
    assert!(GANTRY_METRICS.iter().all(|m| m.name.starts_with("gantry_")));
}

#[test]
fn a_scrape_emits_every_declared_metric_with_its_type_and_dcgm_labels_on_every_gpu_series() {
    let run = Running::start("2xH100", Duration::from_millis(100), quick_health());
    run.fleet
        .start_process(0, 4242, Some("job-a".into()), 1000, UtilProfile::Steady { percent: 50.0 })
        .expect("start");
    run.fleet.inject_now(1, FaultKind::Xid(13)).expect("inject");
    run.scrape_until("process and xid series", |s| {
        s.iter().any(|x| x.name == "gantry_gpu_xid_errors_total")
            && s.iter().any(|x| x.name == "gantry_gpu_process_memory_used_bytes")
    });
    let (series, types) = parse(&run.scrape());
    for m in DCGM_METRICS {
        assert_eq!(types.get(m.name).map(String::as_str), Some(m.kind.as_str()), "{}", m.name);
        let rows: Vec<_> = series.iter().filter(|s| s.name == m.name).collect();
        assert_eq!(rows.len(), 2, "{} on both GPUs", m.name);
        for r in rows {
            let names: BTreeSet<&str> = r.labels.keys().map(String::as_str).collect();
            assert_eq!(names, GPU_LABELS.iter().copied().collect(), "{}", m.name);
            assert_eq!(r.labels["hostname"], "test-node");
            assert_eq!(r.labels["device"], format!("nvidia{}", r.labels["gpu"]));
            assert_eq!(r.labels["modelName"], "NVIDIA H100 80GB HBM3");
        }
    }
    for m in GANTRY_METRICS {
        assert_eq!(types.get(m.name).map(String::as_str), Some(m.kind.as_str()), "{}", m.name);
        assert!(series.iter().any(|s| s.name == m.name), "{} emitted", m.name);
    }
    let p = series.iter().find(|s| s.name == "gantry_gpu_process_memory_used_bytes").expect("process row");
    assert_eq!(
        (p.labels["pid"].as_str(), p.labels["job_id"].as_str(), p.value),
        ("4242", "job-a", 1000.0 * 1024.0 * 1024.0)
    );
}

#[test]
fn values_move_when_simulated_processes_start_and_stop() {
    let run = Running::start("8xH100", Duration::from_millis(100), quick_health());
    let idle = run.scrape_until("first collection", |s| gpu_value(s, "DCGM_FI_DEV_GPU_UTIL", 3).is_some());
    assert_eq!(gpu_value(&idle, "DCGM_FI_DEV_GPU_UTIL", 3), Some(0.0));
    run.fleet.start_process(3, 77, None, 30_000, UtilProfile::Steady { percent: 90.0 }).expect("start");
    let busy = run.scrape_until("utilisation to rise", |s| {
        gpu_value(s, "DCGM_FI_DEV_GPU_UTIL", 3).is_some_and(|u| u > 85.0)
    });
    assert_eq!(gpu_value(&busy, "DCGM_FI_DEV_FB_USED", 3), Some(30_000.0));
    assert!(gpu_value(&busy, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 3).is_some_and(|t| t > 0.5));
    run.fleet.stop_process(77).expect("stop");
    run.scrape_until("utilisation to fall", |s| {
        gpu_value(s, "DCGM_FI_DEV_GPU_UTIL", 3) == Some(0.0)
            && gpu_value(s, "DCGM_FI_DEV_FB_USED", 3) == Some(0.0)
    });
}
