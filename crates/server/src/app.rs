//! The server's shared state, configuration and lifecycle.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gantry_core::PolicyKind;
use gantry_store::{Role, Store};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use crate::auth::{self, TokenCache};
use crate::metrics::Metrics;

/// Validated server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// An agent silent this long is lost.
    pub heartbeat_timeout: Duration,
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
    /// Most output an agent keeps per job and stream, bytes (sent with each assignment).
    pub log_limit_bytes: u64,
}

impl ServerConfig {
    /// Defaults for a single machine: 127.0.0.1:7070, 10 s heartbeat timeout, policy `gantry`, logs
    /// capped at 64 MiB per job and stream.
    pub fn local(logs_dir: PathBuf) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            heartbeat_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_millis(250),
            schedule_interval: Duration::from_millis(500),
            logs_dir,
            body_limit: 1 << 20,
            policy: PolicyKind::Gantry,
            log_limit_bytes: crate::job_logs::DEFAULT_LIMIT,
        }
    }
}

/// What handlers, the dispatcher and the scheduler share.
#[derive(Debug)]
pub struct App {
    /// Durable state.
    pub store: Arc<dyn Store>,
    /// Settings.
    pub config: ServerConfig,
    /// Exported metrics.
    pub metrics: Metrics,
    /// Wakes the scheduler early.
    pub wake: Notify,
    /// Verified tokens.
    pub tokens: TokenCache,
    /// Why pending jobs wait, as of the last scheduling pass (not stored: it changes every pass).
    pub waiting: std::sync::RwLock<std::collections::HashMap<gantry_store::JobId, String>>,
}

impl App {
    /// Fills in why a pending job waits, from the last pass.
    pub fn explain(&self, job: &mut gantry_store::Job) {
        if job.state == gantry_store::JobState::Pending
            && job.reason.is_none()
            && let Ok(waiting) = self.waiting.read()
        {
            job.reason = waiting.get(&job.id).cloned();
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Why the server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding the listen address failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("server failed: {0}")]
    Serve(#[from] std::io::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] gantry_store::StoreError),
}

/// A bound, not yet serving control plane.
#[derive(Debug)]
pub struct Server {
    app: Arc<App>,
    listener: TcpListener,
}

impl Server {
    /// Binds the listen address (port 0 picks a free port).
    pub async fn bind(config: ServerConfig, store: Arc<dyn Store>) -> Result<Self, ServerError> {
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServerError::Bind { addr: config.listen, source })?;
        let app = Arc::new(App {
            store,
            config,
            metrics: Metrics::default(),
            wake: Notify::new(),
            tokens: TokenCache::default(),
            waiting: Default::default(),
        });
        Ok(Self { app, listener })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        Ok(self.listener.local_addr()?)
    }

    /// The shared state (for embedding and tests).
    pub fn app(&self) -> Arc<App> {
        Arc::clone(&self.app)
    }

    /// Serves the API and runs the scheduler until `shutdown` resolves; in-flight requests finish.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ServerError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let scheduler = tokio::spawn(crate::scheduler::run(Arc::clone(&self.app), stop_rx));
        let router = crate::api::router(Arc::clone(&self.app));
        let served = axum::serve(self.listener, router).with_graceful_shutdown(shutdown).await;
        let _ = stop_tx.send(true);
        let _ = scheduler.await;
        Ok(served?)
    }
}

/// Creates a token; returns its secret (shown once, never stored).
pub fn create_token(
    store: &dyn Store,
    role: Role,
    team: Option<&str>,
    name: &str,
) -> Result<String, ServerError> {
    let secret = auth::new_secret()?;
    store.create_token(&auth::hash(&secret), role, team, name, now_ms())?;
    Ok(secret)
}

/// On a store without an admin token, creates one and returns its secret.
pub fn ensure_admin_token(store: &dyn Store) -> Result<Option<String>, ServerError> {
    if store.token_count(Role::Admin)? > 0 {
        return Ok(None);
    }
    create_token(store, Role::Admin, None, "admin").map(Some)
}
