//! The extender against a recorded API-server conversation: kube-rs's own mock service
//! (`tower_test::mock::pair` behind `kube::Client::new`) stands in for the API server, so every
//! request the extender makes is checked (method, path, body) and answered as the API server
//! answers. kube-scheduler's side is its real JSON (`ExtenderArgs`, `ExtenderBindingArgs`)
//! through the router.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gantry_core::NodeSpec;
use gantry_k8s::extender::wire::{ExtenderBindingResult, ExtenderFilterResult};
use gantry_k8s::extender::{Binder, Extender, Model, routes, watch};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::client::Body as KubeBody;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tower::ServiceExt;
use tower_test::mock;

type Handle = mock::Handle<http::Request<KubeBody>, http::Response<KubeBody>>;

const UID: &str = "6f1c2a9e-0000-4000-8000-000000000001";

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

/// A pod as kube-scheduler sends it in `ExtenderArgs.Pod`, with optional annotations.
fn pod(name: &str, gpus: u32, annotations: Value) -> Value {
    let res = json!({"cpu": "4", "memory": "16Gi", "gantry.dev/gpu": gpus.to_string()});
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "ml", "uid": UID, "resourceVersion": "4711",
                     "creationTimestamp": "2026-11-30T12:00:00Z", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "pytorch:2.5",
                                 "resources": {"limits": res.clone(), "requests": res}}],
                 "schedulerName": "default-scheduler", "restartPolicy": "Never"},
        "status": {"phase": "Pending", "qosClass": "Guaranteed"}
    })
}

/// An extender whose binds and watches go to the returned mock API server.
fn extender(nodes: &[(&str, u32)]) -> (Arc<Extender>, Handle, kube::Client) {
    let mut m = Model::gantry();
    for (name, gpus) in nodes {
        m.upsert_node(node(name, *gpus)).expect("distinct");
    }
    let (service, handle) = mock::pair::<http::Request<KubeBody>, http::Response<KubeBody>>();
    let client = kube::Client::new(service, "default");
    let ext = Extender::new(Arc::new(Mutex::new(m)), Binder::Api(client.clone()), Duration::from_secs(30));
    (ext, handle, client)
}

async fn post(ext: &Arc<Extender>, path: &str, body: Value) -> (StatusCode, Value) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let resp = routes(ext.clone()).oneshot(req).await.expect("infallible");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.expect("body");
    (status, serde_json::from_slice(&bytes).expect("json answer"))
}

async fn filter(ext: &Arc<Extender>, pod: Value, names: &[&str]) -> ExtenderFilterResult {
    let (status, raw) = post(ext, "/filter", json!({"Pod": pod, "NodeNames": names})).await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_value(raw).expect("ExtenderFilterResult")
}

fn bind_args(name: &str, node: &str) -> Value {
    json!({"PodName": name, "PodNamespace": "ml", "PodUID": UID, "Node": node})
}

async fn bind(ext: &Arc<Extender>, name: &str, node: &str) -> String {
    let (status, raw) = post(ext, "/bind", bind_args(name, node)).await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_value::<ExtenderBindingResult>(raw).expect("ExtenderBindingResult").error
}

/// One request the extender made: method, path and query, JSON body.
#[derive(Debug)]
struct Seen {
    method: String,
    uri: String,
    body: Value,
}

/// Answers the next request with `status` and `answer`, returning what was asked.
async fn answer(handle: &mut Handle, status: u16, answer: Value) -> Seen {
    let (req, send) = pin!(handle).next_request().await.expect("the extender called the API server");
    let (parts, body) = req.into_parts();
    let bytes = body.collect_bytes().await.expect("request body");
    let body =
        if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("json body") };
    let resp = http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(KubeBody::from(answer.to_string().into_bytes()))
        .expect("response");
    send.send_response(resp);
    Seen { method: parts.method.to_string(), uri: parts.uri.to_string(), body }
}

/// The API server's answer to a created Binding.
fn created() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// Nothing more reaches the API server (on paused time: once every task is idle).
async fn silent(handle: &mut Handle) {
    let next = tokio::time::timeout(Duration::from_secs(1), pin!(handle).next_request()).await;
    assert!(
        next.is_err(),
        "unexpected API request: {:?}",
        next.ok().flatten().map(|(r, _)| r.uri().to_string())
    );
}

fn free_gpus(ext: &Arc<Extender>, node: &str) -> Vec<u32> {
    ext.lock_model().expect("model").node(node).expect("node").gpu_free.clone()
}

#[tokio::test(start_paused = true)]
async fn bind_creates_the_pods_binding_with_its_uid_and_node_and_the_model_holds_the_pod() {
    let (ext, mut handle, _) = extender(&[("half", 8), ("empty", 8)]);
    let f = filter(&ext, pod("train-0", 4, json!({})), &["half", "empty"]).await;
    assert_eq!(f.node_names, Some(vec!["half".to_string(), "empty".to_string()]));
    let binding = tokio::spawn({
        let ext = ext.clone();
        async move { bind(&ext, "train-0", "half").await }
    });
    let seen = answer(&mut handle, 201, created()).await;
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.uri.split('?').next(), Some("/api/v1/namespaces/ml/pods/train-0/binding"));
    assert_eq!(
        seen.body,
        json!({"apiVersion": "v1", "kind": "Binding",
               "metadata": {"name": "train-0", "namespace": "ml", "uid": UID},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "half"}})
    );
    assert_eq!(binding.await.expect("bind"), "");
    assert_eq!(ext.lock_model().expect("model").holding("ml/train-0"), Some(("half", false)));
    assert_eq!(free_gpus(&ext, "half").iter().filter(|g| **g == 1000).count(), 4);
    silent(&mut handle).await;
}

#[tokio::test(start_paused = true)]
async fn a_409_conflict_is_the_bind_error_and_leaves_the_model_as_it_was() {
    let (ext, mut handle, _) = extender(&[("half", 8)]);
    filter(&ext, pod("train-1", 4, json!({})), &["half"]).await;
    let before = free_gpus(&ext, "half");
    let binding = tokio::spawn({
        let ext = ext.clone();
        async move { bind(&ext, "train-1", "half").await }
    });
    let conflict = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Operation cannot be fulfilled on pods/binding \"train-1\": pod train-1 is already assigned to node \"other\"",
        "reason": "Conflict", "details": {"name": "train-1", "kind": "pods/binding"}, "code": 409});
    let seen = answer(&mut handle, 409, conflict).await;
    assert_eq!(seen.body["target"]["name"], "half");
    let error = binding.await.expect("bind");
    assert!(error.contains("409 Conflict") && error.contains("already assigned"), "{error}");
    assert_eq!(free_gpus(&ext, "half"), before, "the refused bind left GPUs taken");
    assert_eq!(ext.lock_model().expect("model").holding("ml/train-1"), None);
    // The pod is still known from filter: kube-scheduler's retry can bind it elsewhere.
    assert!(ext.lock_model().expect("model").pending("ml/train-1").is_some());
}

fn gang(name: &str, size: u32) -> Value {
    json!({"gantry.dev/gang": name, "gantry.dev/gang-size": size.to_string()})
}

#[tokio::test(start_paused = true)]
async fn a_gang_of_three_binds_all_three_only_when_the_third_arrives() {
    let (ext, mut handle, _) = extender(&[("n1", 8), ("n2", 8)]);
    for (i, node) in ["n1", "n2", "n1"].iter().enumerate() {
        let f = filter(&ext, pod(&format!("w{i}"), 2, gang("job", 3)), &["n1", "n2"]).await;
        assert!(f.node_names.expect("names").contains(&node.to_string()));
    }
    let held: Vec<_> = [("w0", "n1"), ("w1", "n2")]
        .into_iter()
        .map(|(p, n)| {
            let ext = ext.clone();
            tokio::spawn(async move { bind(&ext, p, n).await })
        })
        .collect();
    // Two members hold reservations; no Binding exists yet and both binds are still waiting.
    silent(&mut handle).await;
    assert!(held.iter().all(|h| !h.is_finished()));
    let assembly = ext.assembling().expect("table").expect("assembling");
    assert_eq!((assembly.gang.as_str(), assembly.members.len()), ("ml/job", 2));
    assert_eq!(free_gpus(&ext, "n2").iter().filter(|g| **g == 1000).count(), 6, "w1's reservation counts");
    let third = tokio::spawn({
        let ext = ext.clone();
        async move { bind(&ext, "w2", "n1").await }
    });
    let mut bound = BTreeMap::new();
    for _ in 0..3 {
        let seen = answer(&mut handle, 201, created()).await;
        assert_eq!(seen.method, "POST");
        bound.insert(
            seen.body["metadata"]["name"].as_str().expect("name").to_string(),
            seen.body["target"]["name"].clone(),
        );
    }
    assert_eq!(
        bound,
        BTreeMap::from([("w0".into(), json!("n1")), ("w1".into(), json!("n2")), ("w2".into(), json!("n1"))])
    );
    assert_eq!(third.await.expect("bind"), "");
    for h in held {
        assert_eq!(h.await.expect("bind"), "");
    }
    for p in ["ml/w0", "ml/w1", "ml/w2"] {
        assert_eq!(ext.lock_model().expect("model").holding(p).map(|h| h.1), Some(false), "{p} bound");
    }
    assert!(ext.assembling().expect("table").is_none());
    silent(&mut handle).await;
}

#[tokio::test(start_paused = true)]
async fn a_gang_that_cannot_complete_releases_its_reservations_at_the_timeout_and_blocks_no_other_gang() {
    let (ext, mut handle, _) = extender(&[("n1", 8)]);
    let before = free_gpus(&ext, "n1");
    for i in 0..2 {
        filter(&ext, pod(&format!("a{i}"), 2, gang("a", 3)), &["n1"]).await;
    }
    filter(&ext, pod("b0", 2, gang("b", 2)), &["n1"]).await;
    let held: Vec<_> = ["a0", "a1"]
        .into_iter()
        .map(|p| {
            let ext = ext.clone();
            tokio::spawn(async move { bind(&ext, p, "n1").await })
        })
        .collect();
    tokio::task::yield_now().await;
    // While gang a holds part of the node, gang b is turned away at once, not left waiting.
    let busy = bind(&ext, "b0", "n1").await;
    assert!(busy.contains("gang ml/a is being assembled"), "{busy}");
    for h in held {
        let error = h.await.expect("bind");
        assert!(error.contains("did not complete within 30s") && error.contains("2 of 3"), "{error}");
    }
    assert_eq!(free_gpus(&ext, "n1"), before, "the expired gang still holds GPUs");
    silent(&mut handle).await;
    // Now gang b may assemble.
    filter(&ext, pod("b1", 2, gang("b", 2)), &["n1"]).await;
    let b0 = tokio::spawn({
        let ext = ext.clone();
        async move { bind(&ext, "b0", "n1").await }
    });
    tokio::task::yield_now().await;
    let b1 = tokio::spawn({
        let ext = ext.clone();
        async move { bind(&ext, "b1", "n1").await }
    });
    answer(&mut handle, 201, created()).await;
    answer(&mut handle, 201, created()).await;
    assert_eq!((b0.await.expect("b0"), b1.await.expect("b1")), (String::new(), String::new()));
}

fn api_node(name: &str, gpus: u32) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "10",
                     "labels": {"gantry.dev/gpu-model": "A100", "gantry.dev/gpu-memory-mib": "81920"}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "gantry.dev/gpu": gpus.to_string()},
                   "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110", "gantry.dev/gpu": gpus.to_string()}}
    }))
    .expect("Node")
}

/// A pod bound by someone else (another scheduler, or `spec.nodeName` set by hand).
fn bound_pod(name: &str, node: &str, gpus: u32, phase: &str) -> Pod {
    let mut p = pod(name, gpus, json!({}));
    p["spec"]["nodeName"] = json!(node);
    p["spec"]["schedulerName"] = json!("other-scheduler");
    p["status"]["phase"] = json!(phase);
    serde_json::from_value(p).expect("Pod")
}

#[tokio::test]
async fn watcher_events_node_added_pod_bound_elsewhere_and_pod_deleted_change_what_filter_answers() {
    let (ext, _handle, _) = extender(&[]);
    let (mut nodes, mut pods) = (watch::NodeFeed::default(), watch::PodFeed::default());
    let wants_8 = || pod("big", 8, json!({}));
    let apply_nodes = |nodes: &mut watch::NodeFeed, e| nodes.apply(&mut ext.lock_model().expect("model"), e);
    for e in [Event::Init, Event::InitApply(api_node("a", 8)), Event::InitDone] {
        apply_nodes(&mut nodes, e);
    }
    let f = filter(&ext, wants_8(), &["a", "b"]).await;
    assert_eq!(f.node_names, Some(vec!["a".to_string()]));
    assert!(f.failed_and_unresolvable_nodes["b"].contains("not known"));
    // Node added.
    apply_nodes(&mut nodes, Event::Apply(api_node("b", 8)));
    assert_eq!(filter(&ext, wants_8(), &["a", "b"]).await.node_names, Some(vec!["a".into(), "b".into()]));
    // A pod bound to b by someone else takes its GPUs.
    let mut apply_pods = |e| pods.apply(&mut ext.lock_model().expect("model"), e);
    apply_pods(Event::Apply(bound_pod("other", "b", 4, "Running")));
    let f = filter(&ext, wants_8(), &["a", "b"]).await;
    assert_eq!(f.node_names, Some(vec!["a".to_string()]));
    assert_eq!(f.failed_nodes["b"], "not enough idle GPUs");
    // Deleted: its GPUs are free again.
    let gone = apply_pods(Event::Delete(bound_pod("other", "b", 4, "Running")));
    assert_eq!(gone.gone, vec!["ml/other".to_string()]);
    assert_eq!(filter(&ext, wants_8(), &["a", "b"]).await.node_names, Some(vec!["a".into(), "b".into()]));
    // A pod that finished frees its GPUs too; a pending one holds none.
    apply_pods(Event::Apply(bound_pod("done", "a", 8, "Running")));
    assert_eq!(filter(&ext, wants_8(), &["a"]).await.node_names, Some(vec![]));
    apply_pods(Event::Apply(bound_pod("done", "a", 8, "Succeeded")));
    assert_eq!(filter(&ext, wants_8(), &["a"]).await.node_names, Some(vec!["a".to_string()]));
    // Node deleted: filter no longer offers it.
    apply_nodes(&mut nodes, Event::Delete(api_node("b", 8)));
    assert!(filter(&ext, wants_8(), &["b"]).await.failed_and_unresolvable_nodes.contains_key("b"));
}

#[tokio::test]
async fn a_pod_seen_bound_before_its_node_takes_its_gpus_when_the_node_arrives_and_a_relist_drops_the_missed_deletions()
 {
    let (ext, _handle, _) = extender(&[]);
    let (mut nodes, mut pods) = (watch::NodeFeed::default(), watch::PodFeed::default());
    let mut model = ext.lock_model().expect("model");
    pods.apply(&mut model, Event::Apply(bound_pod("early", "late-node", 6, "Running")));
    nodes.apply(&mut model, Event::Apply(api_node("late-node", 8)));
    assert_eq!(model.node("late-node").expect("node").gpu_free.iter().filter(|g| **g == 1000).count(), 2);
    // The watch restarts; the full list no longer has the pod (deleted while the watch was down).
    for e in [Event::Init, Event::InitDone] {
        pods.apply(&mut model, e);
    }
    assert_eq!(model.node("late-node").expect("node").gpu_free, vec![1000; 8]);
    assert_eq!(model.holding("ml/early"), None);
}

/// Answers the watchers' list and watch requests like an API server with one GPU node and, on
/// the first pod watch, one pod bound to it by someone else; later watches are left open.
async fn api_server(mut handle: Handle) {
    let (mut open, mut pods_watched) = (Vec::new(), false);
    while let Some((req, send)) = pin!(&mut handle).next_request().await {
        let (path, query) = (req.uri().path().to_string(), req.uri().query().unwrap_or_default().to_string());
        let body = match (path.as_str(), query.contains("watch=true")) {
            ("/api/v1/nodes", false) => json!({"apiVersion": "v1", "kind": "NodeList",
                "metadata": {"resourceVersion": "100"}, "items": [api_node("gpu-1", 8)]}),
            ("/api/v1/pods", false) => {
                // Only bound, unfinished pods, as kube-scheduler's own informer asks.
                assert!(
                    query.contains("fieldSelector=spec.nodeName%21%3D%2Cstatus.phase%21%3DSucceeded"),
                    "{query}"
                );
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "100"}, "items": []})
            }
            ("/api/v1/pods", true) if !pods_watched => {
                pods_watched = true;
                let mut added =
                    serde_json::to_value(bound_pod("elsewhere", "gpu-1", 8, "Running")).expect("pod");
                added["metadata"]["resourceVersion"] = json!("101");
                json!({"type": "ADDED", "object": added})
            }
            (_, true) => {
                open.push(send);
                continue;
            }
            _ => panic!("unexpected API request {path}?{query}"),
        };
        send.send_response(http::Response::new(KubeBody::from(format!("{body}\n").into_bytes())));
    }
}

#[tokio::test]
async fn the_watchers_list_and_watch_the_api_server_and_filter_follows_a_pod_bound_elsewhere() {
    let (ext, handle, client) = extender(&[]);
    tokio::spawn(api_server(handle));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(watch::run(client, ext.clone(), move |what| {
        let _ = tx.send(what);
    }));
    let mut listed = vec![rx.recv().await.expect("listed"), rx.recv().await.expect("listed")];
    listed.sort();
    assert_eq!(listed, ["nodes", "pods"]);
    // The watch event arrives after the lists: wait for the model to show it.
    for _ in 0..200 {
        if ext.lock_model().expect("model").holding("ml/elsewhere").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ext.lock_model().expect("model").holding("ml/elsewhere"), Some(("gpu-1", false)));
    let f = filter(&ext, pod("next", 1, json!({})), &["gpu-1"]).await;
    assert_eq!(f.failed_nodes["gpu-1"], "not enough idle GPUs");
}

#[tokio::test(start_paused = true)]
async fn a_bind_for_a_pod_filter_did_not_show_this_process_reads_the_pod_first() {
    let (ext, mut handle, _) = extender(&[("half", 8)]);
    let binding = tokio::spawn({
        let ext = ext.clone();
        async move { bind(&ext, "train-9", "half").await }
    });
    let seen = answer(&mut handle, 200, pod("train-9", 2, json!({}))).await;
    assert_eq!((seen.method.as_str(), seen.uri.as_str()), ("GET", "/api/v1/namespaces/ml/pods/train-9"));
    let seen = answer(&mut handle, 201, created()).await;
    assert_eq!(seen.body["target"]["name"], "half");
    assert_eq!(binding.await.expect("bind"), "");
    assert_eq!(free_gpus(&ext, "half").iter().filter(|g| **g == 1000).count(), 6);
}

#[test]
fn a_pod_bound_elsewhere_holds_its_gpus_whatever_its_gang_annotations_say() {
    let mut p = serde_json::to_value(bound_pod("odd", "n1", 4, "Running")).expect("pod");
    p["metadata"]["annotations"] = json!({"gantry.dev/gang": "g"});
    let p: Pod = serde_json::from_value(p).expect("Pod");
    match watch::pod_view(&p) {
        watch::PodView::Bound(key, node, r) => {
            assert_eq!((key.as_str(), node.as_str(), r.gpus), ("ml/odd", "n1", 4))
        }
        other => panic!("a bound pod was not counted: {other:?}"),
    }
}
