//! Free GPUs per node, indexed by how many are free, so that placing a job costs what the
//! job needs rather than a scan of every node.
//!
//! [`super::place_workers`] answers two questions over a slice of free counts: is there a node
//! with room for the whole job (the fullest such, lowest index on ties), and if not, which nodes
//! hold the most workers. Over a slice each costs a pass over every node; a round starting
//! thousands of jobs on thousands of nodes spends most of its time there. [`FreeIndex`] keeps
//! the nodes of each free count in a set ordered by index (free counts are small: a node's
//! GPUs), so the fullest node that fits is the first node of the first non-empty count at or
//! above the job's, and the nodes holding the most workers come count by count from the top.
//! It returns exactly what [`super::place_workers`] returns on the same counts (property test in
//! `super::tests`); counts too large to index (a node of more than [`MAX_INDEXED`] GPUs) fall
//! back to the scan.

use std::collections::BTreeSet;

/// The largest free count indexed; past it [`FreeIndex`] scans.
pub(super) const MAX_INDEXED: u32 = 1024;

/// Free GPUs per node, with the nodes of each count (see the module doc).
pub(super) struct FreeIndex {
    free: Vec<u32>,
    /// `by_free[f]`: the nodes with `f` free GPUs, by index; empty when not indexed.
    by_free: Vec<BTreeSet<usize>>,
}

impl FreeIndex {
    pub(super) fn new(free: Vec<u32>) -> Self {
        let top = free.iter().copied().max().unwrap_or(0);
        let mut by_free = Vec::new();
        if top <= MAX_INDEXED {
            by_free = vec![BTreeSet::new(); top as usize + 1];
            for (node, f) in free.iter().enumerate() {
                by_free[*f as usize].insert(node);
            }
        }
        Self { free, by_free }
    }

    fn take(&mut self, node: usize, gpus: u32) {
        let was = self.free[node];
        self.free[node] = was - gpus;
        if !self.by_free.is_empty() {
            self.by_free[was as usize].remove(&node);
            self.by_free[(was - gpus) as usize].insert(node);
        }
    }

    /// [`super::place_workers`] on these counts: `workers` workers of `per_worker` GPUs, all or
    /// nothing, taken from the counts.
    pub(super) fn place_workers(&mut self, workers: u32, per_worker: u32) -> Option<Vec<(usize, u32)>> {
        if self.by_free.is_empty() {
            return super::place_workers(&mut self.free, workers, per_worker);
        }
        let per = per_worker.max(1);
        let gpus = workers.checked_mul(per)?;
        let room: u64 = self
            .by_free
            .iter()
            .enumerate()
            .map(|(f, nodes)| nodes.len() as u64 * u64::from(f as u32 / per))
            .sum();
        if room < u64::from(workers) {
            return None;
        }
        let single = (gpus as usize..self.by_free.len()).find_map(|f| self.by_free[f].first().copied());
        if let Some(node) = single {
            self.take(node, gpus);
            return Some(vec![(node, gpus)]);
        }
        // Most workers first, lowest index among nodes holding as many.
        let top = (self.by_free.len() - 1) as u32 / per;
        let mut out = Vec::new();
        let mut need = workers;
        for held in (1..=top).rev() {
            if need == 0 {
                break;
            }
            let counts = (held * per) as usize..((held + 1) * per).min(self.by_free.len() as u32) as usize;
            let mut nodes: Vec<usize> = counts.flat_map(|f| self.by_free[f].iter().copied()).collect();
            nodes.sort_unstable();
            for node in nodes {
                if need == 0 {
                    break;
                }
                let take = held.min(need);
                self.take(node, take * per);
                need -= take;
                out.push((node, take * per));
            }
        }
        Some(out)
    }
}
