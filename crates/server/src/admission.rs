//! The rows every submission is checked against — teams (priority ceiling, pending limit),
//! pools, nodes and GPUs (could any node ever hold it), each team's pending count — read once
//! and shared by the submissions that follow, instead of five reads per submission.
//!
//! On PostgreSQL each read is a round trip and a query the database plans and runs on the same
//! cores as everything else: at 2,000 submissions a second they were 10,000 queries a second,
//! more than the writes. A view is read again when this replica changes any of what it holds
//! (every command but a submission and a quiet heartbeat [`forgets`](AdmissionCache::forget)
//! it), and otherwise after [`MAX_AGE`]. A submission accepted here counts in its team's pending
//! count at once, so one replica never lets a team past its limit by more than the submissions
//! racing it, as before. What another replica changes (a team's ceiling, a pool's teams) is
//! seen within [`MAX_AGE`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gantry_store::{Gpu, JobState, Node, Pool, Store, StoreError, Team};
use tokio::time::Instant;

/// How long a view serves submissions before it is read again, when nothing this replica did
/// changed it: what another replica changes is seen within this.
pub const MAX_AGE: Duration = Duration::from_secs(1);

/// What a submission is checked against, as read at one moment.
#[derive(Debug, Default)]
pub struct View {
    /// Every team with settings.
    pub teams: Vec<Team>,
    /// Every pool.
    pub pools: Vec<Pool>,
    /// Every node.
    pub nodes: Vec<Node>,
    /// Every GPU.
    pub gpus: Vec<Gpu>,
    /// Pending jobs per team, as read.
    pending: HashMap<String, u64>,
}

impl View {
    /// Reads a view from the store.
    pub fn read(store: &dyn Store) -> Result<Self, StoreError> {
        let mut pending = HashMap::new();
        for (team, state, n) in store.job_counts()? {
            if state == JobState::Pending {
                *pending.entry(team).or_default() += n;
            }
        }
        Ok(Self {
            teams: store.teams()?,
            pools: store.pools()?,
            nodes: store.nodes()?,
            gpus: store.gpus()?,
            pending,
        })
    }

    /// `team`'s settings, when it has any.
    pub fn team(&self, team: &str) -> Option<&Team> {
        self.teams.iter().find(|t| t.name == team)
    }
}

/// A view and what was accepted since it was read.
#[derive(Debug)]
struct Cached {
    view: Arc<View>,
    read_at: Instant,
    generation: u64,
    /// Jobs queued per team through this cache since the view was read.
    added: HashMap<String, u64>,
}

/// The view submissions share, and when it must be read again.
#[derive(Debug, Default)]
pub struct AdmissionCache {
    cached: Mutex<Option<Cached>>,
    /// Moves at every [`forget`](Self::forget): a view read before it is not kept.
    generation: AtomicU64,
}

impl AdmissionCache {
    /// The current view (read from the store when there is none, it is older than [`MAX_AGE`],
    /// or this replica changed what it holds since).
    pub fn view(&self, store: &dyn Store) -> Result<Arc<View>, StoreError> {
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(c) = self.fresh(generation) {
            return Ok(Arc::clone(&c));
        }
        let view = Arc::new(View::read(store)?);
        let mut cached = self.cached.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Kept only when nothing was forgotten while it was read.
        if self.generation.load(Ordering::Acquire) == generation {
            *cached = Some(Cached {
                view: Arc::clone(&view),
                read_at: Instant::now(),
                generation,
                added: HashMap::new(),
            });
        }
        Ok(view)
    }

    fn fresh(&self, generation: u64) -> Option<Arc<View>> {
        let cached = self.cached.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let c = cached.as_ref()?;
        (c.generation == generation && c.read_at.elapsed() < MAX_AGE).then(|| Arc::clone(&c.view))
    }

    /// `team`'s pending jobs: as the view read them, and those accepted through this cache since.
    pub fn pending(&self, view: &View, team: &str) -> u64 {
        let read = view.pending.get(team).copied().unwrap_or(0);
        let cached = self.cached.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let added = cached
            .as_ref()
            .filter(|c| std::ptr::eq(Arc::as_ptr(&c.view), view))
            .and_then(|c| c.added.get(team).copied())
            .unwrap_or(0);
        read + added
    }

    /// Counts `n` jobs queued for `team` by a submission checked against `view`, once it
    /// committed (a view read since already holds them).
    pub fn added(&self, view: &View, team: &str, n: u64) {
        let mut cached = self.cached.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = cached.as_mut().filter(|c| std::ptr::eq(Arc::as_ptr(&c.view), view)) {
            *c.added.entry(team.to_owned()).or_default() += n;
        }
    }

    /// Drops the view: this replica changed what it holds.
    pub fn forget(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        *self.cached.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

#[cfg(test)]
mod tests {
    use gantry_store::{NewJob, SqliteStore, SubmitRequest};

    use super::*;

    fn team(name: &str, max_priority: i32) -> Team {
        Team { name: name.into(), max_priority: Some(max_priority), ..Team::default() }
    }

    fn job(team: &str) -> NewJob {
        let spec = SubmitRequest { command: vec!["true".into()], ..Default::default() };
        NewJob { spec, team: team.into(), name: "j".into(), ..Default::default() }
    }

    #[tokio::test(start_paused = true)]
    async fn a_view_serves_until_its_age_or_a_forget_and_counts_what_was_queued_through_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(dir.path()).expect("open");
        store.set_team(&team("vision", 10)).expect("team");
        store.submit(&job("vision")).expect("submit");
        let cache = AdmissionCache::default();
        let first = cache.view(&store).expect("view");
        assert_eq!(first.team("vision").and_then(|t| t.max_priority), Some(10));
        assert_eq!(cache.pending(&first, "vision"), 1);
        // Another replica's change: not seen while the view is young.
        store.set_team(&team("vision", 20)).expect("team");
        store.submit(&job("vision")).expect("submit");
        let again = cache.view(&store).expect("view");
        assert!(Arc::ptr_eq(&first, &again), "read again before its age");
        cache.added(&again, "vision", 3);
        assert_eq!(cache.pending(&again, "vision"), 4, "1 read and 3 queued through the cache");
        tokio::time::advance(MAX_AGE).await;
        let aged = cache.view(&store).expect("view");
        assert!(!Arc::ptr_eq(&first, &aged), "read again at its age");
        assert_eq!(aged.team("vision").and_then(|t| t.max_priority), Some(20));
        assert_eq!(cache.pending(&aged, "vision"), 2, "what the store holds; the old view's count is gone");
        // A late count for the view before is not added to the new one.
        cache.added(&first, "vision", 5);
        assert_eq!(cache.pending(&aged, "vision"), 2);
        // This replica's own change: read again at once.
        store.set_team(&team("vision", 30)).expect("team");
        cache.forget();
        let forgotten = cache.view(&store).expect("view");
        assert_eq!(forgotten.team("vision").and_then(|t| t.max_priority), Some(30));
    }
}
