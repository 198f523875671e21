//! Node pools: `gantry pools` lists each with its nodes, GPUs, placement and teams;
//! `gantry pool set NAME --placement pack|spread [--teams a,b]` sets one (admins). A pool exists
//! once a node carries its name as its `pool` label or an admin sets it; nodes without a pool
//! label are in `default` (see [`gantry_api::pools`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gantry_api::pools::{self, Pool, PoolRequest, PoolView};
use gantry_store::{Store, StoreError};

use super::extract::{Body, Path};
use super::{blocking, validate};
use crate::app::App;
use crate::auth::Principal;
use crate::command::Command;
use crate::error::{ApiError, ErrorBody};

/// Node pools with their nodes, GPUs (all, free), placement and teams, by name (every user).
#[utoipa::path(get, path = "/v1/pools", operation_id = "list_pools", security(("bearer" = [])), responses((status = 200, body = Vec<PoolView>)))]
pub async fn list(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Vec<PoolView>>, ApiError> {
    who.require_user()?;
    Ok(Json(blocking(&app, views).await?))
}

/// Set a pool's placement (`pack`: fill partly used nodes first, the default; `spread`: the
/// least allocated node, then its least used GPU) and the teams that may use it (`teams`
/// absent: as they were; empty: every team). Admins; the pool need not have nodes yet.
#[utoipa::path(put, path = "/v1/pools/{name}", operation_id = "set_pool", params(("name" = String, Path, description = "pool")),
    request_body = PoolRequest, security(("bearer" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set(
    State(app): State<Arc<App>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    Body(req): Body<PoolRequest>,
) -> Result<StatusCode, ApiError> {
    gantry_api::workflow::check_label(pools::POOL, &name).map_err(|_| {
        ApiError::Unprocessable(format!("name: `{name}` is not a pool name (letters, digits, '-', '_', '.')"))
    })?;
    if name.is_empty() {
        return Err(ApiError::Unprocessable("name: empty".into()));
    }
    let teams = match req.teams {
        Some(teams) => {
            if teams.len() > 256 {
                return Err(ApiError::Unprocessable("teams: at most 256".into()));
            }
            teams.iter().try_for_each(|t| validate::word("teams", t))?;
            teams
        }
        None => {
            let wanted = name.clone();
            let known = blocking(&app, |s| s.pools()).await?;
            known.into_iter().find(|p| p.name == wanted).map(|p| p.teams).unwrap_or_default()
        }
    };
    let pool = Pool { name, placement: req.placement, teams };
    app.dispatch(Command::SetPool { pool, by: who }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every pool: those nodes name and those an admin set.
fn views(s: &dyn Store) -> Result<Vec<PoolView>, StoreError> {
    let (nodes, gpus, held, set) = (s.nodes()?, s.gpus()?, s.allocations(true)?, s.pools()?);
    let busy: HashSet<&str> = held.iter().map(|a| a.gpu_uuid.as_str()).collect();
    let mut out: BTreeMap<String, PoolView> = set
        .into_iter()
        .map(|pool| (pool.name.clone(), PoolView { pool, nodes: Vec::new(), gpus: 0, gpus_free: 0 }))
        .collect();
    for node in &nodes {
        let mine: Vec<&gantry_store::Gpu> = gpus.iter().filter(|g| g.node_id == node.id).collect();
        let info: Vec<&gantry_store::GpuInfo> = mine.iter().map(|g| &g.info).collect();
        let labels = pools::node_labels(&node.labels, &info);
        let name = labels.get(pools::POOL).cloned().unwrap_or_else(|| pools::DEFAULT_POOL.to_owned());
        let view = out.entry(name.clone()).or_insert_with(|| PoolView {
            pool: Pool { name, ..Pool::default() },
            nodes: Vec::new(),
            gpus: 0,
            gpus_free: 0,
        });
        view.nodes.push(node.id.clone());
        view.gpus += mine.len() as u32;
        let healthy = |g: &&&gantry_store::Gpu| g.health == gantry_store::GpuHealth::Healthy;
        view.gpus_free +=
            mine.iter().filter(|g| healthy(g) && !busy.contains(g.info.uuid.as_str())).count() as u32;
    }
    Ok(out.into_values().collect())
}
