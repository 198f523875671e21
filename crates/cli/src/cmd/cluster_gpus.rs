//! The cluster view of `gantry gpus` (without `--backend`): every node's GPUs as the server knows
//! them, with health, latest utilisation and the jobs holding them.

use gantry_api::types::GpuView;

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// Prints the cluster's GPUs.
pub fn run(server: &ServerArgs, json: bool) -> anyhow::Result<()> {
    let api = Api::connect(server)?;
    let gpus: Vec<GpuView> = block_on(api.get("/v1/gpus"))??;
    if json {
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
