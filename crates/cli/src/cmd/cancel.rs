//! `gantry cancel <id>`: a job, or every member of an array (Slurm's `scancel`: the array's id
//! is all of it, `12_3` one member).

use clap::Args;
use gantry_api::types::JobDetail;
use gantry_store::Job;

use super::client::{Api, ServerArgs, block_on};

/// Arguments of `gantry cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Job id; an array's id cancels every unfinished member, `12_3` only index 3 of array 12.
    id: String,
}

/// Cancels a job, or an array.
pub fn run(args: CancelArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let id = block_on(super::jobs::resolve(&api, &args.id))??;
    let whole_array = !args.id.contains('_') && {
        let detail: JobDetail = block_on(api.get(&format!("/v1/jobs/{id}")))??;
        detail.job.array.is_some_and(|a| a.id == id)
    };
    if whole_array {
        let _: Job =
            block_on(api.post(&format!("/v1/jobs/{id}/cancel?array=true"), &serde_json::Map::new()))??;
        println!(
            "array {id} cancelled (running members stop: `gantry jobs --array {id}` shows them cancelling)"
        );
        return Ok(());
    }
    let job: Job = block_on(api.post(&format!("/v1/jobs/{id}/cancel"), &serde_json::Map::new()))??;
    if job.state.is_terminal() {
        println!("job {} {}", job.id, job.state);
    } else {
        println!("job {} cancelling (`gantry jobs` shows it so until its process is gone)", job.id);
    }
    Ok(())
}
