//! What a node offers and what a request asks for.
//!
//! Units: CPU in milli-cores, memory in MiB, GPU share in milli-GPU (1000 = one whole GPU).

use serde::{Deserialize, Serialize};

/// One whole GPU in milli-GPU.
pub const WHOLE_GPU: u32 = 1000;

/// A machine as declared: capacity and the GPUs it carries (all of one model).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Unique node name.
    pub name: String,
    /// CPU capacity in milli-cores.
    pub cpu_milli: u64,
    /// Memory capacity in MiB.
    pub memory_mib: u64,
    /// Number of GPUs.
    pub gpus: u32,
    /// GPU model name (e.g. `A100-80GB`); `None` only when `gpus == 0`.
    pub gpu_model: Option<String>,
    /// Memory of each GPU in MiB (0 when unknown, e.g. in traces).
    pub gpu_memory_mib: u64,
}

/// A small interned index of a GPU model in a [`crate::Cluster`]'s model table.
pub type ModelId = u8;

/// The GPU models a request accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ModelSet {
    /// Any model.
    #[default]
    Any,
    /// Only the models whose bit is set (bit i = model id i). An empty mask matches nothing,
    /// which is what a request naming only models the cluster lacks must get.
    Only(u64),
}

impl ModelSet {
    /// Whether a node of `model` is acceptable.
    pub fn allows(self, model: Option<ModelId>) -> bool {
        match (self, model) {
            (ModelSet::Any, _) => true,
            (ModelSet::Only(mask), Some(id)) => mask & (1u64 << id) != 0,
            (ModelSet::Only(_), None) => false,
        }
    }
}

/// The nodes a request may use, by the caller's node filters (a pool, a label selector): bit i
/// stands for filter i, and a node passes the filters whose bits its
/// [`crate::cluster::Node::tags`] carry. The caller resolves selectors against its nodes' labels
/// and numbers the distinct filters of a pass; the ledger only checks the bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum NodeSet {
    /// Any node.
    #[default]
    Any,
    /// Only nodes tagged with one of these bits. An empty mask matches nothing.
    Only(u64),
}

impl NodeSet {
    /// Whether a node carrying `tags` is acceptable.
    pub fn allows(self, tags: u64) -> bool {
        match self {
            NodeSet::Any => true,
            NodeSet::Only(mask) => mask & tags != 0,
        }
    }
}

/// How to choose among the nodes (and GPUs) a request may use: a node pool's placement
/// (`gantry pool set NAME --placement pack|spread`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preference {
    /// The placement policy's choice: fragmentation-aware packing (Gantry's default).
    #[default]
    Pack,
    /// The least allocated node, then its least used GPU ([`crate::placement::Spread`]).
    Spread,
}

impl Preference {
    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Preference::Pack => "pack",
            Preference::Spread => "spread",
        }
    }

    /// Parses `pack` or `spread`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pack" => Some(Preference::Pack),
            "spread" => Some(Preference::Spread),
            _ => None,
        }
    }
}

/// Whether a GPU model name a user typed (`A100`) names `model` (`A100-80GB`, `NVIDIA
/// A100-SXM4-80GB`): equal ignoring case, or a prefix of one of its words that ends where the
/// word or a `-` does (so `A10` does not match `A100`, and `A100-80GB` matches only itself).
pub fn model_matches(asked: &str, model: &str) -> bool {
    let (asked, model) = (asked.trim().to_ascii_lowercase(), model.to_ascii_lowercase());
    if asked.is_empty() {
        return false;
    }
    model.split([' ', '_']).any(|word| {
        word.strip_prefix(asked.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
    })
}

/// Why a request is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A GPU share outside 1..=1000 milli-GPU.
    #[error("gpu share must be between 1 and 1000 milli-GPU, got {0}")]
    ShareOutOfRange(u32),
    /// Fractions only exist for single-GPU requests.
    #[error("a request for {0} GPUs must take whole GPUs; fractions are for one GPU only")]
    FractionOfSeveral(u32),
    /// GPU memory asked without a GPU.
    #[error("gpu memory was requested without a GPU")]
    GpuMemoryWithoutGpu,
}

/// What one job (or pod) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// CPU in milli-cores.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Number of GPUs (0 for a CPU-only request).
    pub gpus: u32,
    /// Share of each GPU in milli-GPU: 1000 for whole GPUs, less for a slice (then `gpus == 1`).
    pub gpu_milli: u32,
    /// GPU memory for a slice in MiB (0 = not constrained by memory).
    pub gpu_memory_mib: u64,
    /// Acceptable GPU models.
    pub models: ModelSet,
    /// Acceptable nodes (a pool, a label selector).
    pub nodes: NodeSet,
    /// How to choose among them.
    pub placement: Preference,
}

impl Request {
    /// A CPU-only request.
    pub fn cpu_only(cpu_milli: u64, memory_mib: u64) -> Self {
        Self {
            cpu_milli,
            memory_mib,
            gpus: 0,
            gpu_milli: 0,
            gpu_memory_mib: 0,
            models: ModelSet::Any,
            nodes: NodeSet::Any,
            placement: Preference::Pack,
        }
    }

    /// A validated request; `gpu_milli` is ignored when `gpus == 0`.
    pub fn new(
        cpu_milli: u64,
        memory_mib: u64,
        gpus: u32,
        gpu_milli: u32,
        gpu_memory_mib: u64,
        models: ModelSet,
    ) -> Result<Self, RequestError> {
        if gpus == 0 {
            if gpu_memory_mib > 0 {
                return Err(RequestError::GpuMemoryWithoutGpu);
            }
            return Ok(Self::cpu_only(cpu_milli, memory_mib));
        }
        if gpu_milli == 0 || gpu_milli > WHOLE_GPU {
            return Err(RequestError::ShareOutOfRange(gpu_milli));
        }
        if gpus > 1 && gpu_milli != WHOLE_GPU {
            return Err(RequestError::FractionOfSeveral(gpus));
        }
        Ok(Self { gpus, gpu_milli, gpu_memory_mib, models, ..Self::cpu_only(cpu_milli, memory_mib) })
    }

    /// Whether this asks for part of one GPU rather than whole GPUs.
    pub fn is_slice(&self) -> bool {
        self.gpus == 1 && (self.gpu_milli < WHOLE_GPU || self.gpu_memory_mib > 0)
    }

    /// Total GPU demand in milli-GPU.
    pub fn gpu_milli_total(&self) -> u64 {
        u64::from(self.gpus) * u64::from(self.gpu_milli)
    }

    /// The request's class, as GPU Clustering groups them.
    pub fn class(&self) -> PodClass {
        match self.gpus {
            0 => PodClass::CpuOnly,
            1 if self.gpu_milli < WHOLE_GPU => PodClass::Shared,
            n => PodClass::Whole(n.min(15) as u8),
        }
    }
}

/// Coarse kind of a request: CPU-only, a shared GPU, or k whole GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodClass {
    /// No GPU.
    CpuOnly,
    /// A fraction of one GPU.
    Shared,
    /// k whole GPUs.
    Whole(u8),
}

impl PodClass {
    /// A bit identifying this class in a node's set of hosted classes.
    pub fn bit(self) -> u32 {
        match self {
            PodClass::CpuOnly => 1,
            PodClass::Shared => 1 << 1,
            PodClass::Whole(k) => 1 << (2 + u32::from(k)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fraction_of_several_gpus_is_rejected() {
        let err = Request::new(0, 0, 2, 500, 0, ModelSet::Any).expect_err("must fail");
        assert_eq!(err, RequestError::FractionOfSeveral(2));
    }

    #[test]
    fn a_share_above_one_gpu_is_rejected() {
        assert!(Request::new(0, 0, 1, 1001, 0, ModelSet::Any).is_err());
        assert!(Request::new(0, 0, 1, 0, 0, ModelSet::Any).is_err());
    }

    #[test]
    fn an_empty_model_mask_matches_nothing() {
        assert!(!ModelSet::Only(0).allows(Some(0)));
        assert!(ModelSet::Only(0b10).allows(Some(1)));
        assert!(ModelSet::Any.allows(None));
    }

    #[test]
    fn a_node_set_allows_nodes_tagged_with_one_of_its_bits() {
        assert!(NodeSet::Any.allows(0));
        assert!(NodeSet::Only(0b110).allows(0b010));
        assert!(!NodeSet::Only(0b110).allows(0b001));
        assert!(!NodeSet::Only(0).allows(u64::MAX));
    }

    #[test]
    fn a_model_name_matches_whole_words_of_the_reported_name() {
        assert!(model_matches("A100", "A100-80GB"));
        assert!(model_matches("a100", "NVIDIA A100-SXM4-80GB"));
        assert!(model_matches("H100", "H100"));
        assert!(model_matches("A100-80GB", "A100-80GB"));
        assert!(!model_matches("A10", "A100-80GB"));
        assert!(!model_matches("A100-40GB", "A100-80GB"));
        assert!(!model_matches("", "A100"));
    }
}
