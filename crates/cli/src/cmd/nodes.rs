//! `gantry nodes`: like `sinfo`, each node's state and its GPUs: model, free, total, unhealthy;
//! `ADDRESS` is the address it advertises to its peers (`--advertise-addr`; `-`: its host name);
//! `NETWORK` is `cni` when each job runs in a network namespace of its own, `shared` when jobs
//! share the node's network (the agent is not root or has no CNI plugins). `STATE` adds
//! `cordoned` or `draining` to the liveness (`ready,cordoned`, as kubectl's
//! `Ready,SchedulingDisabled`). `gantry node cordon|uncordon|drain NODE` sets it.

use clap::Args;
use gantry_api::types::NodeView;

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry nodes`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry nodes
  gantry nodes -o yaml      # or json; last_heartbeat also as RFC 3339")]
pub struct NodesArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format (JSON and YAML add `last_heartbeat_rfc3339`).
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

/// Liveness, and whether the node takes new work when it does not.
fn state(n: &gantry_store::Node) -> String {
    match n.scheduling {
        gantry_store::NodeScheduling::Schedulable => n.state.to_string(),
        other => format!("{},{other}", n.state),
    }
}

/// Lists nodes.
pub fn run(args: NodesArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let nodes: Vec<NodeView> = block_on(api.get("/v1/nodes"))??;
    let mut values = serde_json::to_value(&nodes)?;
    if let Some(list) = values.as_array_mut() {
        list.iter_mut().for_each(|n| table::add_times(n, &["last_heartbeat"]));
    }
    if table::structured(args.output, &values)? {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|v| {
            let n = &v.node;
            vec![
                n.id.clone(),
                n.hostname.clone(),
                n.advertise_addr.clone().unwrap_or_else(|| "-".into()),
                state(n),
                n.network.to_string(),
                v.gpu_model.clone().unwrap_or_else(|| "-".into()),
                format!("{}/{}", v.gpus_free, v.gpus),
                v.gpus_unhealthy.to_string(),
                format!("{}", n.cpu_milli / 1000),
                format!("{}", n.memory_mib),
                n.epoch.to_string(),
            ]
        })
        .collect();
    let header = [
        "NODE",
        "HOST",
        "ADDRESS",
        "STATE",
        "NETWORK",
        "GPU MODEL",
        "GPUS FREE",
        "UNHEALTHY",
        "CPUS",
        "MEMORY_MIB",
        "EPOCH",
    ];
    table::print(&header, &rows);
    Ok(())
}

/// `gantry node …`: take a node out of scheduling and back (operators).
#[derive(Debug, clap::Subcommand)]
pub enum NodeCommand {
    /// No new work on NODE; its jobs run on (`kubectl cordon`).
    Cordon(NodeArgs),
    /// NODE takes new work again (ends a cordon or a drain).
    Uncordon(NodeArgs),
    /// No new work on NODE, and after --grace its running jobs are stopped and requeued
    /// elsewhere, their retries not spent (`kubectl drain`). Example: `node drain gpu-3 --grace 10m`.
    Drain(DrainArgs),
}

/// One node.
#[derive(Debug, Args)]
pub struct NodeArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The node's id (`gantry nodes`).
    node: String,
}

/// `gantry node drain`.
#[derive(Debug, Args)]
pub struct DrainArgs {
    #[command(flatten)]
    target: NodeArgs,
    /// How long running jobs keep running first (to checkpoint): `90s`, `10m`, `1h`; default
    /// at once.
    #[arg(long, value_name = "DURATION", value_parser = super::submit::parse_time)]
    grace: Option<u64>,
}

/// Cordons, uncordons or drains a node.
pub fn set(command: NodeCommand) -> anyhow::Result<()> {
    use gantry_store::NodeScheduling;
    let (target, scheduling, grace) = match command {
        NodeCommand::Cordon(a) => (a, NodeScheduling::Cordoned, None),
        NodeCommand::Uncordon(a) => (a, NodeScheduling::Schedulable, None),
        NodeCommand::Drain(d) => (d.target, NodeScheduling::Draining, Some(d.grace.unwrap_or(0))),
    };
    let api = Api::connect(&target.server)?;
    let body = gantry_api::types::NodeSchedulingRequest { scheduling, grace_s: grace };
    let path = format!("/v1/nodes/{}/scheduling", target.node);
    block_on(api.put(&path, &body))?.map_err(|e| in_words(e, &target.node))?;
    let said = match (scheduling, grace) {
        (NodeScheduling::Cordoned, _) => "cordoned: no new work; its jobs run on".to_owned(),
        (NodeScheduling::Schedulable, _) => "uncordoned: takes new work".to_owned(),
        (_, Some(0) | None) => {
            "draining: no new work; its running jobs are stopped and requeued now".to_owned()
        }
        (_, Some(s)) => format!(
            "draining: no new work; its running jobs are stopped and requeued in {}",
            table::span(i64::try_from(s * 1000).unwrap_or(i64::MAX))
        ),
    };
    println!("node {} {said}", target.node);
    Ok(())
}

/// The server's refusal, with the node named where it says only "not found".
fn in_words(e: anyhow::Error, node: &str) -> anyhow::Error {
    match e.downcast_ref::<super::client::ApiStatus>() {
        Some(s) if s.status == 404 => anyhow::anyhow!("there is no node {node} (`gantry nodes` lists them)"),
        _ => e,
    }
}
