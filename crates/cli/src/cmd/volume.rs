//! `gantry volume create|rm` and `gantry volumes`: a team's directories that outlive its jobs,
//! mounted with `--volume NAME:/mnt/x[:ro]`.

use clap::{Args, Subcommand};
use gantry_api::volumes::{Volume, VolumeRequest};

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// `gantry volume …`.
#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Create a volume of a team (operators and admins): node-local (`--node`, default the only
    /// node) or on a shared file system (`--path`, under a server `--volume-root`).
    Create(CreateArgs),
    /// Delete a volume's record (its files stay; refused while a job mounts it).
    Rm(RmArgs),
}

/// Arguments of `gantry volume create`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry volume create data --team vision --size 100G          # on the only node
  gantry volume create ckpt --team vision --path /shared/vision/ckpt
  gantry submit --volume data:/mnt/data --volume ckpt:/mnt/ckpt:ro -- python train.py")]
pub struct CreateArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The volume's name.
    name: String,
    /// Its team (default: your only team).
    #[arg(long)]
    team: Option<String>,
    /// Most it may hold, e.g. `100G` (a job mounting it writable is refused past it).
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// A directory of a shared file system, the same on every node (under a `--volume-root`).
    #[arg(long, value_name = "DIR", conflicts_with = "node")]
    path: Option<String>,
    /// The node it lives on (jobs that mount it run there).
    #[arg(long, value_name = "NODE")]
    node: Option<String>,
}

/// Arguments of `gantry volume rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The volume.
    name: String,
    /// Its team (default: your only team).
    #[arg(long)]
    team: Option<String>,
}

/// `gantry volumes`.
#[derive(Debug, Args)]
pub struct VolumesArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

/// Runs `gantry volume …`.
pub fn run(command: VolumeCommand) -> anyhow::Result<()> {
    match command {
        VolumeCommand::Create(a) => create(a),
        VolumeCommand::Rm(a) => rm(a),
    }
}

fn create(args: CreateArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let size_bytes = args.size.as_deref().map(super::sandbox::parse_size).transpose()?;
    let body =
        VolumeRequest { name: args.name, team: args.team, path: args.path, node: args.node, size_bytes };
    let v: Volume = block_on(api.post("/v1/volumes", &body))??;
    let place = match (&v.path, &v.node) {
        (Some(p), _) => format!("at {p}"),
        (None, Some(n)) => format!("on node {n}"),
        (None, None) => String::new(),
    };
    eprintln!("volume {} of team {} created {place}", v.name, v.team);
    Ok(())
}

fn rm(args: RmArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let path = format!("/v1/volumes/{}{}", args.name, super::service::query(args.team.as_deref()));
    block_on(api.delete(&path))??;
    eprintln!("volume {} deleted (its files stay)", args.name);
    Ok(())
}

/// Lists the volumes of your teams.
pub fn list(args: VolumesArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let volumes: Vec<Volume> = block_on(api.get("/v1/volumes"))??;
    if table::structured(args.output, &volumes)? {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = volumes
        .iter()
        .map(|v| {
            vec![
                v.team.clone(),
                v.name.clone(),
                v.path.clone().or_else(|| v.node.as_ref().map(|n| format!("node {n}"))).unwrap_or_default(),
                v.size_bytes.map_or("-".into(), |b| format!("{} MiB", b >> 20)),
            ]
        })
        .collect();
    table::print(&["TEAM", "VOLUME", "WHERE", "SIZE"], &rows);
    Ok(())
}
