//! The server's validated settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gantry_core::PolicyKind;

use crate::tls::Pki;
use crate::transport::Limits;

/// Validated server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where to listen; `127.0.0.1`, `::1` and `0.0.0.0` also hold the other loopback family
    /// on the same port (see [`crate::listen`]).
    pub listen: SocketAddr,
    /// An agent silent this long is not responding: its node gets no new work, its jobs keep
    /// their place.
    pub heartbeat_timeout: Duration,
    /// An agent silent this long (at least `heartbeat_timeout`) is lost: its jobs are requeued.
    pub node_lost_after: Duration,
    /// How often agents should heartbeat (told to them at registration).
    pub heartbeat_interval: Duration,
    /// Scheduling passes run at least this often (and on every submission).
    pub schedule_interval: Duration,
    /// Where agents on this machine write job output (`<job id>/stdout`, `<job id>/stderr`).
    pub logs_dir: PathBuf,
    /// Largest accepted request body, bytes.
    pub body_limit: usize,
    /// Placement policy.
    pub policy: PolicyKind,
    /// The cluster CA and server certificate: TLS is on when set. Plain HTTP is for loopback
    /// only; the `gantry` binary enforces that (a library user may test on loopback either way).
    pub pki: Option<Arc<Pki>>,
    /// Open connections at most; more wait in the accept backlog.
    pub max_connections: usize,
    /// Open connections from one peer address at most; more are closed at once.
    pub max_connections_per_address: usize,
    /// Every loopback address counts as one peer (on by default: local clients have the unix
    /// socket; see [`crate::transport`]).
    pub loopback_is_one_source: bool,
    /// Time allowed for a request's headers, and for an idle keep-alive connection.
    pub header_read_timeout: Duration,
    /// Time allowed for the TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Time allowed for a whole request (a slower one gets 408).
    pub request_timeout: Duration,
    /// At shutdown, how long in-flight requests may take.
    pub shutdown_grace: Duration,
    /// Most output an agent keeps per job and stream, bytes (sent with each assignment).
    pub log_limit_bytes: u64,
    /// Least time an elastic job runs between two resizes (each one restarts it).
    pub resize_interval: Duration,
    /// What the server keeps of jobs' output: the team quota, retention, the free-space floor.
    pub output: crate::output::OutputLimits,
    /// The API's unix socket (`<data>/api.sock` for `gantry up` and `gantry server`; `None`: TCP
    /// only): the local CLI's and agent's way in, which no number of TCP connections can fill
    /// (see [`crate::transport`]). Mode 0600: the server's user (and root) only.
    pub socket: Option<PathBuf>,
    /// Where the serving gateway listens (`None`: not served); TLS on any address but loopback.
    pub gateway_listen: Option<SocketAddr>,
    /// The gateway's limits and timeouts.
    pub gateway: crate::gateway::GatewayConfig,
    /// Hold an agent's heartbeat that asks for it (`wait_ms`) until its node's work changes
    /// (see [`crate::assigned`]); false answers at once, as servers before the hold did.
    pub hold_heartbeats: bool,
    /// How often the service controller reconciles services (replicas, probes, the gateway's
    /// table, the autoscaler); each service's own `sync_s` and probe interval apply within it.
    pub service_tick: Duration,
    /// The ports replicas get as `$PORT`, both ends included (unique among a node's replicas).
    pub service_ports: (u16, u16),
    /// Directories of shared file systems under which volumes may be created with a `path`
    /// (`--volume-root`; none: volumes are node-local only).
    pub volume_roots: Vec<PathBuf>,
    /// Where uploaded working directories are kept, per team (`<data>/uploads`).
    pub uploads_dir: PathBuf,
    /// Most bytes an uploaded working directory's files may add up to.
    pub upload_limit_bytes: u64,
    /// Most bytes of uploaded files one team may hold (`--upload-team-quota`).
    pub upload_team_quota_bytes: u64,
    /// Run the service controller (the default). Off, the gateway's table is whatever the
    /// embedder hands [`crate::gateway::Gateway::set_routes`] (the controller would replace it
    /// whenever its own table changes).
    pub service_controller: bool,
    /// Leadership among replicas on one database (`None`: this server is the only one and
    /// leads without an election).
    pub lease: Option<crate::leader::LeaseConfig>,
}

impl ServerConfig {
    /// Defaults for a single machine: 127.0.0.1:7070, 10 s heartbeat timeout, a node lost after
    /// 5 min, policy `gantry`, logs
    /// capped at 64 MiB per job and stream.
    pub fn local(logs_dir: PathBuf) -> Self {
        Self {
            uploads_dir: logs_dir.with_file_name("uploads"),
            upload_limit_bytes: gantry_api::upload::LIMIT_BYTES,
            upload_team_quota_bytes: crate::uploads::DEFAULT_TEAM_QUOTA,
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            heartbeat_timeout: Duration::from_secs(10),
            node_lost_after: Duration::from_secs(300),
            heartbeat_interval: Duration::from_millis(250),
            schedule_interval: Duration::from_millis(500),
            logs_dir,
            body_limit: 1 << 20,
            policy: PolicyKind::Gantry,
            log_limit_bytes: crate::job_logs::DEFAULT_LIMIT,
            pki: None,
            max_connections: 1024,
            max_connections_per_address: 128,
            loopback_is_one_source: true,
            header_read_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(30),
            resize_interval: Duration::from_secs(300),
            output: crate::output::OutputLimits::default(),
            socket: None,
            gateway_listen: None,
            gateway: crate::gateway::GatewayConfig::default(),
            hold_heartbeats: true,
            service_tick: Duration::from_millis(250),
            service_ports: (20000, 22999),
            volume_roots: Vec::new(),
            service_controller: true,
            lease: None,
        }
    }

    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_address,
            loopback_is_one_source: self.loopback_is_one_source,
            header_read_timeout: self.header_read_timeout,
            tls_handshake_timeout: self.tls_handshake_timeout,
            request_timeout: self.request_timeout,
            shutdown_grace: self.shutdown_grace,
        }
    }
}
