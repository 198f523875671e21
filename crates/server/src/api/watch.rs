//! `GET /v1/watch`: the cluster's changes as Server-Sent Events, so a dashboard stops
//! re-reading every GPU every few seconds.
//!
//! **Who may call it:** any user token (not an agent's), sent like every API call in the
//! `Authorization: Bearer` header — never in the URL, where it would end up in logs and
//! history. Browsers' `EventSource` cannot set headers, so the dashboard reads the stream with
//! `fetch()`; with the token in a header, no cookie is involved and another site cannot make a
//! browser open the stream as the user (no CSRF).
//!
//! **What it reveals:** exactly what the REST reads do, by the same code: GPUs as `/v1/gpus`
//! shows them (holders of the caller's teams' active jobs only, samples cut to the readings and
//! findings), nodes as `/v1/nodes`, jobs as `/v1/jobs` (the caller's teams only, filtered in the
//! store query). The token is checked again every tick: a revoked or expired token, or a
//! changed role or team list, ends the stream (the client reconnects under the new rules).
//!
//! **Events:** `hello` (the tick), then `nodes` and `gpus` with every entry once and `synced`,
//! then `nodes` and `gpus` with the entries that changed since the last tick; `jobs` with each job whose state changed (from
//! the store's log of state changes, so none is missed between ticks); a comment every 15 s
//! of silence keeps proxies from closing the connection. A stream lasts until the client
//! leaves, the server stops, or the token stops being valid. At most [`PER_TOKEN`] streams per
//! token and [`TOTAL`] in all (429 beyond).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gantry_store::{Job, Store, StoreError, TokenRecord};
use serde::Serialize;
use serde_json::{Value, json};

use super::cluster::{gpu_views, node_views};
use super::types::{GpuView, NodeView};
use crate::app::{App, now_ms};
use crate::auth::Principal;
use crate::error::{ApiError, ErrorBody};

/// Time between two looks at the store.
pub const TICK: Duration = Duration::from_secs(1);
/// Silence after which a comment is sent.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// State changes read per tick at most (a burst of submissions spreads over several ticks).
const CHANGES_PER_TICK: u32 = 5000;
/// Open streams per token at most.
pub const PER_TOKEN: usize = 8;
/// Open streams in all at most.
pub const TOTAL: usize = 256;
/// The reading fields a GPU's sample keeps in the stream.
const READING: [&str; 6] = [
    "gpu_util_percent",
    "memory_used_bytes",
    "memory_free_bytes",
    "memory_reserved_bytes",
    "gpu_temp_celsius",
    "power_watts",
];

/// Open streams per token.
#[derive(Debug, Default)]
pub struct Streams(Mutex<HashMap<i64, usize>>);

/// One open stream; gives its place back when dropped.
#[derive(Debug)]
struct Slot {
    app: Arc<App>,
    token: i64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut open) = self.app.streams.0.lock()
            && let Some(n) = open.get_mut(&self.token)
        {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.token);
            }
        }
    }
}

fn take_slot(app: &Arc<App>, token: i64) -> Result<Slot, ApiError> {
    let mut open = app.streams.0.lock().map_err(|_| ApiError::Internal("stream table poisoned".into()))?;
    let total: usize = open.values().sum();
    let mine = open.get(&token).copied().unwrap_or(0);
    if mine >= PER_TOKEN || total >= TOTAL {
        return Err(ApiError::Rejected(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "too many open streams ({mine} for this token, {total} in all; at most {PER_TOKEN} and {TOTAL})"
            ),
        ));
    }
    *open.entry(token).or_default() += 1;
    Ok(Slot { app: Arc::clone(app), token })
}

/// The cluster's changes as Server-Sent Events (see the module documentation).
#[utoipa::path(get, path = "/v1/watch", security(("bearer" = [])),
    responses((status = 200, body = String, content_type = "text/event-stream",
        description = "events `hello`, `nodes`, `gpus`, `synced`, `jobs`, each with a JSON array (or object) as data"),
        (status = 403, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn watch(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Response, ApiError> {
    who.require_user()?;
    let slot = take_slot(&app, who.token.id)?;
    let store = Arc::clone(&app.store);
    let (cursor, _) = tokio::task::spawn_blocking(move || store.changed_jobs(None, 0, None))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    let watcher =
        Watcher { slot, who: who.token, cursor, gpus: HashMap::new(), nodes: HashMap::new(), first: true };
    let stream = futures_util::stream::unfold(watcher, |mut w| async move {
        let chunk = w.next().await?;
        Some((Ok::<Bytes, Infallible>(chunk), w))
    });
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// One stream's memory: what it last sent.
struct Watcher {
    slot: Slot,
    who: TokenRecord,
    cursor: i64,
    /// GPU uuid → the JSON last sent for it.
    gpus: HashMap<String, String>,
    /// Node id → the JSON last sent for it.
    nodes: HashMap<String, String>,
    first: bool,
}

/// What one tick read.
struct Tick {
    token: Option<TokenRecord>,
    nodes: Vec<NodeView>,
    gpus: Vec<GpuView>,
    cursor: i64,
    jobs: Vec<Job>,
}

impl Watcher {
    /// The next chunk to send; `None` ends the stream.
    async fn next(&mut self) -> Option<Bytes> {
        let mut out = String::new();
        if self.first {
            let hello = json!({ "tick_ms": TICK.as_millis() as u64 });
            out.push_str(&format!("retry: 3000\nevent: hello\ndata: {hello}\n\n"));
        }
        let mut closing = self.slot.app.closing.subscribe();
        let mut quiet = Duration::ZERO;
        loop {
            if !self.first {
                tokio::select! {
                    () = tokio::time::sleep(TICK) => {}
                    _ = closing.wait_for(|c| *c) => return None,
                }
            }
            let initial = std::mem::replace(&mut self.first, false);
            let tick = match self.read().await {
                Ok(tick) => tick,
                Err(e) => {
                    tracing::warn!(error = %e, "watch stream read failed");
                    return None;
                }
            };
            if !self.still_valid(tick.token.as_ref()) {
                return None;
            }
            self.changes(tick, &mut out);
            if initial {
                // Everything was sent once: the client's copy is complete from here on.
                out.push_str("event: synced\ndata: {}\n\n");
            }
            quiet += TICK;
            if !out.is_empty() || quiet >= KEEPALIVE {
                if out.is_empty() {
                    out.push_str(": keep-alive\n\n");
                }
                return Some(Bytes::from(out));
            }
        }
    }

    /// Whether the token is still usable with the role and teams it had when the stream began.
    fn still_valid(&self, now: Option<&TokenRecord>) -> bool {
        now.is_some_and(|t| {
            t.refusal(now_ms()).is_none() && t.role == self.who.role && t.teams == self.who.teams
        })
    }

    async fn read(&self) -> Result<Tick, ApiError> {
        let store = Arc::clone(&self.slot.app.store);
        let (id, cursor) = (self.who.id, self.cursor);
        let teams = Principal { token: self.who.clone(), peer: None, cert_name: None, cert_sha256: None }
            .visible_teams();
        let tick = tokio::task::spawn_blocking(move || -> Result<Tick, StoreError> {
            let s: &dyn Store = &*store;
            let (cursor, jobs) = s.changed_jobs(Some(cursor), CHANGES_PER_TICK, teams.clone())?;
            Ok(Tick { token: s.token(id)?, nodes: node_views(s)?, gpus: gpu_views(s, teams)?, cursor, jobs })
        })
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
        Ok(tick)
    }

    /// Appends the events for what changed since the last tick.
    fn changes(&mut self, tick: Tick, out: &mut String) {
        let nodes = changed(&mut self.nodes, tick.nodes.into_iter().map(|n| (n.node.id.clone(), n)));
        let gpus = changed(&mut self.gpus, tick.gpus.into_iter().map(|g| (g.gpu.info.uuid.clone(), slim(g))));
        self.cursor = tick.cursor;
        let mut jobs = tick.jobs;
        let who = Principal { token: self.who.clone(), peer: None, cert_name: None, cert_sha256: None };
        for job in &mut jobs {
            self.slot.app.explain(job);
            who.redact_env(job);
        }
        event(out, "nodes", &nodes);
        event(out, "gpus", &gpus);
        event(out, "jobs", &jobs);
    }
}

/// The entries whose JSON differs from what was last sent, remembering the new JSON.
fn changed<T: Serialize>(
    sent: &mut HashMap<String, String>,
    now: impl Iterator<Item = (String, T)>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for (key, value) in now {
        let Ok(v) = serde_json::to_value(&value) else { continue };
        let text = v.to_string();
        if sent.get(&key) != Some(&text) {
            sent.insert(key, text);
            out.push(v);
        }
    }
    out
}

fn event<T: Serialize>(out: &mut String, name: &str, items: &[T]) {
    if items.is_empty() {
        return;
    }
    if let Ok(data) = serde_json::to_string(items) {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
}

/// A GPU with its sample cut to the readings and findings the dashboard draws.
fn slim(mut g: GpuView) -> GpuView {
    g.gpu.sample = g.gpu.sample.map(|s| {
        let reading: serde_json::Map<String, Value> = READING
            .iter()
            .filter_map(|k| Some(((*k).to_owned(), s.get("sample")?.get(*k)?.clone())))
            .collect();
        json!({ "findings": s.get("findings").cloned().unwrap_or(json!([])), "sample": reading })
    });
    g
}
