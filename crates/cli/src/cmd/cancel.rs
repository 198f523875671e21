//! `gantry cancel <id>`.

use clap::Args;
use gantry_store::Job;

use super::client::{Api, ServerArgs, block_on};

/// Arguments of `gantry cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Job id.
    id: i64,
}

/// Cancels a job.
pub fn run(args: CancelArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let job: Job = block_on(api.post(&format!("/v1/jobs/{}/cancel", args.id), &serde_json::Map::new()))??;
    if job.state.is_terminal() {
        println!("job {} {}", job.id, job.state);
    } else {
        println!("job {} cancelling (`gantry jobs` shows it so until its process is gone)", job.id);
    }
    Ok(())
}
