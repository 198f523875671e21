//! `gantry submit`: queue a job and print its id.

use std::io::Read;

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::types::{SubmitRequest, SubmitResponse};

use super::client::{Api, ServerArgs, block_on};

/// Arguments of `gantry submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Whole GPUs.
    #[arg(long, default_value_t = 0, conflicts_with = "gpu_memory")]
    gpus: u32,
    /// A slice of one GPU with this much GPU memory, MiB.
    #[arg(long, value_name = "MIB")]
    gpu_memory: Option<u64>,
    /// Compute share of the slice, percent.
    #[arg(long, value_name = "PCT", requires = "gpu_memory")]
    gpu_compute: Option<u32>,
    /// CPU cores (fractions allowed).
    #[arg(long, value_name = "C")]
    cpu: Option<f64>,
    /// Host memory, MiB.
    #[arg(long, value_name = "MIB")]
    memory: Option<u64>,
    /// Team (default: the token's team).
    #[arg(long)]
    team: Option<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Display name.
    #[arg(long)]
    name: Option<String>,
    /// Placements lost to failures before the job fails.
    #[arg(long)]
    max_retries: Option<u32>,
    /// An environment variable for the job, `NAME=VALUE` (repeatable). Nothing else of this
    /// shell's environment reaches the job.
    #[arg(long = "env", short = 'e', value_name = "NAME=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// The command to run.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Submits and prints the id.
pub fn run(args: SubmitArgs) -> anyhow::Result<()> {
    let cpu_milli = match args.cpu {
        Some(c) if !(0.0..=4096.0).contains(&c) => bail!("--cpu must be between 0 and 4096 cores"),
        Some(c) => (c * 1000.0).round() as u64,
        None => 0,
    };
    let body = SubmitRequest {
        command: args.command,
        gpus: args.gpus,
        gpu_memory_mib: args.gpu_memory.unwrap_or(0),
        gpu_compute_pct: args.gpu_compute.unwrap_or(0),
        cpu_milli,
        memory_mib: args.memory.unwrap_or(0),
        team: args.team,
        priority: args.priority,
        name: args.name,
        max_retries: args.max_retries,
        request_id: Some(request_id()?),
        env: args.env.into_iter().collect(),
    };
    let api = Api::connect(&args.server)?;
    let resp: SubmitResponse = block_on(async {
        // A retry after a dropped connection carries the same request id: still one job.
        match api.post("/v1/jobs", &body).await {
            Err(e) if e.to_string().contains("cannot reach") => Err(e),
            Err(_) => api.post("/v1/jobs", &body).await,
            ok => ok,
        }
    })??;
    println!("{}", resp.id);
    Ok(())
}

fn request_id() -> anyhow::Result<String> {
    let mut bytes = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not NAME=VALUE")),
    }
}
