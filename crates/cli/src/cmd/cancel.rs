//! `gantry cancel <id>`: a job, or every member of an array (Slurm's `scancel`: the array's id
//! is all of it, `12_3` one member).

use clap::Args;
use gantry_api::types::JobDetail;
use gantry_store::Job;

use super::client::{Api, ServerArgs, block_on};

/// Arguments of `gantry cancel`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry cancel 12          # a job; if 12 is an array's id, every unfinished member
  gantry cancel 12_3        # only member 3 of array 12")]
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
    // A job that cannot be read is cancelled as one job: the server refuses it (and audits that).
    let whole_array = !args.id.contains('_')
        && block_on(api.get::<JobDetail>(&format!("/v1/jobs/{id}")))?
            .is_ok_and(|d| d.job.array.is_some_and(|a| a.id == id));
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
