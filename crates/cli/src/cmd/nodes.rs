//! `gantry nodes`: like `sinfo`, each node's state and its GPUs: model, free, total, unhealthy;
//! `ADDRESS` is the address it advertises to its peers (`--advertise-addr`; `-`: its host name);
//! `NETWORK` is `cni` when each job runs in a network namespace of its own, `shared` when jobs
//! share the node's network (the agent is not root or has no CNI plugins).

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
                n.state.to_string(),
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
