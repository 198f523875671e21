//! Leadership among replicas on one database (see `docs/ha.md`).
//!
//! Every replica serves the whole API; one, the leader, runs the scheduler and the reconcilers
//! (node expiry, drains, dependency failures, resizes, preemption). Leadership is the store's
//! lease row ([`gantry_store::Store::campaign`]): each replica campaigns every third of the
//! lease; the leader renews its lease, a follower takes over a lapsed one under the next
//! epoch. What a campaign returns becomes the store's fence ([`gantry_store::Fence`]), which
//! every leader write checks in its own transaction: a leader that was paused past its lease
//! and comes back still believing it leads has its writes refused by the database until its
//! next campaign tells it it follows. A replica that cannot reach the database steps down at
//! once (its lease will lapse; it must not keep acting on what it last read).
//!
//! Without a lease configured ([`crate::ServerConfig::lease`]: the single control plane on
//! SQLite) nothing campaigns, nothing is fenced and the server leads.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use gantry_store::{Fence, Lease};
use tokio::sync::watch;

use crate::App;
use crate::clock::now_ms;

/// How a replica takes part in elections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// This replica's id in the lease row (stable across its restarts).
    pub replica: String,
    /// How long a lease lasts unless renewed (renewed every third of it).
    pub ttl: Duration,
}

/// What this replica is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// It runs the scheduler and the reconcilers.
    Leader,
    /// It serves the API only.
    Follower,
}

/// This replica's role and the epoch it last saw.
#[derive(Debug)]
pub struct Leadership {
    state: RwLock<(Role, u64)>,
}

impl Leadership {
    /// A replica that leads until an election says otherwise (no lease: it always leads).
    pub fn new(elected: bool) -> Self {
        let role = if elected { Role::Follower } else { Role::Leader };
        Self { state: RwLock::new((role, 0)) }
    }

    /// The role and epoch (0: no election).
    pub fn get(&self) -> (Role, u64) {
        *self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether this replica runs the scheduler and reconcilers now.
    pub fn leads(&self) -> bool {
        self.get().0 == Role::Leader
    }

    fn set(&self, role: Role, epoch: u64) {
        *self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner) = (role, epoch);
    }
}

/// One campaign: the lease asked of the store, the fence and role set from its answer.
pub async fn campaign(app: &Arc<App>, lease: &LeaseConfig) {
    let (store, replica) = (Arc::clone(&app.store), lease.replica.clone());
    let ttl = i64::try_from(lease.ttl.as_millis()).unwrap_or(i64::MAX);
    // Once more at once after a failure: a group commit that PostgreSQL broke off (a deadlock
    // between replicas' groups, a connection it closed) is no loss of the database.
    let asked = tokio::task::spawn_blocking(move || {
        store.campaign(&replica, ttl, now_ms()).or_else(|_| store.campaign(&replica, ttl, now_ms()))
    })
    .await;
    let was = app.leadership.get();
    let (fence, role, epoch) = match asked {
        Ok(Ok(Lease { leader: true, epoch, holder, .. })) => {
            (Fence::Leader { holder, epoch }, Role::Leader, epoch)
        }
        Ok(Ok(Lease { epoch, .. })) => (Fence::Follower, Role::Follower, epoch),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot renew the lease: stepping down");
            (Fence::Follower, Role::Follower, was.1)
        }
        Err(e) => {
            tracing::warn!(error = %e, "lease campaign did not finish: stepping down");
            (Fence::Follower, Role::Follower, was.1)
        }
    };
    app.store.set_fence(fence);
    app.leadership.set(role, epoch);
    if (role, epoch) != was {
        tracing::info!(role = ?role, epoch, replica = %lease.replica, "leadership changed");
        app.wake.notify_one();
    }
}

/// Campaigns every third of the lease until `stop`.
pub async fn run(app: Arc<App>, lease: LeaseConfig, mut stop: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(lease.ttl / 3);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => campaign(&app, &lease).await,
            _ = stop.changed() => return,
        }
    }
}
