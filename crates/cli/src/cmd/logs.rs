//! `gantry logs <id> [--follow]`: the job's stdout on stdout and stderr on stderr. With
//! `--follow` the command exits with the job's exit status once it ends (see [`super::watch`]).
//!
//! Offsets are positions in the whole stream, which log rotation does not change; when output
//! was rotated away before it was read, the server answers from the oldest output it still has
//! and says where that is, and this prints how much was skipped, on stderr.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use gantry_api::job_logs::OFFSET_HEADER;
use gantry_store::Job;

use super::client::{Api, ServerArgs, block_on};
use super::watch::{self, Announcer};

/// Arguments of `gantry logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Job id.
    id: i64,
    /// Keep printing new output until the job ends, then exit with the job's exit status
    /// (`gantry logs -f 12 && echo ok`).
    #[arg(short, long)]
    follow: bool,
}

/// Prints (and follows) a job's output.
pub fn run(args: LogsArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    if !args.follow {
        return block_on(print_once(api, args.id))?;
    }
    let job = block_on(follow(&api, args.id, &mut Announcer::new(true)))??;
    watch::result_of(&job)
}

async fn print_once(api: Api, id: i64) -> anyhow::Result<()> {
    let (mut out_at, mut err_at) = (0u64, 0u64);
    while copy(&api, id, "stdout", &mut out_at, &mut std::io::stdout()).await? {}
    while copy(&api, id, "stderr", &mut err_at, &mut std::io::stderr()).await? {}
    Ok(())
}

/// Prints the job's output as it comes until the job ends; returns the job as it ended.
pub async fn follow(api: &Api, id: i64, announce: &mut Announcer) -> anyhow::Result<Job> {
    let (mut out_at, mut err_at) = (0u64, 0u64);
    loop {
        // Read the state first: output written before the job ended is then already on disk.
        let job = watch::job(api, id).await?;
        announce.saw(&job);
        let got_out = copy(api, id, "stdout", &mut out_at, &mut std::io::stdout()).await?;
        let got_err = copy(api, id, "stderr", &mut err_at, &mut std::io::stderr()).await?;
        if job.state.is_terminal() && !got_out && !got_err {
            return Ok(job);
        }
        if !got_out && !got_err {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

async fn copy(api: &Api, id: i64, stream: &str, at: &mut u64, to: &mut dyn Write) -> anyhow::Result<bool> {
    let path = format!("/v1/jobs/{id}/logs?stream={stream}&offset={at}");
    let (offset, chunk) = api.get_bytes_and_header(&path, OFFSET_HEADER).await?;
    if let Some(offset) = offset.and_then(|o| o.parse::<u64>().ok())
        && offset > *at
    {
        eprintln!("[gantry: {} bytes of {stream} were rotated away by the job's log limit]", offset - *at);
        *at = offset;
    }
    to.write_all(&chunk)?;
    to.flush()?;
    *at += chunk.len() as u64;
    Ok(!chunk.is_empty())
}
