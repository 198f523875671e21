//! `gantry logs <id> [--follow]`: the job's stdout on stdout and stderr on stderr.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use gantry_server::api::types::JobDetail;

use super::client::{Api, ServerArgs, block_on};

/// Arguments of `gantry logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Job id.
    id: i64,
    /// Keep printing new output until the job ends.
    #[arg(short, long)]
    follow: bool,
}

/// Prints (and follows) a job's output.
pub fn run(args: LogsArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    block_on(follow(api, args.id, args.follow))?
}

async fn follow(api: Api, id: i64, follow: bool) -> anyhow::Result<()> {
    let (mut out_at, mut err_at) = (0u64, 0u64);
    loop {
        // Read the state first: output written before the job ended is then already on disk.
        let done = !follow || api.get::<JobDetail>(&format!("/v1/jobs/{id}")).await?.job.state.is_terminal();
        let got_out = copy(&api, id, "stdout", &mut out_at, &mut std::io::stdout()).await?;
        let got_err = copy(&api, id, "stderr", &mut err_at, &mut std::io::stderr()).await?;
        if done && !got_out && !got_err {
            return Ok(());
        }
        if !got_out && !got_err {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

async fn copy(api: &Api, id: i64, stream: &str, at: &mut u64, to: &mut dyn Write) -> anyhow::Result<bool> {
    let chunk = api.get_bytes(&format!("/v1/jobs/{id}/logs?stream={stream}&offset={at}")).await?;
    to.write_all(&chunk)?;
    to.flush()?;
    *at += chunk.len() as u64;
    Ok(!chunk.is_empty())
}
