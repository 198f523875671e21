//! The pod-resources client against a fake kubelet: a `PodResourcesLister` server on a unix
//! socket in a temporary directory, answering `List` with what a kubelet answers.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gantry_k8s::pod_resources::api::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use gantry_k8s::pod_resources::api::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices, ContainerResources,
    GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest, ListPodResourcesResponse,
    PodResources,
};
use gantry_k8s::pod_resources::client::{self, Assignment, PodResourcesError};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

/// A kubelet whose `List` answer the test can change; `Err` answers with that status.
#[derive(Clone)]
struct Kubelet(Arc<Mutex<Result<ListPodResourcesResponse, Status>>>);

#[tonic::async_trait]
impl PodResourcesLister for Kubelet {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        self.0.lock().expect("lock").clone().map(Response::new)
    }
    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    async fn get(
        &self,
        _: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
}

fn serve(path: &Path, kubelet: Kubelet) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(path).expect("bind pod-resources socket");
    let server = tonic::transport::Server::builder()
        .add_service(PodResourcesListerServer::new(kubelet))
        .serve_with_incoming(UnixListenerStream::new(listener));
    tokio::spawn(async move { server.await.expect("fake kubelet serves") })
}

fn devices(resource: &str, ids: &[&str]) -> ContainerDevices {
    ContainerDevices {
        resource_name: resource.into(),
        device_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        topology: None,
    }
}

fn container(name: &str, devices: Vec<ContainerDevices>) -> ContainerResources {
    ContainerResources { name: name.into(), devices, ..Default::default() }
}

fn pod(namespace: &str, name: &str, containers: Vec<ContainerResources>) -> PodResources {
    PodResources { name: name.into(), namespace: namespace.into(), containers, ..Default::default() }
}

/// What a kubelet lists: a whole-GPU pod, a slice pod (gantry memory units), a time-slicing
/// replica, and a pod that asked for no device (listed, holding nothing).
fn answer() -> ListPodResourcesResponse {
    ListPodResourcesResponse {
        pod_resources: vec![
            pod("ml", "train-0", vec![container("trainer", vec![devices("gantry.dev/gpu", &["GPU-aaaa"])])]),
            pod(
                "inference",
                "serve-1",
                vec![
                    container("model", vec![devices("gantry.dev/gpu-memory", &["1-0", "1-1"])]),
                    container("sidecar", vec![]),
                ],
            ),
            pod("ml", "notebook", vec![container("lab", vec![devices("nvidia.com/gpu", &["GPU-bbbb::2"])])]),
            pod(
                "kube-system",
                "coredns-x",
                vec![container("coredns", vec![devices("example.com/none", &[])])],
            ),
        ],
    }
}

fn a(namespace: &str, pod: &str, container: &str, resource: &str, id: &str) -> Assignment {
    Assignment {
        namespace: namespace.into(),
        pod: pod.into(),
        container: container.into(),
        resource: resource.into(),
        device_id: id.into(),
    }
}

#[tokio::test]
async fn list_flattens_the_kubelets_answer_into_sorted_assignments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("kubelet.sock");
    let kubelet = Kubelet(Arc::new(Mutex::new(Ok(answer()))));
    let server = serve(&socket, kubelet);
    let got = client::list(&socket, Duration::from_secs(10)).await.expect("list");
    assert_eq!(
        got,
        vec![
            a("inference", "serve-1", "model", "gantry.dev/gpu-memory", "1-0"),
            a("inference", "serve-1", "model", "gantry.dev/gpu-memory", "1-1"),
            a("ml", "notebook", "lab", "nvidia.com/gpu", "GPU-bbbb::2"),
            a("ml", "train-0", "trainer", "gantry.dev/gpu", "GPU-aaaa"),
        ]
    );
    server.abort();
}

#[tokio::test]
async fn a_missing_socket_or_a_failing_kubelet_is_an_error_not_an_empty_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("kubelet.sock");
    let err = client::list(&socket, Duration::from_secs(10)).await.expect_err("no kubelet");
    assert!(matches!(err, PodResourcesError::Connect { .. }), "{err}");
    assert!(err.to_string().contains("kubelet.sock"), "{err}");

    let kubelet = Kubelet(Arc::new(Mutex::new(Err(Status::permission_denied("nope")))));
    let server = serve(&socket, kubelet);
    let err = client::list(&socket, Duration::from_secs(10)).await.expect_err("refused");
    assert!(
        matches!(err, PodResourcesError::Status(ref s) if s.code() == tonic::Code::PermissionDenied),
        "{err}"
    );
    server.abort();
}

#[tokio::test]
async fn the_poller_hands_on_each_answer_and_keeps_going_through_failures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("kubelet.sock");
    let state = Arc::new(Mutex::new(Ok(answer())));
    let server = serve(&socket, Kubelet(state.clone()));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<Assignment>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let poller = tokio::spawn(client::poll(
        socket.clone(),
        Duration::from_millis(20),
        move |got| {
            let _ = tx.send(got.to_vec());
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    let first = rx.recv().await.expect("first answer");
    assert_eq!(first.len(), 4);
    // The kubelet fails for a while, then the pods leave: the poller survives and reports that.
    *state.lock().expect("lock") = Err(Status::unavailable("restarting"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    *state.lock().expect("lock") = Ok(ListPodResourcesResponse::default());
    loop {
        let next = rx.recv().await.expect("poller still running");
        if next.is_empty() {
            break;
        }
    }
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(20), poller).await.expect("poller stops").expect("joins");
    server.abort();
}
