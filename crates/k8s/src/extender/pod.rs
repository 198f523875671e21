//! What a `v1.Pod` asks of Gantry: its GPU resources, CPU and memory, as a core [`Request`].
//!
//! `gantry.dev/gpu: N` asks for N whole GPUs; `gantry.dev/gpu-memory: M` asks for M MiB of one
//! GPU (a slice), with its compute share in milli-GPU from the `gantry.dev/gpu-share` annotation
//! (default 1: a memory-only slice reserves memory, not compute, as HAMi's `gpucores: 0` does).
//! Extended resources are integers and requests equal limits, so either map is read.

use gantry_core::{ModelSet, Request};
use serde_json::Value;

/// Whole GPUs.
pub const GPU: &str = "gantry.dev/gpu";
/// MiB of one GPU's memory (a slice).
pub const GPU_MEMORY: &str = "gantry.dev/gpu-memory";
/// Annotation: a slice's compute share in milli-GPU.
pub const GPU_SHARE: &str = "gantry.dev/gpu-share";

/// A pod's identity and request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRequest {
    /// `namespace/name`.
    pub key: String,
    /// `metadata.uid` (may be empty in hand-written fixtures).
    pub uid: String,
    /// What it asks for.
    pub request: Request,
}

/// Parses the pod's request; the error is a sentence for kube-scheduler's event.
pub fn parse(pod: &Value) -> Result<PodRequest, String> {
    let meta = &pod["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    let namespace = meta["namespace"].as_str().unwrap_or("default");
    let uid = meta["uid"].as_str().unwrap_or_default().to_string();
    let (mut cpu, mut mem, mut gpus, mut gpu_mem) = (0u64, 0u64, 0u64, 0u64);
    let containers = pod["spec"]["containers"].as_array().map(Vec::as_slice).unwrap_or_default();
    for c in containers {
        let res = &c["resources"];
        let get = |key: &str| -> Result<u64, String> {
            let q = res["requests"].get(key).or_else(|| res["limits"].get(key));
            match q {
                None => Ok(0),
                Some(q) => quantity(q, key),
            }
        };
        cpu += get("cpu")?;
        mem += get("memory")?;
        gpus += get(GPU)?;
        gpu_mem += get(GPU_MEMORY)?;
    }
    let request = to_request(cpu, mem, gpus, gpu_mem, &meta["annotations"])?;
    Ok(PodRequest { key: format!("{namespace}/{name}"), uid, request })
}

fn to_request(cpu: u64, mem: u64, gpus: u64, gpu_mem: u64, ann: &Value) -> Result<Request, String> {
    let gpus = u32::try_from(gpus).map_err(|_| format!("{GPU} is too large"))?;
    let (gpus, milli) = match (gpus, gpu_mem) {
        (0, 0) => (0, 0),
        (n, 0) => (n, 1000),
        (0 | 1, _) => {
            let share = match ann.get(GPU_SHARE).and_then(Value::as_str) {
                Some(s) => {
                    s.trim().parse::<u32>().map_err(|_| format!("bad {GPU_SHARE} annotation `{s}`"))?
                }
                None => 1,
            };
            (1, share)
        }
        _ => return Err(format!("{GPU_MEMORY} (a slice) goes with at most one {GPU}")),
    };
    Request::new(cpu, mem, gpus, milli, gpu_mem, ModelSet::Any).map_err(|e| e.to_string())
}

/// A Kubernetes quantity in the unit we keep: milli-cores for `cpu`, MiB for `memory`, plain
/// integers for extended resources.
fn quantity(q: &Value, key: &str) -> Result<u64, String> {
    let s = match q {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        _ => return Err(format!("{key}: quantity is not a string")),
    };
    let bad = || format!("{key}: cannot read quantity `{s}`");
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let num: f64 = num.parse().map_err(|_| bad())?;
    let bytes_mult: f64 = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        _ => return Err(bad()),
    };
    let v = num * bytes_mult;
    let out = match key {
        "cpu" => v * 1000.0,
        "memory" => v / (1024.0 * 1024.0),
        _ => v,
    };
    Ok(out.ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_read_in_kubernetes_units() {
        assert_eq!(quantity(&json!("500m"), "cpu"), Ok(500));
        assert_eq!(quantity(&json!("2"), "cpu"), Ok(2000));
        assert_eq!(quantity(&json!("4Gi"), "memory"), Ok(4096));
        assert_eq!(quantity(&json!(2), GPU), Ok(2));
        assert!(quantity(&json!("2x"), GPU).is_err());
    }

    #[test]
    fn a_memory_request_is_a_slice_with_the_annotated_share() {
        let pod = json!({"metadata": {"name": "p", "annotations": {GPU_SHARE: "250"}},
            "spec": {"containers": [{"resources": {"limits": {GPU_MEMORY: "8192"}}}]}});
        let r = parse(&pod).expect("valid pod").request;
        assert!(r.is_slice());
        assert_eq!((r.gpus, r.gpu_milli, r.gpu_memory_mib), (1, 250, 8192));
    }
}
