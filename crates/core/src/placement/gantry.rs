//! Gantry's default placement policy: FGD's fragmentation gradient, extended with what FGD
//! cannot see.
//!
//! FGD measures how much free GPU share the *next* typical pod could not use. Where its idle
//! GPUs go at the end of the benchmark (see `docs/scheduling.md`) shows four blind spots, and
//! Gantry adds one term for each, all in FGD's unit (milli-GPU) and inside FGD's integer score,
//! so FGD's "ties go to the earliest node" packing is kept:
//!
//! 1. **CPU stranding.** A node whose free CPU cannot feed its free GPUs at the workload's
//!    average CPU-per-GPU ratio will strand GPUs, one pod at a time, long before any single
//!    typical pod notices. Stranded share S = max(0, G_free − C_free / r̄); the score subtracts
//!    `stranding_weight` × ΔS, so CPU-hungry pods go where CPU is plentiful and CPU-light pods
//!    go where it is scarce.
//! 2. **Scarce models.** Requests pinned to a GPU model make that model's capacity worth more
//!    than its share. Each model gets a shadow price (1 when nothing is pinned; demand of the
//!    requests that accept it, spread over the capacity they accept), and taking GPU share on a
//!    model costs `model_price_weight` × (price − 1) × share.
//! 3. **Whole-GPU blocks.** Multi-GPU requests need k idle GPUs on one node. Their shapes join
//!    the typical set at their true frequency (FGD's 95 % cut usually drops them), and breaking
//!    a node's last k-block costs k GPUs × how scarce k-blocks are: min(1, expected future
//!    k-GPU requests / k-blocks left), with the expectation taken from the free capacity and the
//!    workload's share of k-GPU demand.
//! 4. **Terminal waste of a gap.** FGD calls a 350 gap "usable" by a 320 slice, but what it
//!    will finally waste is the 30 left after that. W(r), the waste a gap r is expected to end
//!    with as fitting slices from the workload keep landing in it (a dynamic programme over
//!    slice sizes, with the chance of another slice arriving shrinking as fewer sizes fit), is
//!    computed once; a slice scores `waste_weight` × (W(gap before) − W(gap after)), an idle
//!    GPU counting as no waste because whole-GPU requests use it.

use std::sync::Arc;

use super::classes::NodeClasses;
use super::fgd::{each_outcome, points};
use super::{Placement, Policy, Score, finish, pick};
use crate::cluster::{Cluster, Node, NodeId};
use crate::frag::{Shape, TypicalPods};
use crate::resources::{ModelSet, Request, WHOLE_GPU};
use crate::rng::RandomSource;

/// Weights of Gantry's terms (see the module docs). The defaults were chosen on the public
/// openb traces and hold on all fourteen of them (`docs/scheduling.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GantryParams {
    /// Weight of the CPU-stranding change.
    pub stranding_weight: f64,
    /// Weight of the model shadow price.
    pub model_price_weight: f64,
    /// Weight of multi-GPU shapes added to the typical set (1 = their true frequency).
    pub multi_gpu_weight: f64,
    /// Weight of the k-block reservation cost.
    pub reservation_weight: f64,
    /// Weight of the change in a slice's GPU's expected terminal waste.
    pub waste_weight: f64,
    /// How many requests' worth of arrivals a gap sees before the cluster is full (φ in W(r)).
    pub fill_rate: f64,
}

impl Default for GantryParams {
    fn default() -> Self {
        Self {
            stranding_weight: 0.4,
            model_price_weight: 1.0,
            multi_gpu_weight: 1.0,
            reservation_weight: 0.05,
            waste_weight: 3.0,
            fill_rate: 30.0,
        }
    }
}

/// One way a node could take the request, before the live reservation cost.
#[derive(Debug, Clone)]
struct Outcome {
    gpu: Option<u32>,
    delta: f64,
    /// The k-blocks (block shape, milli-GPU) this outcome destroys (empty when it takes no
    /// idle GPU).
    lost: Vec<(usize, f64)>,
}

/// What Gantry keeps per (node class, request shape): the outcomes, and an upper bound of
/// their score (the reservation cost only ever lowers it).
#[derive(Debug, Clone)]
struct Scored {
    bound: i64,
    outcomes: Vec<Outcome>,
}

/// A multi-GPU shape whose k-blocks are worth keeping.
#[derive(Debug, Clone, Copy)]
struct BlockShape {
    gpus: u32,
    cpu_milli: u64,
    models: ModelSet,
    demand_share: f64,
}

/// Gantry's policy. One instance serves one [`Cluster`]: it scores each class of identical
/// nodes once per request shape and keeps the result until an allocation changes the node
/// (see [`super::classes`]).
#[derive(Debug)]
pub struct Gantry {
    model: Model,
    classes: NodeClasses<Scored>,
    scratch: Vec<u32>,
    /// k-blocks per node and block shape, and their sums over nodes.
    node_blocks: Vec<Vec<u64>>,
    blocks_left: Vec<u64>,
}

/// Everything Gantry's score reads that is not the node: weights, the workload's statistics,
/// and the live scarcity of k-blocks.
#[derive(Debug)]
struct Model {
    params: GantryParams,
    /// Expected terminal waste of a gap, indexed by its free milli-GPU.
    waste: Vec<f64>,
    typical: Arc<TypicalPods>,
    all_shapes: Vec<Shape>,
    blocks: Vec<BlockShape>,
    cpu_per_gpu_milli: f64,
    prices: Vec<f64>,
    scarcity: Vec<f64>,
}

impl Gantry {
    /// Gantry's policy with default weights over the given typical-pod distribution.
    pub fn new(typical: Arc<TypicalPods>) -> Self {
        Self::with_params(typical, GantryParams::default())
    }

    /// Gantry's policy with explicit weights.
    pub fn with_params(typical: Arc<TypicalPods>, params: GantryParams) -> Self {
        let all_shapes = typical.all_shapes().to_vec();
        let demand: f64 = all_shapes.iter().map(shape_demand).sum();
        let cpu: f64 = all_shapes.iter().map(|t| t.p * t.cpu_milli as f64).sum();
        let cpu_per_gpu_milli = if demand > 0.0 { cpu / demand } else { 0.0 };
        let mut shapes = typical.shapes().to_vec();
        let mut blocks: Vec<BlockShape> = Vec::new();
        for t in all_shapes.iter().filter(|t| t.gpus > 1) {
            if !shapes.iter().any(|s| same_shape(s, t)) {
                shapes.push(Shape { p: t.p * params.multi_gpu_weight, ..*t });
            }
            let share = if demand > 0.0 { shape_demand(t) / demand } else { 0.0 };
            match blocks
                .iter_mut()
                .find(|b| b.gpus == t.gpus && b.models == t.models && b.cpu_milli == t.cpu_milli)
            {
                Some(b) => b.demand_share += share,
                None => blocks.push(BlockShape {
                    gpus: t.gpus,
                    cpu_milli: t.cpu_milli,
                    models: t.models,
                    demand_share: share,
                }),
            }
        }
        let waste = terminal_waste(&all_shapes, params.fill_rate);
        let model = Model {
            waste,
            params,
            typical: Arc::new(TypicalPods::from_shapes(shapes)),
            all_shapes,
            blocks,
            cpu_per_gpu_milli,
            prices: Vec::new(),
            scarcity: Vec::new(),
        };
        Self {
            model,
            classes: NodeClasses::default(),
            scratch: Vec::new(),
            node_blocks: Vec::new(),
            blocks_left: Vec::new(),
        }
    }

    /// The straightforward scorer: every node in `order` scored from scratch and k-blocks
    /// counted over every node, nothing cached. [`Policy::place`] returns the same placement;
    /// the property tests hold it to that.
    pub fn place_exhaustive(
        &mut self,
        cluster: &Cluster,
        req: &Request,
        order: &[NodeId],
    ) -> Option<Placement> {
        self.model.prepare(cluster);
        self.model.scarcity.clear();
        if self.model.wants_scarcity(req) {
            let mut left = vec![0u64; self.model.blocks.len()];
            for n in cluster.nodes() {
                left.iter_mut().zip(self.model.node_blocks(n)).for_each(|(l, b)| *l += b);
            }
            self.model.compute_scarcity(cluster, &left);
        }
        let (model, scratch) = (&self.model, &mut self.scratch);
        pick(cluster, req, order, false, |_, node| model.score(&model.outcomes(scratch, node, req), req))
    }

    /// Counts the k-blocks of a node whose free-resource vector changed.
    fn node_changed(
        model: &Model,
        node_blocks: &mut Vec<Vec<u64>>,
        left: &mut [u64],
        id: NodeId,
        node: &Node,
    ) {
        if node_blocks.len() <= id {
            node_blocks.resize(id + 1, vec![0; left.len()]);
        }
        let now = model.node_blocks(node);
        for ((l, was), now) in left.iter_mut().zip(node_blocks[id].iter_mut()).zip(now) {
            *l = *l - *was + now;
            *was = now;
        }
    }
}

impl Model {
    /// Computes the model prices the first time (and when the cluster's model table grows);
    /// returns whether they changed.
    fn prepare(&mut self, cluster: &Cluster) -> bool {
        if self.prices.len() == cluster.models().len() {
            return false;
        }
        self.compute_prices(cluster);
        true
    }

    fn wants_scarcity(&self, req: &Request) -> bool {
        req.gpus > 0 && self.params.reservation_weight > 0.0 && !self.blocks.is_empty()
    }

    /// A node's k-blocks per block shape.
    fn node_blocks<'a>(&'a self, n: &'a Node) -> impl Iterator<Item = u64> + 'a {
        let idle = n.idle_gpus() as u32;
        self.blocks.iter().map(move |shape| {
            if n.schedulable && shape.models.allows(n.model) { blocks_of(shape, idle, n.cpu_free) } else { 0 }
        })
    }

    /// Shadow price of each model's GPU share (see the module docs).
    fn compute_prices(&mut self, cluster: &Cluster) {
        let n = cluster.models().len();
        let mut capacity = vec![0.0f64; n];
        for node in cluster.nodes() {
            if let Some(m) = node.model {
                capacity[m as usize] += node.gpu_free.len() as f64;
            }
        }
        let total: f64 = capacity.iter().sum();
        let demand: f64 = self.all_shapes.iter().map(shape_demand).sum();
        let mut prices = vec![0.0; n];
        for t in self.all_shapes.iter().filter(|t| t.gpus > 0) {
            let allowed: Vec<usize> = (0..n).filter(|m| t.models.allows(Some(*m as u8))).collect();
            let reach: f64 = allowed.iter().map(|m| capacity[*m]).sum();
            if reach > 0.0 && demand > 0.0 {
                for m in allowed {
                    prices[m] += shape_demand(t) / demand * total / reach;
                }
            }
        }
        self.prices = prices;
    }

    /// How scarce each block shape's k-blocks are now, given how many are left: min(1,
    /// expected future k-GPU requests / k-blocks left).
    fn compute_scarcity(&mut self, cluster: &Cluster, blocks_left: &[u64]) {
        let free_gpus = (cluster.capacity_milli() - cluster.used_milli()) as f64 / f64::from(WHOLE_GPU);
        self.scarcity.clear();
        for (b, left) in self.blocks.iter().zip(blocks_left) {
            let expected = free_gpus * b.demand_share / f64::from(b.gpus);
            self.scarcity.push((expected / (*left).max(1) as f64).min(1.0));
        }
    }

    /// Every way the node could take `req`, scored without the live reservation cost (the node
    /// has passed the filter).
    fn outcomes(&self, scratch: &mut Vec<u32>, node: &Node, req: &Request) -> Scored {
        let params = &self.params;
        let before = self.typical.node_fragment(node);
        let stranding = stranding_change(node, req, self.cpu_per_gpu_milli);
        let price =
            node.model.map_or(0.0, |m| (self.prices[m as usize] - 1.0) * req.gpu_milli_total() as f64);
        let fixed = params.stranding_weight * stranding + params.model_price_weight * price;
        let blocks: Vec<u64> = self.node_blocks(node).collect();
        let idle = node.idle_gpus() as u32;
        let mut outcomes = Vec::new();
        each_outcome(&self.typical, scratch, node, req, |gpu, after| {
            let idle_taken = match gpu {
                Some(g) => u32::from(node.gpu_free[g as usize] == WHOLE_GPU),
                None => req.gpus,
            };
            let saved =
                gpu.map_or(0.0, |g| waste_saved(&self.waste, node.gpu_free[g as usize], req.gpu_milli));
            let delta = before - after - fixed + params.waste_weight * saved;
            let lost = if idle_taken == 0 {
                Vec::new()
            } else {
                lost_blocks(&self.blocks, &blocks, idle, node.cpu_free - req.cpu_milli, idle_taken)
            };
            outcomes.push(Outcome { gpu, delta, lost });
        });
        let bound = if params.reservation_weight >= 0.0 {
            outcomes.iter().map(|o| points(o.delta)).max().unwrap_or(i64::MIN)
        } else {
            i64::MAX
        };
        Scored { bound, outcomes }
    }

    /// The best outcome with the live reservation cost (first in GPU order among equals).
    fn score(&self, scored: &Scored, req: &Request) -> Option<Score> {
        let mut best: Option<Score> = None;
        for o in &scored.outcomes {
            let cost = if self.scarcity.is_empty() || !self.wants_scarcity(req) {
                0.0
            } else {
                o.lost.iter().map(|(b, milli)| self.scarcity[*b] * milli).sum()
            };
            let value = points(o.delta - self.params.reservation_weight * cost);
            if best.is_none_or(|b| value > b.value) {
                best = Some(Score { value, gpu: o.gpu });
            }
        }
        best
    }
}

/// How much expected terminal waste a slice of `milli` saves by going into a GPU with `free`
/// (negative: it creates waste). An idle GPU wastes nothing, since whole-GPU requests use it.
fn waste_saved(waste: &[f64], free: u32, milli: u32) -> f64 {
    let was = if free == WHOLE_GPU { 0.0 } else { waste[free as usize] };
    was - waste[(free - milli) as usize]
}

/// W(r), the waste a gap of r milli-GPU is expected to end with: each step, with probability
/// φ = min(1, `fill_rate` × share of the workload's requests that fit), a fitting slice drawn
/// from the workload's slice sizes lands in it and W(r − s) follows; otherwise r stays unused.
fn terminal_waste(shapes: &[Shape], fill_rate: f64) -> Vec<f64> {
    let n = WHOLE_GPU as usize;
    let total: f64 = shapes.iter().map(|t| t.p).sum();
    let mut sizes: Vec<(usize, f64)> = Vec::new();
    for t in shapes.iter().filter(|t| t.gpus == 1 && t.gpu_milli < WHOLE_GPU) {
        match sizes.iter_mut().find(|s| s.0 == t.gpu_milli as usize) {
            Some(s) => s.1 += t.p,
            None => sizes.push((t.gpu_milli as usize, t.p)),
        }
    }
    let mut w = vec![0.0; n + 1];
    for r in 1..=n {
        let fit: f64 = sizes.iter().filter(|s| s.0 <= r).map(|s| s.1).sum();
        if fit <= 0.0 || total <= 0.0 {
            w[r] = r as f64;
            continue;
        }
        let phi = (fill_rate * fit / total).min(1.0);
        let next: f64 = sizes.iter().filter(|s| s.0 <= r).map(|s| s.1 / fit * w[r - s.0]).sum();
        w[r] = (1.0 - phi) * r as f64 + phi * next;
    }
    w
}

fn blocks_of(b: &BlockShape, idle: u32, cpu_free: u64) -> u64 {
    if cpu_free < b.cpu_milli { 0 } else { u64::from(idle / b.gpus) }
}

fn shape_demand(t: &Shape) -> f64 {
    t.p * f64::from(t.gpus) * f64::from(t.gpu_milli)
}

fn same_shape(a: &Shape, b: &Shape) -> bool {
    a.gpus == b.gpus && a.gpu_milli == b.gpu_milli && a.cpu_milli == b.cpu_milli && a.models == b.models
}

impl Policy for Gantry {
    fn name(&self) -> &'static str {
        "gantry"
    }

    fn place(
        &mut self,
        cluster: &Cluster,
        req: &Request,
        order: &[NodeId],
        _: &mut dyn RandomSource,
    ) -> Option<Placement> {
        if self.model.prepare(cluster) {
            self.classes.clear_values();
        }
        let (model, node_blocks) = (&self.model, &mut self.node_blocks);
        self.blocks_left.resize(model.blocks.len(), 0);
        let left = &mut self.blocks_left;
        self.classes.sync(cluster, order, |id, node| Self::node_changed(model, node_blocks, left, id, node));
        self.model.scarcity.clear();
        if self.model.wants_scarcity(req) {
            self.model.compute_scarcity(cluster, &self.blocks_left);
        }
        let shape = self.classes.shape_id(req);
        let (model, scratch) = (&self.model, &mut self.scratch);
        let best = self.classes.best(
            cluster,
            req,
            shape,
            |node| model.outcomes(scratch, node, req),
            |scored| scored.bound,
            |scored, _, _| model.score(scored, req),
        )?;
        finish(cluster, req, best.node, best.score.gpu)
    }
}

/// The k-blocks (block shape, milli-GPU) a node with `blocks` k-blocks and `idle` idle GPUs
/// loses if it gives up `taken` idle GPUs and is left with `cpu_after` CPU.
fn lost_blocks(
    blocks: &[BlockShape],
    now: &[u64],
    idle: u32,
    cpu_after: u64,
    taken: u32,
) -> Vec<(usize, f64)> {
    blocks
        .iter()
        .enumerate()
        .filter(|(b, _)| now[*b] > 0)
        .filter_map(|(b, shape)| {
            let after = blocks_of(shape, idle.saturating_sub(taken), cpu_after);
            let lost = now[b] - after.min(now[b]);
            (lost > 0).then(|| (b, lost as f64 * f64::from(shape.gpus * WHOLE_GPU)))
        })
        .collect()
}

/// Change in the node's CPU-stranded GPU share if it takes `req`.
fn stranding_change(node: &Node, req: &Request, cpu_per_gpu_milli: f64) -> f64 {
    if cpu_per_gpu_milli <= 0.0 {
        return 0.0;
    }
    let stranded = |cpu: u64, gpu: u64| (gpu as f64 - cpu as f64 / cpu_per_gpu_milli).max(0.0);
    let gpu_free = node.gpu_free_total();
    stranded(node.cpu_free - req.cpu_milli, gpu_free - req.gpu_milli_total())
        - stranded(node.cpu_free, gpu_free)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice_shape(milli: u32, p: f64) -> Shape {
        Shape { cpu_milli: 1000, gpus: 1, gpu_milli: milli, models: ModelSet::Any, p }
    }

    #[test]
    fn a_gap_no_slice_fits_is_all_waste_and_a_gap_slices_fill_exactly_is_none() {
        let w = terminal_waste(&[slice_shape(500, 1.0)], 1000.0);
        assert_eq!(w[499], 499.0);
        assert_eq!(w[500], 0.0);
        assert_eq!(w[700], 200.0);
        assert_eq!(w[1000], 0.0);
    }

    #[test]
    fn rarely_fitting_slices_leave_most_of_a_small_gap_wasted() {
        // A 100-milli slice is 1 % of the workload: a 190 gap is mostly wasted, not 90.
        let w = terminal_waste(&[slice_shape(100, 0.01), slice_shape(810, 0.99)], 30.0);
        assert!(w[190] > 150.0 && w[190] < 190.0, "{}", w[190]);
        assert!(waste_saved(&w, 1000, 810) < 0.0, "opening a GPU for 810 creates waste");
        assert!(waste_saved(&w, 190, 100) > 0.0, "filling a sliver saves waste");
    }
}
