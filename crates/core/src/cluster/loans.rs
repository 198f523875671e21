//! Lent GPUs: a state of the ledger between allocated and free.
//!
//! An owner whose job leaves its GPUs idle under a `lend` policy keeps its allocation; each of
//! its GPUs is marked lent ([`Cluster::lend`]) and may then hold one borrower besides its owner
//! ([`Cluster::borrow`]): a preemptible job, placed there by the scheduling pass only, that the
//! owner's return preempts. The GPU's free share stays zero throughout, so nothing else is ever
//! placed on it, and a borrower counts against its node's CPU and memory like any allocation.
//! When the owner lets go of a GPU its borrower still holds (the owner ended, or was preempted
//! itself), the GPU stays taken and is the borrower's ([`Lent::Kept`]) until the borrower gives
//! it back ([`Cluster::give_back`]): no sequence of calls puts a third job on a lent GPU.

use std::collections::HashMap;

use super::{AllocationId, Cluster, Held, LedgerError, NodeId, Placement};
use crate::resources::{Request, WHOLE_GPU};

/// How a lent GPU is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lent {
    /// Lent by its owner; nobody borrows it.
    Free,
    /// Lent by its owner to this borrower.
    To(AllocationId),
    /// Its owner let go while this borrower held it: the borrower's alone.
    Kept(AllocationId),
}

/// The lent GPUs and the borrowers on them.
#[derive(Debug, Clone, Default)]
pub(super) struct Loans {
    gpus: HashMap<(NodeId, u32), Lent>,
    borrowed: HashMap<AllocationId, Held>,
}

impl Loans {
    /// The owner released `gpus` of `node`: loans nobody borrows end, borrowed ones become the
    /// borrower's. Returns the GPUs that stay taken.
    pub(super) fn owner_released(&mut self, node: NodeId, gpus: &[u32]) -> Vec<u32> {
        let mut kept = Vec::new();
        for g in gpus {
            match self.gpus.get(&(node, *g)).copied() {
                Some(Lent::Free) => {
                    self.gpus.remove(&(node, *g));
                }
                Some(Lent::To(b) | Lent::Kept(b)) => {
                    self.gpus.insert((node, *g), Lent::Kept(b));
                    kept.push(*g);
                }
                None => {}
            }
        }
        kept
    }
}

impl Cluster {
    /// Lends GPU `gpu` of `node`: its owner keeps its allocation and one preemptible job may
    /// borrow it. The GPU must be wholly allocated and not lent already.
    pub fn lend(&mut self, node: NodeId, gpu: u32) -> Result<(), LedgerError> {
        let fail = |reason| Err(LedgerError::DoesNotFit { node, reason });
        let n = self.nodes.get(node).ok_or(LedgerError::NoSuchNode(node))?;
        match n.gpu_free.get(gpu as usize) {
            None => return fail("the node has no such GPU"),
            Some(free) if *free != 0 => return fail("only a wholly allocated GPU can be lent"),
            Some(_) => {}
        }
        if self.loans.gpus.contains_key(&(node, gpu)) {
            return fail("the GPU is lent already");
        }
        self.loans.gpus.insert((node, gpu), Lent::Free);
        self.touch(node);
        Ok(())
    }

    /// How GPU `gpu` of `node` is lent, if it is.
    pub fn lent(&self, node: NodeId, gpu: u32) -> Option<Lent> {
        self.loans.gpus.get(&(node, gpu)).copied()
    }

    /// The lent GPUs of `node` nobody borrows, lowest index first.
    pub fn lendable(&self, node: NodeId) -> Vec<u32> {
        let gpus = self.nodes.get(node).map_or(0, |n| n.gpu_free.len() as u32);
        (0..gpus).filter(|g| self.lent(node, *g) == Some(Lent::Free)).collect()
    }

    /// Places borrower `id` on lent GPUs nobody borrows (whole GPUs only), taking its CPU and
    /// memory from the node; changes nothing and says why when it does not fit.
    pub fn borrow(
        &mut self,
        id: AllocationId,
        req: &Request,
        placement: &Placement,
    ) -> Result<(), LedgerError> {
        if self.held.contains_key(&id) || self.loans.borrowed.contains_key(&id) {
            return Err(LedgerError::DuplicateAllocation(id));
        }
        let node = placement.node;
        let fail = |reason| Err(LedgerError::DoesNotFit { node, reason });
        let n = self.nodes.get(node).ok_or(LedgerError::NoSuchNode(node))?;
        if !n.schedulable {
            return fail("node is not schedulable");
        }
        if !req.nodes.allows(n.tags) {
            return fail("not in the job's pool or does not match its node selector");
        }
        if req.cpu_milli > n.cpu_free || req.memory_mib > n.memory_free {
            return fail("not enough CPU or memory");
        }
        if req.gpu_milli != WHOLE_GPU || req.gpus == 0 || placement.gpus.len() != req.gpus as usize {
            return fail("a borrower takes whole lent GPUs");
        }
        if !req.models.allows(n.model) {
            return fail("GPU model not allowed");
        }
        for (k, g) in placement.gpus.iter().enumerate() {
            if placement.gpus[..k].contains(g) {
                return fail("placement names the same GPU twice");
            }
            if self.lent(node, *g) != Some(Lent::Free) {
                return fail("the GPU is not lent, or is borrowed already");
            }
        }
        for g in &placement.gpus {
            self.loans.gpus.insert((node, *g), Lent::To(id));
        }
        let n = &mut self.nodes[node];
        n.cpu_free -= req.cpu_milli;
        n.memory_free -= req.memory_mib;
        n.allocations += 1;
        self.loans.borrowed.insert(id, Held { request: *req, placement: placement.clone() });
        self.touch(node);
        Ok(())
    }

    /// Ends borrower `id`'s borrow: its lent GPUs may be borrowed again, and those their owner
    /// let go meanwhile are free.
    pub fn give_back(&mut self, id: AllocationId) -> Result<(), LedgerError> {
        let held = self.loans.borrowed.remove(&id).ok_or(LedgerError::UnknownAllocation(id))?;
        let node = held.placement.node;
        for g in &held.placement.gpus {
            match self.loans.gpus.get(&(node, *g)).copied() {
                Some(Lent::Kept(_)) => {
                    self.loans.gpus.remove(&(node, *g));
                    self.nodes[node].gpu_free[*g as usize] += WHOLE_GPU;
                    self.used_milli -= u64::from(WHOLE_GPU);
                }
                Some(Lent::To(_)) => {
                    self.loans.gpus.insert((node, *g), Lent::Free);
                }
                _ => {}
            }
        }
        let n = &mut self.nodes[node];
        n.cpu_free += held.request.cpu_milli;
        n.memory_free += held.request.memory_mib;
        n.allocations -= 1;
        self.touch(node);
        Ok(())
    }

    /// Number of borrowers placed.
    pub fn borrowed_count(&self) -> usize {
        self.loans.borrowed.len()
    }

    fn touch(&mut self, node: NodeId) {
        self.clock += 1;
        self.nodes[node].version = self.clock;
        self.journal.record(node, self.nodes.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{ModelSet, NodeSpec};

    fn cluster() -> Cluster {
        let spec = NodeSpec {
            name: "a".into(),
            cpu_milli: 8000,
            memory_mib: 8192,
            gpus: 2,
            gpu_model: Some("T4".into()),
            gpu_memory_mib: 16_384,
        };
        Cluster::new(vec![spec]).expect("one node")
    }

    fn one_gpu() -> Request {
        Request::new(1000, 1024, 1, WHOLE_GPU, 0, ModelSet::Any).expect("valid")
    }

    fn on(gpu: u32) -> Placement {
        Placement { node: 0, gpus: vec![gpu] }
    }

    #[test]
    fn a_lent_gpu_takes_one_borrower_and_nothing_else() {
        let mut c = cluster();
        assert!(c.lend(0, 0).is_err(), "a free GPU is not lent: it is free");
        c.allocate(1, &one_gpu(), &on(0)).expect("the owner");
        c.lend(0, 0).expect("the owner's idle GPU");
        assert_eq!(c.lendable(0), vec![0]);
        assert!(c.allocate(2, &one_gpu(), &on(0)).is_err(), "an ordinary job never lands on it");
        c.borrow(3, &one_gpu(), &on(0)).expect("a borrower");
        assert_eq!(c.lent(0, 0), Some(Lent::To(3)));
        assert!(c.borrow(4, &one_gpu(), &on(0)).is_err(), "one borrower per GPU");
        assert!(c.borrow(5, &one_gpu(), &on(1)).is_err(), "GPU 1 is not lent");
        assert_eq!(c.node(0).map(|n| n.cpu_free), Some(6000), "owner and borrower take CPU");
        c.give_back(3).expect("the borrower is preempted");
        assert_eq!(c.lendable(0), vec![0], "still lent: the owner holds it");
    }

    #[test]
    fn an_owner_letting_go_leaves_the_gpu_to_its_borrower_until_it_gives_it_back() {
        let mut c = cluster();
        c.allocate(1, &one_gpu(), &on(0)).expect("the owner");
        c.lend(0, 0).expect("lent");
        c.borrow(2, &one_gpu(), &on(0)).expect("borrowed");
        c.release(1).expect("the owner ends");
        assert_eq!(c.lent(0, 0), Some(Lent::Kept(2)));
        assert!(c.allocate(3, &one_gpu(), &on(0)).is_err(), "the borrower still runs there");
        assert_eq!(c.used_milli(), 1000);
        c.give_back(2).expect("the borrower ends");
        assert_eq!((c.lent(0, 0), c.used_milli()), (None, 0));
        c.allocate(3, &one_gpu(), &on(0)).expect("free again");
    }

    #[test]
    fn a_loan_nobody_borrows_ends_with_its_owner() {
        let mut c = cluster();
        c.allocate(1, &one_gpu(), &on(1)).expect("the owner");
        c.lend(0, 1).expect("lent");
        c.release(1).expect("the owner ends");
        assert_eq!(c.lent(0, 1), None);
        assert_eq!(c.node(0).map(Node::idle_gpus), Some(2));
    }

    use super::super::Node;
}
