//! `/metrics` and `/healthz`.

use super::encode::CONTENT_TYPE;
use super::sampler::SnapshotCell;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
struct AppState {
    cell: Arc<SnapshotCell>,
    stale_after: Duration,
}

/// Routes over `cell`. `/healthz` answers 503 until the first collection and when the latest
/// is older than `stale_after` (the sampler is stuck).
pub fn router(cell: Arc<SnapshotCell>, stale_after: Duration) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(AppState { cell, stale_after })
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], s.cell.latest().body.clone())
}

async fn healthz(State(s): State<AppState>) -> (StatusCode, &'static str) {
    match s.cell.latest().collected_at {
        None => (StatusCode::SERVICE_UNAVAILABLE, "no collection yet\n"),
        Some(t) if t.elapsed() > s.stale_after => (StatusCode::SERVICE_UNAVAILABLE, "collections stalled\n"),
        Some(_) => (StatusCode::OK, "ok\n"),
    }
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}
