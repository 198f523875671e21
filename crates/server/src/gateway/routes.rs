//! The routing table: what the service controller tells the gateway, as plain values.
//!
//! The controller owns the truth (which replicas exist, where they listen, whether their
//! readiness probe passes); the gateway only reads it. It hands over a whole table at a time
//! ([`super::Gateway::set_routes`]); a replica that keeps its id and address across tables keeps
//! its in-flight count and its pooled connections, so a table that changes one replica's
//! readiness disturbs no request on the others.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;

/// One service, as the gateway's path names it: `/<team>/<service>/…`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    /// The owning team.
    pub team: String,
    /// The service's name within the team.
    pub service: String,
}

impl ServiceKey {
    /// The key of `team`'s service `service`.
    pub fn new(team: impl Into<String>, service: impl Into<String>) -> Self {
        Self { team: team.into(), service: service.into() }
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.team, self.service)
    }
}

/// One replica the gateway may send requests to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaEndpoint {
    /// The replica's id (its job id, say): the `replica` label of the metrics.
    pub id: String,
    /// Where it listens (plain HTTP/1.1).
    pub addr: SocketAddr,
    /// Whether its readiness probe passes: only ready replicas get requests.
    pub ready: bool,
    /// Requests it may have in flight at once (`None`: no cap).
    pub max_concurrency: Option<usize>,
}

impl ReplicaEndpoint {
    /// A ready replica without a concurrency cap.
    pub fn ready(id: impl Into<String>, addr: SocketAddr) -> Self {
        Self { id: id.into(), addr, ready: true, max_concurrency: None }
    }
}

/// How the gateway serves one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The replicas, ready or not.
    pub replicas: Vec<ReplicaEndpoint>,
    /// Anyone may call it, without a token (`--public`); else only tokens the
    /// [`super::Authorizer`] accepts for it.
    pub public: bool,
    /// With no ready replica, whether one may be started for a request (scale from zero, or a
    /// replica still starting): the request is then held until one is ready, and the gateway
    /// reports demand ([`super::Demand`]). Without it such a request gets 503 at once.
    pub can_start: bool,
    /// Requests that may wait for a free replica (or, held, for a ready one) at once; past it
    /// the gateway answers 429 with `Retry-After`.
    pub queue_limit: usize,
    /// How long a held request waits for a ready replica before 503 (the service file's
    /// `cold_start_timeout`); `None`: the gateway's [`super::GatewayConfig::cold_start_timeout`].
    pub cold_start_timeout: Option<std::time::Duration>,
    /// With no ready replica, why none will be soon: its replicas keep failing (the controller's
    /// sentence, with the last failure). A request then gets 503 with it at once instead of
    /// being held for the cold start, and held ones are answered.
    pub failing: Option<String>,
}

impl Route {
    /// Default queue bound: enough to absorb a burst while the autoscaler reacts, small enough
    /// that a queued request is not older than a client's own timeout.
    pub const DEFAULT_QUEUE_LIMIT: usize = 256;

    /// A private route to `replicas` that holds no request, with the default queue.
    pub fn new(replicas: Vec<ReplicaEndpoint>) -> Self {
        Self {
            replicas,
            public: false,
            can_start: false,
            queue_limit: Self::DEFAULT_QUEUE_LIMIT,
            cold_start_timeout: None,
            failing: None,
        }
    }
}

/// The whole table, as the controller hands it over.
pub type RoutingTable = HashMap<ServiceKey, Route>;

/// A request is waiting for a service that has no ready replica (sent when a request starts
/// to be held): the controller should start one if it may.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    /// The service.
    pub service: ServiceKey,
    /// Requests held for it, this one included.
    pub held: usize,
}
