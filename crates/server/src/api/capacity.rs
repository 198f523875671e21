//! Whether any registered node could ever hold a request: a job no node can hold would wait
//! forever, so submission refuses it with the reason in the units the user typed (cores, MiB,
//! GPUs) unless the caller asks to wait for capacity. A cluster without nodes refuses nothing
//! (the first agent may not have joined yet); a node reporting 0 CPU or memory is not limited there.

use std::collections::BTreeMap;

use gantry_api::pools;
use gantry_store::{Gpu, JobRequest, Node};

/// The nodes a job with `selector` may use (its pool, its label pairs); `Err(reason)` when
/// nodes are registered but none is selected.
pub fn selected(
    selector: &BTreeMap<String, String>,
    nodes: &[Node],
    gpus: &[Gpu],
) -> Result<Vec<Node>, String> {
    let chosen: Vec<Node> = nodes
        .iter()
        .filter(|n| {
            let mine: Vec<&gantry_store::GpuInfo> =
                gpus.iter().filter(|g| g.node_id == n.id).map(|g| &g.info).collect();
            pools::selects(selector, &pools::node_facts(&n.id, &n.labels, &mine))
        })
        .cloned()
        .collect();
    if chosen.is_empty() && !nodes.is_empty() {
        let pairs: Vec<String> =
            selector.iter().filter(|(k, _)| *k != pools::POOL).map(|(k, v)| format!("{k}={v}")).collect();
        let matching = if pairs.is_empty() { String::new() } else { format!(" with {}", pairs.join(", ")) };
        return Err(format!(
            "no registered node is in pool {}{matching} (`gantry pools` lists the pools); submit with \
             --wait-for-capacity (wait_for_capacity) to queue it for a node that may join",
            pools::pool_of(selector)
        ));
    }
    Ok(chosen)
}

/// `Err(reason)` when no node in `nodes` (with `gpus`) could hold `req` even when idle.
pub fn check(req: &JobRequest, nodes: &[Node], gpus: &[Gpu]) -> Result<(), String> {
    if nodes.is_empty() {
        return Ok(());
    }
    let sizes: Vec<Size> = nodes.iter().map(|n| Size::of(n, gpus)).collect();
    if sizes.iter().any(|s| s.holds(req)) {
        return Ok(());
    }
    let most = Size {
        cpu_milli: sizes.iter().map(|s| s.cpu_milli).max().unwrap_or(0),
        memory_mib: sizes.iter().map(|s| s.memory_mib).max().unwrap_or(0),
        gpus: sizes.iter().map(|s| s.gpus).max().unwrap_or(0),
        gpu_memory_mib: sizes.iter().map(|s| s.gpu_memory_mib).max().unwrap_or(0),
    };
    let mut short = Vec::new();
    if most.cpu_milli > 0 && req.cpu_milli > most.cpu_milli {
        short.push(format!(
            "{} CPU cores, the largest node has {}",
            cores(req.cpu_milli),
            cores(most.cpu_milli)
        ));
    }
    if most.memory_mib > 0 && req.memory_mib > most.memory_mib {
        short.push(format!("{} MiB of memory, the largest node has {} MiB", req.memory_mib, most.memory_mib));
    }
    if req.gpus > most.gpus {
        short.push(format!("{} GPUs, the most on one node is {}", req.gpus, most.gpus));
    }
    if req.gpu_memory_mib > most.gpu_memory_mib {
        short.push(format!(
            "a {} MiB GPU slice, the largest GPU has {} MiB",
            req.gpu_memory_mib, most.gpu_memory_mib
        ));
    }
    if short.is_empty() {
        short.push("each part fits some node, but no single node has all of it".into());
    }
    Err(format!(
        "no registered node could ever hold this job: it asks for {}; submit with --wait-for-capacity \
         (wait_for_capacity) to queue it for a node that may join",
        short.join("; ")
    ))
}

/// `Err(reason)` when an elastic job's maximum is more GPUs than any registered node has: it
/// runs on one node, so it could never reach that width. A cluster without nodes refuses nothing.
pub fn check_elastic(req: &JobRequest, nodes: &[Node], gpus: &[Gpu]) -> Result<(), String> {
    let Some(max) = req.gpus_max else { return Ok(()) };
    if nodes.is_empty() {
        return Ok(());
    }
    let most = nodes.iter().map(|n| Size::of(n, gpus).gpus).max().unwrap_or(0);
    if max <= most {
        return Ok(());
    }
    Err(format!(
        "an elastic job runs on one node and the most GPUs on one node is {most}, so it could never \
         use {max}: ask for at most {}..{most}, or submit with --wait-for-capacity (wait_for_capacity) \
         to queue it for a node that may join",
        req.gpus.min(most)
    ))
}

/// `Err(reason)` when `models` names GPU models no registered node has (none named: any). A
/// cluster without nodes refuses nothing.
pub fn check_models(models: &[String], nodes: &[Node], gpus: &[Gpu]) -> Result<(), String> {
    if models.is_empty() || nodes.is_empty() {
        return Ok(());
    }
    let have: std::collections::BTreeSet<&str> = gpus.iter().map(|g| g.info.model.as_str()).collect();
    if have.iter().any(|m| models.iter().any(|a| gantry_core::resources::model_matches(a, m))) {
        return Ok(());
    }
    let have: Vec<&str> = have.into_iter().collect();
    Err(format!(
        "no registered node has a GPU of model {} (models here: {}); submit with --wait-for-capacity \
         (wait_for_capacity) to queue it for a node that may join",
        models.join(" or "),
        if have.is_empty() { "none".to_owned() } else { have.join(", ") }
    ))
}

/// `Err(reason)` when the registered nodes, even all idle, hold fewer than `replicas` workers
/// of `req` (each worker must fit one node).
pub fn check_gang(req: &JobRequest, replicas: u32, nodes: &[Node], gpus: &[Gpu]) -> Result<(), String> {
    if nodes.is_empty() || replicas <= 1 {
        return Ok(());
    }
    check(req, nodes, gpus)?;
    let holds = |s: &Size| {
        let by_gpus = s.gpus.checked_div(req.gpus).unwrap_or(replicas);
        let by = |asked: u64, has: u64| if asked == 0 || has == 0 { replicas } else { (has / asked) as u32 };
        by_gpus.min(by(req.cpu_milli, s.cpu_milli)).min(by(req.memory_mib, s.memory_mib))
    };
    let workers: u64 = nodes.iter().map(|n| u64::from(holds(&Size::of(n, gpus)))).sum();
    if workers < u64::from(replicas) {
        return Err(format!(
            "no registered nodes could ever hold this gang: it asks for {replicas} workers of {} GPUs, \
             the nodes hold {workers} such workers when idle; submit with --wait-for-capacity \
             (wait_for_capacity) to queue it for nodes that may join",
            req.gpus
        ));
    }
    Ok(())
}

/// One node's capacity when idle.
#[derive(Debug, Clone, Copy)]
struct Size {
    cpu_milli: u64,
    memory_mib: u64,
    gpus: u32,
    gpu_memory_mib: u64,
}

impl Size {
    fn of(node: &Node, gpus: &[Gpu]) -> Self {
        let mine = gpus.iter().filter(|g| g.node_id == node.id);
        Self {
            cpu_milli: node.cpu_milli,
            memory_mib: node.memory_mib,
            gpus: gpus.iter().filter(|g| g.node_id == node.id).count() as u32,
            gpu_memory_mib: mine.map(|g| g.info.memory_mib).max().unwrap_or(0),
        }
    }

    fn holds(&self, req: &JobRequest) -> bool {
        let within = |asked: u64, has: u64| has == 0 || asked <= has;
        within(req.cpu_milli, self.cpu_milli)
            && within(req.memory_mib, self.memory_mib)
            && req.gpus <= self.gpus
            && req.gpu_memory_mib <= self.gpu_memory_mib
    }
}

/// Milli-cores as cores: `64`, `0.5`.
fn cores(milli: u64) -> String {
    if milli.is_multiple_of(1000) { (milli / 1000).to_string() } else { format!("{}", milli as f64 / 1000.0) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_store::{GpuHealth, GpuInfo, NodeState};

    fn node(id: &str, cores: u64, gpus: usize, mib: u64) -> (Node, Vec<Gpu>) {
        let node = Node {
            id: id.into(),
            hostname: id.into(),
            advertise_addr: None,
            network: Default::default(),
            job_defaults: None,
            labels: Default::default(),
            state: NodeState::Ready,
            scheduling: Default::default(),
            drain_at: None,
            epoch: 1,
            cpu_milli: cores * 1000,
            memory_mib: 65_536,
            last_heartbeat: 0,
        };
        let gpus = (0..gpus)
            .map(|i| Gpu {
                info: GpuInfo {
                    uuid: format!("GPU-{id}-{i}"),
                    index: i as u32,
                    model: "A100".into(),
                    memory_mib: mib,
                },
                node_id: id.into(),
                health: GpuHealth::Healthy,
                sample: None,
            })
            .collect();
        (node, gpus)
    }

    #[test]
    fn a_request_no_node_can_hold_is_refused_in_the_units_the_user_typed() {
        let (n, g) = node("a", 16, 4, 81_920);
        let req = JobRequest { cpu_milli: 64_000, gpu_memory_mib: 100_000, ..Default::default() };
        let err = check(&req, &[n], &g).expect_err("refused");
        assert!(err.contains("64 CPU cores, the largest node has 16"), "{err}");
        assert!(err.contains("100000 MiB GPU slice, the largest GPU has 81920 MiB"), "{err}");
    }

    #[test]
    fn parts_that_fit_different_nodes_but_not_one_are_refused() {
        let (a, mut g) = node("a", 64, 0, 0);
        let (b, gb) = node("b", 8, 8, 81_920);
        g.extend(gb);
        let req = JobRequest { cpu_milli: 32_000, gpus: 8, ..Default::default() };
        assert!(check(&req, &[a.clone(), b.clone()], &g).expect_err("refused").contains("no single node"));
        let fits = JobRequest { cpu_milli: 8_000, gpus: 8, ..Default::default() };
        assert_eq!(check(&fits, &[a, b], &g), Ok(()));
    }

    #[test]
    fn a_gang_larger_than_the_cluster_is_refused_and_one_that_fits_across_nodes_is_not() {
        let (a, mut g) = node("a", 16, 4, 81_920);
        let (b, gb) = node("b", 16, 4, 81_920);
        g.extend(gb);
        let req = JobRequest { gpus: 3, ..Default::default() };
        let err = check_gang(&req, 3, &[a.clone(), b.clone()], &g).expect_err("two workers of 3 fit");
        assert!(err.contains("3 workers of 3 GPUs") && err.contains("hold 2"), "{err}");
        let req = JobRequest { gpus: 2, ..Default::default() };
        assert_eq!(check_gang(&req, 4, &[a, b], &g), Ok(()));
    }

    #[test]
    fn a_cluster_without_nodes_refuses_nothing() {
        let req = JobRequest { gpus: 64, ..Default::default() };
        assert_eq!(check(&req, &[], &[]), Ok(()));
    }
}
