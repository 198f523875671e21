//! `gantry nodes`.

use clap::Args;
use gantry_store::Node;

use super::client::{Api, Output, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry nodes`.
#[derive(Debug, Args)]
pub struct NodesArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Output,
}

/// Lists nodes.
pub fn run(args: NodesArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let nodes: Vec<Node> = block_on(api.get("/v1/nodes"))??;
    if args.output == Output::Json {
        return table::json(&nodes);
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                n.id.clone(),
                n.hostname.clone(),
                n.state.to_string(),
                n.epoch.to_string(),
                format!("{}", n.cpu_milli / 1000),
                format!("{}", n.memory_mib),
            ]
        })
        .collect();
    table::print(&["NODE", "HOST", "STATE", "EPOCH", "CPUS", "MEMORY_MIB"], &rows);
    Ok(())
}
