//! The extender fed kube-scheduler's own request shapes (`k8s.io/kube-scheduler/extender/v1`,
//! Go field names as JSON keys, a full `v1.Pod`), in process through the router; and an openb
//! trace replayed through the extender's filter, prioritize and bind against `gantry sim`.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gantry_core::NodeSpec;
use gantry_k8s::extender::bench;
use gantry_k8s::extender::wire::{ExtenderBindingResult, ExtenderFilterResult, HostPriorityList};
use gantry_k8s::extender::{Model, router};
use serde_json::{Value, json};
use tower::ServiceExt;

fn node(name: &str, gpus: u32) -> NodeSpec {
    NodeSpec {
        name: name.to_string(),
        cpu_milli: 64_000,
        memory_mib: 256 * 1024,
        gpus,
        gpu_model: Some("A100".to_string()),
        gpu_memory_mib: 81_920,
    }
}

/// A pod as kube-scheduler serialises it (trimmed of status fields it also sends).
fn pod(name: &str, resources: Value) -> Value {
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "ml", "uid": "6f1c2a9e-0000-4000-8000-000000000001",
                     "resourceVersion": "4711", "creationTimestamp": "2026-11-30T12:00:00Z",
                     "labels": {"app": "train"}, "annotations": {}},
        "spec": {"containers": [{"name": "main", "image": "pytorch:2.5",
                                 "resources": {"limits": resources.clone(), "requests": resources}}],
                 "schedulerName": "default-scheduler", "restartPolicy": "Never"},
        "status": {"phase": "Pending", "qosClass": "Guaranteed"}
    })
}

/// `ExtenderArgs` with `nodeCacheCapable: true`: no `Nodes`, just `NodeNames`.
fn args(pod: Value, names: &[&str]) -> Value {
    json!({"Pod": pod, "NodeNames": names})
}

/// Three nodes: `full` has every GPU taken, `half` has 4 of 8 free, `empty` has 8 free.
fn model() -> Arc<Mutex<Model>> {
    let mut m = Model::gantry();
    for (name, gpus) in [("full", 8), ("half", 8), ("empty", 8), ("cpu", 0)] {
        m.upsert_node(node(name, gpus)).expect("distinct");
    }
    let whole =
        |n| gantry_core::Request::new(1000, 1024, n, 1000, 0, gantry_core::ModelSet::Any).expect("valid");
    m.upsert_pod("ml/a", "full", whole(8)).expect("fits");
    m.upsert_pod("ml/b", "half", whole(4)).expect("fits");
    Arc::new(Mutex::new(m))
}

async fn post(model: &Arc<Mutex<Model>>, path: &str, body: String) -> (StatusCode, Vec<u8>) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request");
    let resp = router(model.clone()).oneshot(req).await.expect("infallible");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.expect("body");
    (status, bytes.to_vec())
}

#[tokio::test]
async fn filter_excludes_full_nodes_with_a_reason() {
    let m = model();
    let body = args(
        pod("train-0", json!({"cpu": "4", "memory": "16Gi", "gantry.dev/gpu": "2"})),
        &["full", "half", "empty", "cpu"],
    );
    let (status, bytes) = post(&m, "/filter", body.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let raw: Value = serde_json::from_slice(&bytes).expect("json");
    assert!(raw.get("NodeNames").is_some() && raw.get("FailedNodes").is_some() && raw.get("Error").is_some());
    let result: ExtenderFilterResult = serde_json::from_value(raw).expect("filter result");
    assert_eq!(result.node_names, Some(vec!["half".to_string(), "empty".to_string()]));
    assert_eq!(result.failed_nodes.get("full").map(String::as_str), Some("not enough idle GPUs"));
    assert!(result.failed_and_unresolvable_nodes.contains_key("cpu"));
    assert_eq!(result.error, "");
}

#[tokio::test]
async fn filter_without_node_cache_echoes_the_fitting_nodes() {
    let m = model();
    let nodes = json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {},
        "items": [{"metadata": {"name": "full"}}, {"metadata": {"name": "empty"}}]});
    let body = json!({"Pod": pod("train-1", json!({"gantry.dev/gpu": "1"})), "Nodes": nodes});
    let (status, bytes) = post(&m, "/filter", body.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let raw: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(raw["Nodes"]["items"], json!([{"metadata": {"name": "empty"}}]));
}

#[tokio::test]
async fn prioritize_prefers_the_node_the_core_policy_prefers() {
    let m = model();
    // Gantry keeps the idle 8-GPU node whole for big requests: a 2-GPU pod goes to `half`.
    let body = args(pod("train-2", json!({"gantry.dev/gpu": "2"})), &["half", "empty"]);
    let (status, bytes) = post(&m, "/prioritize", body.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let scores: HostPriorityList = serde_json::from_slice(&bytes).expect("HostPriorityList");
    let raw: Value = serde_json::from_slice(&bytes).expect("json");
    assert!(raw[0].get("Host").is_some() && raw[0].get("Score").is_some());
    let top = scores.iter().max_by_key(|h| h.score).expect("scored");
    assert_eq!(top.host, "half");
    assert!(scores.iter().all(|h| (0..=10).contains(&h.score)));
    assert_eq!(top.score, 10);
}

#[tokio::test]
async fn bind_records_the_decision_and_refuses_once_the_node_is_full() {
    let m = model();
    let p = pod("train-3", json!({"gantry.dev/gpu": "4"}));
    post(&m, "/filter", args(p, &["half"]).to_string()).await;
    let bind = json!({"PodName": "train-3", "PodNamespace": "ml", "PodUID": "6f1c2a9e-0000-4000-8000-000000000001", "Node": "half"});
    let (_, bytes) = post(&m, "/bind", bind.to_string()).await;
    let ok: ExtenderBindingResult = serde_json::from_slice(&bytes).expect("binding result");
    assert_eq!(ok.error, "");
    let p = pod("train-4", json!({"gantry.dev/gpu": "4"}));
    post(&m, "/filter", args(p, &["half"]).to_string()).await;
    let bind = json!({"PodName": "train-4", "PodNamespace": "ml", "PodUID": "x", "Node": "half"});
    let (status, bytes) = post(&m, "/bind", bind.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let refused: ExtenderBindingResult = serde_json::from_slice(&bytes).expect("binding result");
    assert!(refused.error.contains("not enough idle GPUs"), "{}", refused.error);
}

#[tokio::test]
async fn malformed_json_gets_400() {
    let m = model();
    for path in ["/filter", "/prioritize", "/bind"] {
        let (status, body) = post(&m, path, "{\"Pod\": ".to_string()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert!(String::from_utf8_lossy(&body).starts_with("malformed request"));
    }
}

#[test]
fn benchmark_reports_p99_against_best_fit_on_1000_nodes() {
    let r = bench::run(1000, 200);
    println!("{r}");
    assert!(r.gantry_p99_us > 0.0 && r.bestfit_p99_us > 0.0);
}

#[test]
fn the_extenders_top_node_is_the_one_the_core_policy_places_on_as_binds_change_the_cluster() {
    use gantry_core::{ModelSet, PolicyKind, RandomSource, SplitMix64};
    use gantry_k8s::extender::model::default_typical_pods;
    use gantry_k8s::extender::pod::PodRequest;
    let mut m = Model::gantry();
    let names: Vec<String> = (0..40).map(|i| format!("n{i:02}")).collect();
    for (i, name) in names.iter().enumerate() {
        m.upsert_node(node(name, if i % 3 == 0 { 4 } else { 8 })).expect("distinct");
    }
    let mut policy = PolicyKind::Gantry.build(Arc::new(default_typical_pods()));
    let mut rng = SplitMix64::new(3);
    for i in 0..300 {
        let request = match rng.next_u64() % 4 {
            0 => gantry_core::Request::new(4000, 8192, 1, 1000, 0, ModelSet::Any),
            1 => gantry_core::Request::new(8000, 8192, 2, 1000, 0, ModelSet::Any),
            2 => gantry_core::Request::new(2000, 4096, 1, 500, 10_240, ModelSet::Any),
            _ => gantry_core::Request::new(1000, 4096, 1, 250, 4096, ModelSet::Any),
        }
        .expect("valid");
        let order: Vec<usize> = (0..names.len()).collect();
        let expected = policy.place(m.cluster(), &request, &order, &mut rng);
        let pod = PodRequest::new(format!("ml/p{i}"), request);
        let fit = m.filter(&pod, &names).fit;
        let scores = m.prioritize(&pod, &fit);
        let top = scores.iter().find(|h| h.score == 10).map(|h| h.host.clone());
        assert_eq!(top, expected.map(|p| names[p.node].clone()), "pod {i}");
        if let Some(top) = top {
            m.bind(&pod.key, &top).expect("the top node fits");
        }
    }
}

fn openb(file: &str) -> std::path::PathBuf {
    let path =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/traces/openb").join(file);
    assert!(path.is_file(), "{} is missing from the repository", path.display());
    path
}

/// kube-scheduler's choice among the extender's scores: the highest; kube-scheduler breaks ties
/// at random, the simulator by its seeded node order, which is the order the names come in.
fn top(scores: &HostPriorityList) -> Option<&str> {
    let best = scores.iter().map(|h| h.score).max()?;
    scores.iter().find(|h| h.score == best && h.score > 0).map(|h| h.host.as_str())
}

#[test]
fn an_openb_trace_replayed_through_the_extender_lands_every_pod_on_the_node_and_gpus_gantry_sim_chose() {
    use gantry_core::{Cluster, PolicyKind};
    use gantry_k8s::extender::pod::PodRequest;
    use gantry_sim::{Experiment, read_nodes, read_pods};

    // Every fourth GPU node of openb (303 of 1,213: the mix of models and sizes is kept, the run
    // stays short) and the default pod list, tuned to fill the cluster.
    let mut nodes = read_nodes(&openb("openb_node_list_gpu_node.csv")).expect("node list");
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut nodes: Vec<_> = nodes.into_iter().step_by(4).collect();
    let pods = read_pods(&openb("openb_pod_list_default.csv")).expect("pod list");
    let exp = Experiment::new(nodes.clone(), pods, 1.0).expect("cluster");
    let replay =
        exp.replay(PolicyKind::Gantry, 7).expect("the ledger takes every placement the policy makes");
    // The extender's model, filled with the same nodes in the same (name) order the simulator
    // uses, scoring with the same policy over the same typical pods.
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut model = Model::new(PolicyKind::Gantry, Arc::new(exp.typical().clone()));
    for n in &nodes {
        model.upsert_node(n.clone()).expect("node");
    }
    let mut expected = Cluster::new(nodes.clone()).expect("ledger");
    let names: Vec<String> = replay.order.iter().map(|id| nodes[*id].name.clone()).collect();
    let (mut placed, mut unplaced) = (0, 0);
    for (k, (request, decision)) in replay.pods.iter().enumerate() {
        let pod = PodRequest::new(format!("openb/pod-{k}"), *request);
        let fit = model.filter(&pod, &names).fit;
        let scores = model.prioritize(&pod, &fit);
        match (top(&scores), decision) {
            (None, None) => unplaced += 1,
            (Some(host), Some(p)) => {
                assert_eq!(
                    host, nodes[p.node].name,
                    "pod {k} ({request:?}): extender and gantry sim disagree on the node"
                );
                model.bind(&pod.key, host).expect("bind");
                expected.allocate(k as u64, request, p).expect("the simulator's placement fits");
                let (got, want) = (model.node(host).expect("node"), &expected.nodes()[p.node]);
                assert_eq!(
                    (&got.gpu_free, got.cpu_free),
                    (&want.gpu_free, want.cpu_free),
                    "pod {k}: the extender's bind took other GPUs than gantry sim ({:?})",
                    p.gpus
                );
                placed += 1;
            }
            (got, want) => panic!("pod {k} ({request:?}): extender chose {got:?}, gantry sim {want:?}"),
        }
    }
    assert!(
        placed > 500 && unplaced > 0,
        "the replay should fill the cluster: {placed} placed, {unplaced} not"
    );
    eprintln!("{placed} pods placed identically, {unplaced} unplaceable in both");
}
