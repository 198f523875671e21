//! Gantry as Kubernetes components, on Kubernetes' own state.
//!
//! This slice holds the kube-scheduler extender ([`extender`]): the wire types kube-scheduler
//! sends and expects, a model of nodes and the GPU pods on them, and an axum router answering
//! `POST /filter`, `/prioritize` and `/bind` with the scheduling core's `gantry` policy — the
//! same [`gantry_core::Policy`] that `gantry sim` runs. It is not yet a controller: the model is
//! filled through [`extender::Model::upsert_node`] / [`extender::Model::upsert_pod`], which a
//! future API-server watcher will call. The kubelet device plugin comes later (issue 10).
//!
//! Start reading at [`extender::wire`] (the JSON), then [`extender::model`] (decisions), then
//! [`extender::router`] (HTTP).

pub mod extender;
