//! The control plane's lifecycle: bind the API (and the gateway), then serve until told to stop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use gantry_store::Store;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use crate::app::App;
use crate::auth::{FailureLimiter, TokenCache};
use crate::clock::now_ms;
use crate::config::ServerConfig;
use crate::metrics::Metrics;
use crate::tls::TlsError;
use crate::transport;

/// Why the server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding the listen address (or, for loopback, its other family) failed.
    #[error(transparent)]
    Bind(#[from] crate::listen::ListenError),
    /// Serving failed.
    #[error("server failed: {0}")]
    Serve(#[from] std::io::Error),
    /// The certificates could not be loaded into rustls.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] gantry_store::StoreError),
    /// A store call answered something it should not have.
    #[error("unexpected store answer: {0}")]
    Unexpected(String),
}

/// A bound, not yet serving control plane.
#[derive(Debug)]
pub struct Server {
    app: Arc<App>,
    listeners: Vec<TcpListener>,
    socket: Option<tokio::net::UnixListener>,
    missing: Option<String>,
    tls: Option<Arc<rustls::ServerConfig>>,
    gateway: Option<GatewayListener>,
    gateway_missing: Option<String>,
}

/// The gateway's bound sockets and whether they speak TLS.
#[derive(Debug)]
struct GatewayListener {
    listeners: Vec<TcpListener>,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl Server {
    /// Binds the listen address (port 0 picks a free port); a loopback address in both families
    /// (see [`crate::listen`]).
    pub async fn bind(mut config: ServerConfig, store: Arc<dyn Store>) -> Result<Self, ServerError> {
        // Every listener's cap fits the descriptors the process has (see `descriptors`).
        if let Some(lowered) = crate::descriptors::fit(&mut config, crate::descriptors::raise_soft_limit()) {
            tracing::warn!("{lowered}");
        }
        let tls = match &config.pki {
            Some(pki) => Some(pki.server_config()?),
            None => None,
        };
        let pki = config.pki.clone();
        let bound = crate::listen::bind(config.listen).await?;
        let missing = bound.missing.map(|(addr, e)| {
            format!("{addr} cannot be bound ({e}): this machine has no such loopback; serving the other family alone")
        });
        if let Some(missing) = &missing {
            tracing::warn!("{missing}");
        }
        // Not fatal: TCP serves everything; the socket only keeps the local clients' way in.
        let socket = config.socket.as_deref().and_then(|path| {
            bind_socket(path)
                .inspect_err(|e| tracing::warn!(path = %path.display(), error = %e, "the API's unix socket is not served"))
                .ok()
        });
        let (gateway, gateway_missing) = bind_gateway(&config, tls.as_ref()).await;
        let metrics = Metrics::default();
        let mut gateway_config = config.gateway;
        gateway_config.tls = gateway.as_ref().is_some_and(|g| g.tls.is_some());
        let gateway_metrics = metrics.gateway.clone();
        // A lease: other replicas may share the database.
        let shared = config.lease.is_some();
        let app = Arc::new_cyclic(|app| App {
            gateway: Arc::new(crate::gateway::Gateway::new(
                gateway_config,
                Box::new(crate::gateway::TeamMembers::new(app.clone())),
                gateway_metrics,
                Box::new(gantry_core::rng::SplitMix64::new(seed())),
            )),
            uploads: crate::uploads::Uploads::new(config.uploads_dir.clone(), config.upload_limit_bytes)
                .with_team_quota(config.upload_team_quota_bytes),
            store,
            leadership: crate::leader::Leadership::new(shared),
            config,
            metrics,
            wake: Notify::new(),
            changes: Default::default(),
            tokens: TokenCache::new(shared),
            admission: Default::default(),
            failures: FailureLimiter::default(),
            waiting: Default::default(),
            staging: Default::default(),
            pki,
            streams: Default::default(),
            closing: watch::channel(false).0,
            queue: Default::default(),
            output: Default::default(),
            signin: Default::default(),
            assigned: Default::default(),
            service_status: Default::default(),
        });
        Ok(Self { app, listeners: bound.listeners, socket, missing, tls, gateway, gateway_missing })
    }

    /// The gateway's addresses (empty when it is not served).
    pub fn gateway_addrs(&self) -> Vec<SocketAddr> {
        let listeners = self.gateway.as_ref().map_or(&[][..], |g| &g.listeners[..]);
        listeners.iter().filter_map(|l| l.local_addr().ok()).collect()
    }

    /// Whether the gateway speaks TLS.
    pub fn gateway_is_tls(&self) -> bool {
        self.gateway.as_ref().is_some_and(|g| g.tls.is_some())
    }

    /// Why the gateway is not served though an address was given (it could not be bound).
    pub fn gateway_missing(&self) -> Option<&str> {
        self.gateway_missing.as_deref()
    }

    /// The address actually bound (the listen address; its port when that was 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        let first = self.listeners.first().ok_or_else(|| ServerError::Unexpected("no listener".into()))?;
        Ok(first.local_addr()?)
    }

    /// Every address bound: the listen address, then its other loopback family if bound.
    pub fn local_addrs(&self) -> Result<Vec<SocketAddr>, ServerError> {
        Ok(self.listeners.iter().map(TcpListener::local_addr).collect::<Result<_, _>>()?)
    }

    /// The API's unix socket, when it is served.
    pub fn socket_path(&self) -> Option<&std::path::Path> {
        self.socket.as_ref().and(self.app.config.socket.as_deref())
    }

    /// Why the other loopback family is not bound, when the machine lacks it (no IPv6).
    pub fn missing_family(&self) -> Option<&str> {
        self.missing.as_deref()
    }

    /// The shared state (for embedding and tests).
    pub fn app(&self) -> Arc<App> {
        Arc::clone(&self.app)
    }

    /// Whether the listener speaks TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The base URL clients use: `https://` with TLS, else `http://`.
    pub fn url(&self) -> Result<String, ServerError> {
        let scheme = if self.is_tls() { "https" } else { "http" };
        Ok(format!("{scheme}://{}", self.local_addr()?))
    }

    /// Serves the API and runs the scheduler until `shutdown` resolves; in-flight requests
    /// finish (up to [`ServerConfig::shutdown_grace`]), idle connections close at once.
    pub async fn serve(
        mut self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let gateway = self.gateway.take().map(|g| {
            let mut stop = stop_rx.clone();
            let stopped = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            tokio::spawn(Arc::clone(&self.app.gateway).serve(g.listeners, g.tls, stopped))
        });
        // The first campaign before the scheduler starts: a lone replica leads at once.
        let campaigning = match self.app.config.lease.clone() {
            Some(lease) => {
                crate::leader::campaign(&self.app, &lease).await;
                Some(tokio::spawn(crate::leader::run(Arc::clone(&self.app), lease, stop_rx.clone())))
            }
            None => None,
        };
        let scheduler = tokio::spawn(crate::scheduler::run(Arc::clone(&self.app), stop_rx.clone()));
        let controller = self
            .app
            .config
            .service_controller
            .then(|| tokio::spawn(crate::services::run(Arc::clone(&self.app), stop_rx.clone())));
        let idle = tokio::spawn(crate::idle::run(Arc::clone(&self.app), stop_rx.clone()));
        let sweeper = tokio::spawn(sweep_output(Arc::clone(&self.app), stop_rx));
        let router = crate::api::router(Arc::clone(&self.app));
        let limits = self.app.config.limits();
        tracing::info!(addrs = ?self.local_addrs()?, tls = self.is_tls(), "serving the API");
        let app = Arc::clone(&self.app);
        let shutdown = async move {
            shutdown.await;
            app.closing.send_replace(true);
        };
        let socket = self.socket.take().map(|listener| transport::UnixSocket {
            listener,
            max_connections: crate::descriptors::SOCKET_CONNECTIONS,
        });
        transport::serve(self.listeners, socket, router, self.tls, limits, shutdown).await;
        if let Some(path) = &self.app.config.socket {
            let _ = std::fs::remove_file(path);
        }
        let _ = stop_tx.send(true);
        let _ = scheduler.await;
        let _ = sweeper.await;
        if let Some(controller) = controller {
            let _ = controller.await;
        }
        if let Some(campaigning) = campaigning {
            let _ = campaigning.await;
        }
        let _ = idle.await;
        if let Some(gateway) = gateway {
            let _ = gateway.await;
        }
        Ok(())
    }
}

/// Binds the API's unix socket at `path`, mode 0600. A socket left there by a server that is
/// gone is replaced (whoever runs this holds the data directory's lock); one that answers, or
/// anything that is not a socket, is an error.
fn bind_socket(path: &std::path::Path) -> Result<tokio::net::UnixListener, ServerError> {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    let refused = |why: &str| ServerError::Serve(std::io::Error::other(format!("{}: {why}", path.display())));
    // sun_path holds 108 bytes with its terminating NUL.
    if path.as_os_str().len() > 107 {
        return Err(refused("longer than a unix socket's path may be (107 bytes)"));
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(refused("exists and is not a socket"));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(refused("another server answers on this socket"));
        }
        std::fs::remove_file(path)?;
    }
    // A connection in the moment before the mode narrows gains nothing TCP's loopback would
    // not: every request still needs a token.
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(tokio::net::UnixListener::from_std(listener)?)
}

/// Binds the gateway's address, when one is set: TLS (the API's certificate) on any address but
/// loopback. Failing to bind is not fatal (the API still serves): the second value says why.
async fn bind_gateway(
    config: &ServerConfig,
    tls: Option<&Arc<rustls::ServerConfig>>,
) -> (Option<GatewayListener>, Option<String>) {
    let Some(addr) = config.gateway_listen else { return (None, None) };
    let tls = if addr.ip().is_loopback() {
        None
    } else if let Some(tls) = tls {
        Some(Arc::clone(tls))
    } else {
        let why =
            format!("the gateway is not served: {addr} is not a loopback address and the server has no TLS");
        tracing::warn!("{why}");
        return (None, Some(why));
    };
    match crate::listen::bind(addr).await {
        Ok(bound) => (Some(GatewayListener { listeners: bound.listeners, tls }), None),
        Err(e) => {
            use std::error::Error as _;
            let cause = e.source().map(|c| format!(": {c}")).unwrap_or_default();
            let why = format!("the gateway is not served: {e}{cause}");
            tracing::warn!("{why}");
            (None, Some(why))
        }
    }
}

/// A seed for the gateway's replica choice (which replica gets a request need not be
/// reproducible in production; tests construct their own gateway with a fixed seed).
// Entropy for a seed, not a time: nothing is decided by what time it is.
#[allow(clippy::disallowed_methods)]
fn seed() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    nanos.map_or(0, |d| d.as_nanos() as u64) ^ u64::from(std::process::id())
}

/// Every minute (and once at start): counts what is on disk, removes the output of jobs that
/// ended longer ago than the retention window, and holds each team to its output quota; every
/// few seconds between, holds teams to it while their jobs run ([`crate::output::Output::hold_running`]).
async fn sweep_output(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    const RUNNING_EVERY: Duration = Duration::from_secs(5);
    let mut every = tokio::time::interval(RUNNING_EVERY);
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => return,
        }
        ticks += 1;
        if !(ticks - 1).is_multiple_of(12) {
            let running = Arc::clone(&app);
            let marked = tokio::task::spawn_blocking(move || {
                let app = running;
                app.output.hold_running(&*app.store, &app.config.logs_dir, app.config.output)
            })
            .await;
            if let Ok(n @ 1..) = marked {
                tracing::info!(attempts = n, "running jobs' output cut at their team's log quota");
            }
            continue;
        }
        let output = Arc::clone(&app);
        let swept = tokio::task::spawn_blocking(move || {
            let app = output;
            app.output.sweep(&*app.store, &app.config.logs_dir, now_ms(), app.config.output)
        })
        .await;
        if let Ok(n @ 1..) = swept {
            tracing::info!(jobs = n, "removed the output of jobs past the retention window");
        }
        let uploads = Arc::clone(&app);
        let swept = tokio::task::spawn_blocking(move || {
            let app = uploads;
            app.uploads.sweep(&*app.store, now_ms(), app.config.output.retention)
        })
        .await;
        if let Ok(n @ 1..) = swept {
            tracing::info!(files = n, "removed uploads no kept job refers to");
        }
    }
}
