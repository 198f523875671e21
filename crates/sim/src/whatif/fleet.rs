//! The fleet a replay runs on, and the changes `gantry whatif` asks about.
//!
//! A fleet is a list of nodes, each with a GPU count and one GPU model, as the cluster
//! registered them. Changes speak the operator's vocabulary: add `4x8xH100` (four nodes of eight
//! H100), remove named nodes or a shape (`8xV100`: one node of eight V100, `2x8xV100`: two), and
//! replace a model everywhere (`V100:H100`: the same nodes with other GPUs).

use std::fmt;

use gantry_core::resources::model_matches;

/// One node of a fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetNode {
    /// Its name (the agent's node id; `added-N` for nodes a change adds).
    pub name: String,
    /// GPUs on it.
    pub gpus: u32,
    /// Their model, as NVML names it (`H100`, or the full `NVIDIA H100 80GB HBM3`).
    pub model: String,
}

/// `COUNTxGPUSxMODEL`: `count` nodes of `gpus` GPUs of `model`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeShape {
    /// How many nodes.
    pub count: u32,
    /// GPUs per node.
    pub gpus: u32,
    /// GPU model.
    pub model: String,
}

impl NodeShape {
    /// Parses `4x8xH100` (four nodes) or `8xH100` (one node).
    pub fn parse(s: &str) -> Result<Self, FleetError> {
        let bad = || {
            FleetError(format!(
                "`{s}` is not a node shape; write NODESxGPUSxMODEL (4x8xH100) or GPUSxMODEL (8xH100)"
            ))
        };
        let parts: Vec<&str> = s.trim().splitn(3, 'x').collect();
        let num = |p: &str| p.parse::<u32>().ok();
        let (count, gpus, model) = match parts.as_slice() {
            [c, g, m] if num(c).is_some() && num(g).is_some() => (num(c), num(g), (*m).to_string()),
            [g, m] if num(g).is_some() => (Some(1), num(g), (*m).to_string()),
            [g, m1, m2] if num(g).is_some() => (Some(1), num(g), format!("{m1}x{m2}")),
            _ => return Err(bad()),
        };
        let (Some(count), Some(gpus)) = (count, gpus) else { return Err(bad()) };
        if count == 0 || count > 100_000 || gpus == 0 || gpus > 64 || model.trim().is_empty() {
            return Err(bad());
        }
        Ok(Self { count, gpus, model: model.trim().to_string() })
    }
}

impl fmt::Display for NodeShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.count, self.gpus, self.model)
    }
}

/// One change to a fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetChange {
    /// Add nodes of a shape.
    Add(NodeShape),
    /// Remove these nodes by name.
    RemoveNodes(Vec<String>),
    /// Remove nodes of a shape (the last registered first).
    RemoveShape(NodeShape),
    /// Give every GPU of model `from` the model `to`.
    Replace {
        /// The model replaced.
        from: String,
        /// Its replacement.
        to: String,
    },
}

impl FleetChange {
    /// `--remove` as written: a node shape, or a comma-separated list of node names.
    pub fn parse_remove(s: &str) -> Result<Self, FleetError> {
        match NodeShape::parse(s) {
            Ok(shape) => Ok(Self::RemoveShape(shape)),
            Err(_) => {
                let names: Vec<String> =
                    s.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect();
                if names.is_empty() {
                    return Err(FleetError(
                        "`--remove` names no node; write NODE,… or a shape such as 8xV100".into(),
                    ));
                }
                Ok(Self::RemoveNodes(names))
            }
        }
    }

    /// `--replace FROM:TO`.
    pub fn parse_replace(s: &str) -> Result<Self, FleetError> {
        match s.split_once(':') {
            Some((from, to)) if !from.trim().is_empty() && !to.trim().is_empty() => {
                Ok(Self::Replace { from: from.trim().to_string(), to: to.trim().to_string() })
            }
            _ => Err(FleetError(format!("`{s}` is not a replacement; write FROM:TO, e.g. V100:H100"))),
        }
    }
}

/// A change that cannot apply, in a sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FleetError(pub String);

/// A fleet, as registered or as changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fleet {
    /// Its nodes, in registration order.
    pub nodes: Vec<FleetNode>,
}

impl Fleet {
    /// Total GPUs.
    pub fn gpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.gpus).sum()
    }

    /// GPUs per model, sorted by model.
    pub fn gpus_by_model(&self) -> Vec<(String, u32)> {
        let mut out: Vec<(String, u32)> = Vec::new();
        for n in &self.nodes {
            match out.iter_mut().find(|(m, _)| *m == n.model) {
                Some((_, g)) => *g += n.gpus,
                None => out.push((n.model.clone(), n.gpus)),
            }
        }
        out.sort();
        out
    }

    /// The fleet after `changes`, in order; also the model replacements made (from, to).
    pub fn changed(&self, changes: &[FleetChange]) -> Result<(Fleet, Vec<(String, String)>), FleetError> {
        let mut fleet = self.clone();
        let mut replaced = Vec::new();
        let mut added = 0usize;
        for change in changes {
            match change {
                FleetChange::Add(shape) => {
                    for _ in 0..shape.count {
                        added += 1;
                        fleet.nodes.push(FleetNode {
                            name: format!("added-{added}"),
                            gpus: shape.gpus,
                            model: shape.model.clone(),
                        });
                    }
                }
                FleetChange::RemoveNodes(names) => {
                    for name in names {
                        let before = fleet.nodes.len();
                        fleet.nodes.retain(|n| n.name != *name);
                        if fleet.nodes.len() == before {
                            return Err(FleetError(format!("there is no node `{name}` to remove")));
                        }
                    }
                }
                FleetChange::RemoveShape(shape) => {
                    for _ in 0..shape.count {
                        let at = fleet
                            .nodes
                            .iter()
                            .rposition(|n| n.gpus == shape.gpus && model_matches(&shape.model, &n.model))
                            .ok_or_else(|| {
                                FleetError(format!(
                                    "the fleet has fewer than {} nodes of {}x{} to remove",
                                    shape.count, shape.gpus, shape.model
                                ))
                            })?;
                        fleet.nodes.remove(at);
                    }
                }
                FleetChange::Replace { from, to } => {
                    let mut any = false;
                    for n in &mut fleet.nodes {
                        if model_matches(from, &n.model) {
                            replaced.push((n.model.clone(), to.clone()));
                            n.model = to.clone();
                            any = true;
                        }
                    }
                    if !any {
                        return Err(FleetError(format!("no node has {from} GPUs to replace")));
                    }
                }
            }
        }
        replaced.sort();
        replaced.dedup();
        if fleet.nodes.is_empty() {
            return Err(FleetError("the changed fleet has no nodes left".into()));
        }
        Ok((fleet, replaced))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> Fleet {
        let node = |name: &str, gpus, model: &str| FleetNode { name: name.into(), gpus, model: model.into() };
        Fleet { nodes: vec![node("a", 8, "NVIDIA V100"), node("b", 8, "NVIDIA V100"), node("c", 4, "T4")] }
    }

    #[test]
    fn shapes_parse_with_and_without_a_node_count_and_bad_ones_say_how_to_write_them() {
        assert_eq!(
            NodeShape::parse("4x8xH100").expect("valid"),
            NodeShape { count: 4, gpus: 8, model: "H100".into() }
        );
        assert_eq!(
            NodeShape::parse("8xV100").expect("valid"),
            NodeShape { count: 1, gpus: 8, model: "V100".into() }
        );
        for bad in ["", "x8xH100", "4x0xH100", "4x8x", "H100", "8x"] {
            let e = NodeShape::parse(bad).expect_err("refused");
            assert!(e.0.contains("NODESxGPUSxMODEL"), "{bad}: {e}");
        }
    }

    #[test]
    fn changes_add_remove_and_replace_in_order() {
        let changes = [
            FleetChange::Add(NodeShape::parse("2x8xH100").expect("valid")),
            FleetChange::parse_remove("8xV100").expect("valid"),
            FleetChange::parse_remove("c").expect("valid"),
            FleetChange::parse_replace("V100:H100").expect("valid"),
        ];
        let (changed, replaced) = fleet().changed(&changes).expect("valid");
        let names: Vec<&str> = changed.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "added-1", "added-2"]);
        assert_eq!(changed.gpus_by_model(), vec![("H100".to_string(), 24)]);
        assert_eq!(replaced, vec![("NVIDIA V100".to_string(), "H100".to_string())]);
    }

    #[test]
    fn impossible_changes_are_refused_with_a_sentence() {
        let e = fleet().changed(&[FleetChange::parse_remove("nope").expect("valid")]).expect_err("refused");
        assert!(e.0.contains("no node `nope`"));
        let e =
            fleet().changed(&[FleetChange::parse_remove("3x8xV100").expect("valid")]).expect_err("refused");
        assert!(e.0.contains("fewer than 3 nodes"));
        let e =
            fleet().changed(&[FleetChange::parse_replace("A100:H100").expect("valid")]).expect_err("refused");
        assert!(e.0.contains("no node has A100"));
        assert!(FleetChange::parse_replace("V100").is_err());
    }
}
