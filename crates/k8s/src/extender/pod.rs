//! What a `v1.Pod` asks of Gantry: its GPU resources, CPU and memory, as a core [`Request`].
//!
//! `gantry.dev/gpu: N` asks for N whole GPUs; `gantry.dev/gpu-memory: M` asks for M MiB of one
//! GPU (a slice), with its compute share in milli-GPU from the `gantry.dev/gpu-share` annotation
//! (default 1: a memory-only slice reserves memory, not compute, as HAMi's `gpucores: 0` does).
//! Extended resources are integers and requests equal limits, so either map is read.
//!
//! A pod that carries the `gantry.dev/gang` annotation (a name) with `gantry.dev/gang-size` (an
//! integer, 1..=[`MAX_GANG_SIZE`]) is a member of that gang in its namespace; see
//! [`crate::extender::bind`] for how gangs are bound.

use gantry_core::{ModelSet, Request};
use serde_json::Value;

/// Whole GPUs.
pub const GPU: &str = "gantry.dev/gpu";
/// MiB of one GPU's memory (a slice).
pub const GPU_MEMORY: &str = "gantry.dev/gpu-memory";
/// Annotation: a slice's compute share in milli-GPU.
pub const GPU_SHARE: &str = "gantry.dev/gpu-share";

/// Annotation: the name of the gang the pod belongs to (in its namespace).
pub const GANG: &str = "gantry.dev/gang";
/// Annotation: how many pods the gang has (all are bound, or none).
pub const GANG_SIZE: &str = "gantry.dev/gang-size";
/// The largest gang the extender assembles.
pub const MAX_GANG_SIZE: u32 = 1024;

/// A pod's identity and request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRequest {
    /// `namespace/name`.
    pub key: String,
    /// `metadata.uid` (may be empty in hand-written fixtures).
    pub uid: String,
    /// What it asks for.
    pub request: Request,
    /// The gang it belongs to, if any.
    pub gang: Option<GangRef>,
}

impl PodRequest {
    /// A pod outside any gang.
    pub fn new(key: impl Into<String>, request: Request) -> Self {
        Self { key: key.into(), uid: String::new(), request, gang: None }
    }
}

/// A gang, as a member pod names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GangRef {
    /// `namespace/name`: a gang never spans namespaces, so one team cannot join another's gang.
    pub key: String,
    /// How many members it has.
    pub size: u32,
}

/// Parses the pod's request; the error is a sentence for kube-scheduler's event.
pub fn parse(pod: &Value) -> Result<PodRequest, String> {
    let mut out = parse_request(pod)?;
    let meta = &pod["metadata"];
    out.gang = gang(meta["namespace"].as_str().unwrap_or("default"), &meta["annotations"])?;
    Ok(out)
}

/// Like [`parse`] without the gang annotations: what a pod already bound holds, whatever its
/// annotations say.
pub fn parse_request(pod: &Value) -> Result<PodRequest, String> {
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
    Ok(PodRequest { key: format!("{namespace}/{name}"), uid, request, gang: None })
}

/// The pod's gang from its annotations: both or neither, and a size in 1..=[`MAX_GANG_SIZE`].
fn gang(namespace: &str, ann: &Value) -> Result<Option<GangRef>, String> {
    let name = ann.get(GANG).and_then(Value::as_str).map(str::trim);
    let size = ann.get(GANG_SIZE).and_then(Value::as_str).map(str::trim);
    match (name, size) {
        (None, None) => Ok(None),
        (Some(""), _) => Err(format!("the {GANG} annotation is empty")),
        (Some(_), None) => Err(format!("a pod with the {GANG} annotation needs {GANG_SIZE} too")),
        (None, Some(_)) => Err(format!("a pod with the {GANG_SIZE} annotation needs {GANG} too")),
        (Some(name), Some(size)) => match size.parse::<u32>() {
            Ok(n) if (1..=MAX_GANG_SIZE).contains(&n) => {
                Ok(Some(GangRef { key: format!("{namespace}/{name}"), size: n }))
            }
            _ => Err(format!("bad {GANG_SIZE} annotation `{size}`: an integer from 1 to {MAX_GANG_SIZE}")),
        },
    }
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

/// [`quantity`] of a quantity string (a node's allocatable, say).
pub(crate) fn quantity_str(q: &str, key: &str) -> Result<u64, String> {
    quantity(&Value::String(q.to_string()), key)
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

    #[test]
    fn a_gang_is_named_in_the_pods_namespace_and_needs_a_valid_size() {
        let pod = |ann: Value| json!({"metadata": {"name": "w0", "namespace": "ml", "annotations": ann}});
        let g = parse(&pod(json!({GANG: "job-a", GANG_SIZE: "3"}))).expect("valid").gang;
        assert_eq!(g, Some(GangRef { key: "ml/job-a".to_string(), size: 3 }));
        assert_eq!(parse(&pod(json!({}))).expect("valid").gang, None);
        for bad in [
            json!({GANG: "a"}),
            json!({GANG_SIZE: "2"}),
            json!({GANG: "a", GANG_SIZE: "0"}),
            json!({GANG: "a", GANG_SIZE: "x"}),
            json!({GANG: "", GANG_SIZE: "2"}),
        ] {
            assert!(parse(&pod(bad.clone())).is_err(), "{bad}");
        }
    }
}
