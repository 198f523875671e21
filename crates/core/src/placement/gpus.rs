//! Which GPUs of one node a request takes, once the node is chosen.
//!
//! The policies choose nodes; inside a node, whole-GPU requests took the lowest-index idle GPUs.
//! That is fine for the ledger but not for the node's future: the GPUs left idle should still
//! form the blocks that multi-GPU requests need, and GPUs that talk over NVLink serve a
//! multi-GPU job better than GPUs that go through the host. This module answers "which GPUs"
//! for the kubelet device plugin's `GetPreferredAllocation` (and any other caller):
//!
//! 1. **Fewest broken whole-GPU blocks.** A block is an aligned run of 2, 4, 8 … GPU indices
//!    (the way servers wire GPUs: pairs on a bridge or switch, quads per CPU socket, eights per
//!    board). A block whose GPUs are all available is intact; a choice *breaks* an intact block
//!    when it takes some of its GPUs but not all. Taking a whole block consumes it, which is what
//!    blocks are for. The choice that breaks the fewest intact blocks wins, so a 1-GPU request
//!    goes where a pair is already broken and a 2-GPU request takes a pair, not two halves.
//! 2. **Most NVLink inside the set**, where the topology is known (sum of links over pairs):
//!    this breaks ties among choices that break as many blocks, e.g. which pair of an idle
//!    eight to take.
//! 3. **Lowest indices**, so the answer is deterministic.
//!
//! Up to [`EXACT_LIMIT`] available GPUs every choice is examined (C(16, 8) = 12,870 sets);
//! above that GPUs are added one at a time, each the best by the same order.
//!
//! Slices (a share of one GPU) go to the GPU with the least free memory that still holds them
//! ([`choose_slice_gpu`]), the best fit [`super::best_fit_gpu`] uses on the ledger.

/// Largest number of available GPUs for which every choice is examined.
pub const EXACT_LIMIT: usize = 16;

/// NVLink counts between the GPUs of one node (indices `0..gpus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTopology {
    gpus: u32,
    links: Vec<u32>,
}

impl NodeTopology {
    /// `gpus` GPUs and no known links.
    pub fn new(gpus: u32) -> Self {
        Self { gpus, links: vec![0; (gpus as usize) * (gpus as usize)] }
    }

    /// Records `count` NVLinks between GPUs `a` and `b` (both ways); out-of-range GPUs are ignored.
    pub fn link(&mut self, a: u32, b: u32, count: u32) {
        if a < self.gpus && b < self.gpus && a != b {
            let n = self.gpus as usize;
            self.links[a as usize * n + b as usize] = count;
            self.links[b as usize * n + a as usize] = count;
        }
    }

    /// Number of GPUs.
    pub fn gpus(&self) -> u32 {
        self.gpus
    }

    /// NVLinks between `a` and `b` (0: none or unknown).
    pub fn links(&self, a: u32, b: u32) -> u32 {
        let n = self.gpus as usize;
        if a < self.gpus && b < self.gpus { self.links[a as usize * n + b as usize] } else { 0 }
    }
}

/// Why no choice could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChoiceError {
    /// A GPU that must be included is not available.
    #[error("GPU {0} must be included but is not available")]
    MustNotAvailable(u32),
    /// More GPUs must be included than asked for.
    #[error("{must} GPUs must be included in a set of {size}")]
    TooManyMust {
        /// GPUs that must be included.
        must: usize,
        /// Size asked for.
        size: usize,
    },
    /// Fewer GPUs are available than asked for.
    #[error("{size} GPUs asked for, {available} available")]
    NotEnough {
        /// Size asked for.
        size: usize,
        /// GPUs available.
        available: usize,
    },
}

/// How good a set is: fewer broken blocks, then more links, then lower indices.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Cost {
    broken: u32,
    links: std::cmp::Reverse<u64>,
    set: Vec<u32>,
}

/// Chooses `size` GPUs out of `available`, including every GPU of `must` (see the module docs).
pub fn choose_gpus(
    topo: &NodeTopology,
    available: &[u32],
    must: &[u32],
    size: usize,
) -> Result<Vec<u32>, ChoiceError> {
    let mut avail: Vec<u32> = available.to_vec();
    avail.sort_unstable();
    avail.dedup();
    let mut must: Vec<u32> = must.to_vec();
    must.sort_unstable();
    must.dedup();
    if let Some(m) = must.iter().find(|m| avail.binary_search(m).is_err()) {
        return Err(ChoiceError::MustNotAvailable(*m));
    }
    if must.len() > size {
        return Err(ChoiceError::TooManyMust { must: must.len(), size });
    }
    if size > avail.len() {
        return Err(ChoiceError::NotEnough { size, available: avail.len() });
    }
    let intact = intact_blocks(topo.gpus, &avail);
    let rest: Vec<u32> = avail.iter().copied().filter(|g| must.binary_search(g).is_err()).collect();
    let need = size - must.len();
    let best = if avail.len() <= EXACT_LIMIT {
        let mut best: Option<Cost> = None;
        for_each_combination(&rest, need, &mut |extra| {
            let c = cost(topo, &intact, &must, extra);
            if best.as_ref().is_none_or(|b| c < *b) {
                best = Some(c);
            }
        });
        best.map(|c| c.set)
    } else {
        Some(greedy(topo, &intact, must, rest, need))
    };
    Ok(best.unwrap_or_default())
}

/// Aligned blocks of 2, 4, 8 … indices, all of whose GPUs are available, as (start, len).
fn intact_blocks(gpus: u32, avail: &[u32]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut len = 2;
    while len <= gpus {
        for start in (0..=gpus - len).step_by(len as usize) {
            if (start..start + len).all(|g| avail.binary_search(&g).is_ok()) {
                out.push((start, len));
            }
        }
        len *= 2;
    }
    out
}

fn cost(topo: &NodeTopology, intact: &[(u32, u32)], must: &[u32], extra: &[u32]) -> Cost {
    let mut set: Vec<u32> = must.iter().chain(extra).copied().collect();
    set.sort_unstable();
    let broken = intact
        .iter()
        .filter(|(start, len)| {
            let taken = set.iter().filter(|g| (*start..start + len).contains(g)).count() as u32;
            taken > 0 && taken < *len
        })
        .count() as u32;
    let mut links = 0u64;
    for (i, a) in set.iter().enumerate() {
        for b in &set[i + 1..] {
            links += u64::from(topo.links(*a, *b));
        }
    }
    Cost { broken, links: std::cmp::Reverse(links), set }
}

/// Calls `f` with every `k`-subset of `items`, in lexicographic order.
fn for_each_combination(items: &[u32], k: usize, f: &mut dyn FnMut(&[u32])) {
    fn go(items: &[u32], k: usize, from: usize, cur: &mut Vec<u32>, f: &mut dyn FnMut(&[u32])) {
        if cur.len() == k {
            f(cur);
            return;
        }
        let left = k - cur.len();
        for i in from..=items.len().saturating_sub(left) {
            cur.push(items[i]);
            go(items, k, i + 1, cur, f);
            cur.pop();
        }
    }
    if k <= items.len() {
        go(items, k, 0, &mut Vec::with_capacity(k), f);
    }
}

fn greedy(
    topo: &NodeTopology,
    intact: &[(u32, u32)],
    must: Vec<u32>,
    rest: Vec<u32>,
    need: usize,
) -> Vec<u32> {
    let mut chosen = must;
    let mut rest = rest;
    for _ in 0..need {
        let best =
            rest.iter().enumerate().min_by_key(|(_, g)| cost(topo, intact, &chosen, &[**g])).map(|(i, _)| i);
        if let Some(i) = best {
            chosen.push(rest.remove(i));
        }
    }
    chosen.sort_unstable();
    chosen
}

/// The GPU a slice of `size` units goes to: of the `(gpu, free units)` pairs that hold it, the
/// one with the fewest free units (best fit), lowest index on ties.
pub fn choose_slice_gpu(free: &[(u32, u64)], size: u64) -> Option<u32> {
    free.iter().filter(|(_, f)| *f >= size).min_by_key(|(g, f)| (*f, *g)).map(|(g, _)| *g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choose(topo: &NodeTopology, avail: &[u32], must: &[u32], size: usize) -> Vec<u32> {
        choose_gpus(topo, avail, must, size).expect("a choice")
    }

    #[test]
    fn a_two_gpu_request_takes_an_aligned_pair_not_two_halves() {
        let topo = NodeTopology::new(8);
        assert_eq!(choose(&topo, &[0, 1, 2, 3, 4, 5, 6, 7], &[], 2), [0, 1]);
        assert_eq!(choose(&topo, &[1, 2, 3, 4, 5, 6, 7], &[], 2), [2, 3]);
    }

    #[test]
    fn a_one_gpu_request_goes_where_a_pair_is_already_broken() {
        let topo = NodeTopology::new(8);
        assert_eq!(choose(&topo, &[0, 1, 2, 4, 5, 6, 7], &[], 1), [2]);
        assert_eq!(choose(&topo, &[0, 1, 2, 3, 4, 5, 7], &[], 1), [7]);
    }

    #[test]
    fn a_four_gpu_request_keeps_the_other_quad_intact() {
        let topo = NodeTopology::new(8);
        assert_eq!(choose(&topo, &[0, 2, 3, 4, 5, 6, 7], &[], 4), [4, 5, 6, 7]);
    }

    #[test]
    fn nvlink_breaks_ties_between_equally_good_blocks() {
        let mut topo = NodeTopology::new(8);
        topo.link(4, 5, 4);
        assert_eq!(choose(&topo, &[0, 1, 2, 3, 4, 5, 6, 7], &[], 2), [4, 5]);
        let mut topo = NodeTopology::new(3);
        topo.link(1, 2, 12);
        assert_eq!(choose(&topo, &[0, 1, 2], &[2], 2), [1, 2]);
        assert_eq!(choose(&NodeTopology::new(3), &[0, 1, 2], &[2], 2), [0, 2]);
    }

    #[test]
    fn must_include_gpus_are_always_in_the_answer() {
        let topo = NodeTopology::new(8);
        assert_eq!(choose(&topo, &[0, 1, 2, 3, 4, 5, 6, 7], &[5], 2), [4, 5]);
        assert_eq!(choose(&topo, &[0, 1, 2, 3], &[0, 3], 2), [0, 3]);
    }

    #[test]
    fn impossible_requests_are_errors_not_panics() {
        let topo = NodeTopology::new(4);
        assert_eq!(choose_gpus(&topo, &[0, 1], &[2], 1), Err(ChoiceError::MustNotAvailable(2)));
        assert_eq!(
            choose_gpus(&topo, &[0, 1], &[0, 1], 1),
            Err(ChoiceError::TooManyMust { must: 2, size: 1 })
        );
        assert_eq!(
            choose_gpus(&topo, &[0, 1], &[], 3),
            Err(ChoiceError::NotEnough { size: 3, available: 2 })
        );
        assert_eq!(choose_gpus(&topo, &[0, 1], &[], 0), Ok(vec![]));
    }

    #[test]
    fn large_nodes_fall_back_to_a_greedy_choice_that_still_keeps_blocks() {
        let topo = NodeTopology::new(32);
        let avail: Vec<u32> = (1..32).collect();
        assert_eq!(choose(&topo, &avail, &[], 1), [1]);
        assert_eq!(choose(&topo, &avail, &[], 2).len(), 2);
    }

    #[test]
    fn a_slice_goes_to_the_fullest_gpu_that_still_holds_it() {
        assert_eq!(choose_slice_gpu(&[(0, 8000), (1, 3000), (2, 1000)], 2000), Some(1));
        assert_eq!(choose_slice_gpu(&[(0, 8000), (1, 8000)], 2000), Some(0));
        assert_eq!(choose_slice_gpu(&[(0, 100)], 2000), None);
    }
}
