//! `gantry logs <id> [--follow | --attempt N | --previous]`: the job's stdout on stdout and
//! stderr on stderr, of its latest attempt or an earlier one. With `--follow` the command exits
//! with the job's exit status once it ends (see [`super::watch`]).
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
#[command(after_help = "Examples:
  gantry logs 12                 # the latest attempt's output
  gantry logs -f 12 && echo ok   # follow; exits with the job's exit status
  gantry logs 12 --previous      # the attempt before the latest (after a requeue)
  gantry logs 12 --attempt 1     # a given attempt (`gantry job 12` lists them)
  gantry logs 12_3               # member 3 of array 12")]
pub struct LogsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Job id, or an array member as `ARRAY_INDEX` (`gantry logs 12_3`).
    id: String,
    /// Keep printing new output until the job ends, then exit with the job's exit status
    /// (`gantry logs -f 12 && echo ok`).
    #[arg(short, long, conflicts_with_all = ["attempt", "previous"])]
    follow: bool,
    /// Print the output of attempt N (`gantry job <id>` lists them): a job requeued after a
    /// node failure keeps each attempt's output (`gantry logs 12 --attempt 1`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    attempt: Option<u32>,
    /// Print the output of the attempt before the latest, as `kubectl logs --previous`.
    #[arg(short, long, conflicts_with = "attempt")]
    previous: bool,
}

/// Prints (and follows) a job's output.
pub fn run(args: LogsArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let id = block_on(super::jobs::resolve(&api, &args.id))??;
    if !args.follow {
        return block_on(async {
            let attempt = match (args.attempt, args.previous) {
                (Some(n), _) => Some(n),
                (None, true) => Some(previous_attempt(&api, id).await?),
                (None, false) => None,
            };
            print_once(api, id, attempt).await
        })?;
    }
    let job = block_on(follow(&api, id, &mut Announcer::new(true)))??;
    watch::result_of(&job)
}

/// The attempt before the job's latest; an error when there is none.
async fn previous_attempt(api: &Api, id: i64) -> anyhow::Result<u32> {
    let job = watch::job(api, id).await?;
    match job.attempt {
        0 => anyhow::bail!("job {id} has not run yet, so it has no previous attempt"),
        1 => anyhow::bail!("job {id} has run once (attempt 1), so it has no previous attempt"),
        n => Ok(n - 1),
    }
}

async fn print_once(api: Api, id: i64, attempt: Option<u32>) -> anyhow::Result<()> {
    let (mut out_at, mut err_at) = (0u64, 0u64);
    let out = Stream { id, name: "stdout", attempt };
    let err = Stream { id, name: "stderr", attempt };
    while out.copy(&api, &mut out_at, &mut std::io::stdout()).await? {}
    while err.copy(&api, &mut err_at, &mut std::io::stderr()).await? {}
    Ok(())
}

/// One stream of one attempt (`None`: the latest).
struct Stream {
    id: i64,
    name: &'static str,
    attempt: Option<u32>,
}

impl Stream {
    async fn copy(&self, api: &Api, at: &mut u64, to: &mut dyn Write) -> anyhow::Result<bool> {
        let attempt = self.attempt.map(|a| format!("&attempt={a}")).unwrap_or_default();
        let path = format!("/v1/jobs/{}/logs?stream={}&offset={at}{attempt}", self.id, self.name);
        copy_from(api, &path, self.name, at, to).await
    }
}

/// Prints the job's output as it comes until the job ends; returns the job as it ended. When
/// the job is requeued, the new attempt's output follows from its start.
pub async fn follow(api: &Api, id: i64, announce: &mut Announcer) -> anyhow::Result<Job> {
    let (mut out_at, mut err_at) = (0u64, 0u64);
    let mut following = None;
    loop {
        // Read the state first: output written before the job ended is then already on disk.
        let job = watch::job(api, id).await?;
        announce.saw(&job);
        let attempt = Some(job.attempt).filter(|a| *a > 0);
        if attempt != following {
            (following, out_at, err_at) = (attempt, 0, 0);
        }
        let (out, err) = (Stream { id, name: "stdout", attempt }, Stream { id, name: "stderr", attempt });
        let got_out = out.copy(api, &mut out_at, &mut std::io::stdout()).await?;
        let got_err = err.copy(api, &mut err_at, &mut std::io::stderr()).await?;
        if job.state.is_terminal() && !got_out && !got_err {
            return Ok(job);
        }
        if !got_out && !got_err {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

async fn copy_from(
    api: &Api,
    path: &str,
    stream: &str,
    at: &mut u64,
    to: &mut dyn Write,
) -> anyhow::Result<bool> {
    let (offset, chunk) = api.get_bytes_and_header(path, OFFSET_HEADER).await?;
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
