//! `gantry gpus`: with `--backend`, this machine's GPUs read through the GPU layer; otherwise
//! the cluster view from the server (health, latest sample, holders).

use clap::Args;
use gantry_agent::runner::{BackendChoice, Gpus};
use gantry_server::api::types::GpuView;

use super::client::{Api, Output, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry gpus`.
#[derive(Debug, Args)]
pub struct GpusArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Read this machine's GPUs instead: `nvml`, `simulated` or `auto`.
    #[arg(long)]
    backend: Option<String>,
    /// Simulated fleet for `--backend simulated|auto`.
    #[arg(long, default_value = "4xA100-80GB")]
    simulated_gpus: String,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Output,
}

/// Prints GPUs.
pub fn run(args: GpusArgs) -> anyhow::Result<()> {
    if let Some(backend) = &args.backend {
        return local(backend, &args.simulated_gpus, args.output);
    }
    let api = Api::connect(&args.server)?;
    let gpus: Vec<GpuView> = block_on(api.get("/v1/gpus"))??;
    if args.output == Output::Json {
        return table::json(&gpus);
    }
    let rows: Vec<Vec<String>> = gpus
        .iter()
        .map(|v| {
            let util = v
                .gpu
                .sample
                .as_ref()
                .and_then(|s| s.pointer("/sample/gpu_util_percent"))
                .and_then(serde_json::Value::as_f64)
                .map_or("-".into(), |u| format!("{u:.0}%"));
            let holders: Vec<String> = v.holders.iter().map(|h| h.job_id.to_string()).collect();
            vec![
                v.gpu.node_id.clone(),
                v.gpu.info.index.to_string(),
                v.gpu.info.uuid.clone(),
                v.gpu.info.model.clone(),
                v.gpu.info.memory_mib.to_string(),
                v.gpu.health.to_string(),
                util,
                holders.join(","),
            ]
        })
        .collect();
    table::print(&["NODE", "GPU", "UUID", "MODEL", "MEMORY_MIB", "HEALTH", "UTIL", "JOBS"], &rows);
    Ok(())
}

fn local(backend: &str, fleet: &str, output: Output) -> anyhow::Result<()> {
    let choice = match backend {
        "nvml" => BackendChoice::Nvml,
        "simulated" => BackendChoice::Simulated(fleet.to_owned()),
        "auto" => BackendChoice::Auto(fleet.to_owned()),
        other => anyhow::bail!("--backend must be nvml, simulated or auto, not {other}"),
    };
    let gpus = Gpus::open(&choice, 1)?;
    let (reports, _) = gpus.collect();
    if output == Output::Json {
        return table::json(&reports);
    }
    let inventory = gpus.inventory();
    let rows: Vec<Vec<String>> = inventory
        .iter()
        .zip(&reports)
        .map(|(g, r)| {
            vec![
                g.index.to_string(),
                g.uuid.clone(),
                g.model.clone(),
                g.memory_mib.to_string(),
                r.health.to_string(),
            ]
        })
        .collect();
    table::print(&["GPU", "UUID", "MODEL", "MEMORY_MIB", "HEALTH"], &rows);
    Ok(())
}
