//! `gantry pools` and `gantry pool set`: node pools with their nodes, GPUs, placement and teams,
//! and setting a pool's placement (`pack` or `spread`) and who may use it (admins). A node's
//! pool is its `pool` label (`gantry agent --label pool=inference`; none: `default`).

use clap::{Args, Subcommand};
use gantry_api::pools::{PoolPlacement, PoolRequest, PoolView};

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry pools`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry pools
  gantry pools -o json")]
pub struct PoolsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

/// `gantry pool …`.
#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Set a pool's placement and the teams that may use it (admins); what is not named stays.
    Set(SetArgs),
}

/// Arguments of `gantry pool set`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry pool set inference --placement spread            # least allocated node first
  gantry pool set inference --placement spread --teams serving,research
  gantry pool set default --placement pack --all-teams")]
pub struct SetArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The pool (a node's `pool` label).
    name: String,
    /// `pack` (fill partly used nodes first, fragmentation-aware; the default) or `spread`
    /// (the least allocated node, then its least used GPU).
    #[arg(long, value_name = "pack|spread", value_parser = parse_placement)]
    placement: Option<PoolPlacement>,
    /// Only these teams may place jobs in the pool. Example: `--teams a,b`.
    #[arg(long, value_name = "TEAMS", value_delimiter = ',', conflicts_with = "all_teams")]
    teams: Option<Vec<String>>,
    /// Every team may place jobs in the pool (the default).
    #[arg(long)]
    all_teams: bool,
}

fn parse_placement(text: &str) -> Result<PoolPlacement, String> {
    PoolPlacement::parse(text).ok_or_else(|| format!("`{text}` is not a placement: pack or spread"))
}

/// Lists pools.
pub fn list(args: PoolsArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let pools: Vec<PoolView> = block_on(api.get("/v1/pools"))??;
    if table::structured(args.output, &pools)? {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = pools
        .iter()
        .map(|p| {
            vec![
                p.pool.name.clone(),
                p.pool.placement.to_string(),
                p.nodes.len().to_string(),
                format!("{}/{}", p.gpus_free, p.gpus),
                if p.pool.teams.is_empty() { "all".into() } else { p.pool.teams.join(",") },
                if p.nodes.is_empty() { "-".into() } else { p.nodes.join(",") },
            ]
        })
        .collect();
    table::print(&["POOL", "PLACEMENT", "NODES", "GPUS FREE", "TEAMS", "NODE IDS"], &rows);
    Ok(())
}

/// Runs `gantry pool …`.
pub fn run(command: PoolCommand) -> anyhow::Result<()> {
    match command {
        PoolCommand::Set(args) => set(args),
    }
}

fn set(args: SetArgs) -> anyhow::Result<()> {
    if args.placement.is_none() && args.teams.is_none() && !args.all_teams {
        anyhow::bail!("nothing to set: name --placement, --teams or --all-teams");
    }
    let api = Api::connect(&args.server)?;
    // The PUT replaces the placement: keep the current one unless --placement names one.
    let placement = match args.placement {
        Some(p) => p,
        None => {
            let pools: Vec<PoolView> = block_on(api.get("/v1/pools"))??;
            pools.into_iter().find(|p| p.pool.name == args.name).map(|p| p.pool.placement).unwrap_or_default()
        }
    };
    let teams = if args.all_teams { Some(Vec::new()) } else { args.teams };
    let body = PoolRequest { placement, teams };
    block_on(api.put(&format!("/v1/pools/{}", args.name), &body))??;
    println!("pool {} places by {placement}", args.name);
    Ok(())
}
