//! `gantry logs <id> [--follow | --attempt N | --previous] [--tail N] [--since D] [--timestamps]`:
//! the job's stdout on stdout
//! and stderr on stderr, of its latest attempt or an earlier one. With `--follow` the command
//! exits with the job's exit status once it ends (see [`super::watch`]). A gang's output is every
//! worker's, each line prefixed `[rank N] ` (`--rank N`: that worker's alone, unprefixed).
//!
//! Offsets are positions in the whole stream, which log rotation does not change; when output
//! was rotated away before it was read, the server answers from the oldest output it still has
//! and says where that is, and this prints how much was skipped, on stderr. `--since` and
//! `--timestamps` read when each line was written ([`super::log_times`]).

use std::io::Write;
use std::time::Duration;

use clap::Args;
use gantry_api::job_logs::OFFSET_HEADER;
use gantry_store::Job;

use super::client::{Api, ServerArgs, block_on};
use super::log_times::{self, Dating};
use super::watch::{self, Announcer};

/// Arguments of `gantry logs`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry logs 12                 # the latest attempt's output
  gantry logs -f 12 && echo ok   # follow; exits with the job's exit status
  gantry logs 12 --previous      # the attempt before the latest (after a requeue)
  gantry logs 12 --attempt 1     # a given attempt (`gantry job 12` lists them)
  gantry logs 12_3               # member 3 of array 12
  gantry logs 12 --tail 20       # the last 20 lines of each stream
  gantry logs 12 --since 10m --timestamps   # what it wrote in the last 10 minutes, each line dated
  gantry logs 14                 # a gang: every rank's lines, prefixed [rank N]; --rank 2 for one")]
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
    /// Only the last N lines of each stream (`kubectl logs --tail`).
    #[arg(long, value_name = "N", conflicts_with = "follow")]
    tail: Option<usize>,
    /// For a gang, only the output of the worker of this rank (`gantry job ID` lists them).
    #[arg(long, value_name = "N")]
    rank: Option<u32>,
    /// Only output written in the last DURATION: `90s`, `10m`, `2h` (`kubectl logs --since`).
    #[arg(long, value_name = "DURATION", value_parser = super::submit::parse_time)]
    since: Option<u64>,
    /// Prefix each line with when it was written, RFC 3339 in UTC (`kubectl logs --timestamps`;
    /// to 100 ms, and for a remote node's job the time its output reached the server).
    #[arg(long)]
    timestamps: bool,
}

/// Prints (and follows) a job's output.
pub fn run(args: LogsArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let dating = Dating { timestamps: args.timestamps, since_ms: args.since.map(super::jobs::since_ms) };
    let mut id = block_on(super::jobs::resolve(&api, &args.id))??;
    let workers = block_on(gang_workers(&api, id))??;
    match (args.rank, workers.is_empty()) {
        (Some(_), true) => anyhow::bail!("job {id} is not a gang: --rank names one of a gang's workers"),
        (Some(rank), false) => {
            id = workers.iter().find(|(r, _)| *r == rank).map(|(_, w)| *w).ok_or_else(|| {
                anyhow::anyhow!("gang {id} has no rank {rank} (ranks 0 to {})", workers.len() - 1)
            })?;
        }
        (None, false) if !args.follow => {
            return block_on(print_ranks(&api, &workers, args.attempt, args.tail, dating))?;
        }
        (None, _) => {}
    }
    if !args.follow {
        return block_on(async {
            let attempt = match (args.attempt, args.previous) {
                (Some(n), _) => Some(n),
                (None, true) => Some(previous_attempt(&api, id).await?),
                (None, false) => None,
            };
            print_once(api, id, attempt, args.tail, dating).await
        })?;
    }
    let job = block_on(follow_with(&api, id, &mut Announcer::new(true), dating))??;
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

async fn print_once(
    api: Api,
    id: i64,
    attempt: Option<u32>,
    tail: Option<usize>,
    dating: Dating,
) -> anyhow::Result<()> {
    if dating.needed() {
        for (name, to) in
            [("stdout", &mut std::io::stdout() as &mut dyn Write), ("stderr", &mut std::io::stderr())]
        {
            to.write_all(&Stream { id, name, attempt }.dated(&api, tail, dating, "").await?)?;
            to.flush()?;
        }
        return Ok(());
    }
    let Some(n) = tail else {
        let (mut out_at, mut err_at) = (0u64, 0u64);
        let out = Stream { id, name: "stdout", attempt };
        let err = Stream { id, name: "stderr", attempt };
        while out.copy(&api, &mut out_at, &mut std::io::stdout()).await? {}
        while err.copy(&api, &mut err_at, &mut std::io::stderr()).await? {}
        return Ok(());
    };
    for (name, to) in
        [("stdout", &mut std::io::stdout() as &mut dyn Write), ("stderr", &mut std::io::stderr())]
    {
        let text = Stream { id, name, attempt }.read_all(&api).await?;
        to.write_all(last_lines(&text, n))?;
        to.flush()?;
    }
    Ok(())
}

/// A gang's workers as (rank, job id), by rank; empty for a job that is not a gang.
async fn gang_workers(api: &Api, id: i64) -> anyhow::Result<Vec<(u32, i64)>> {
    let detail: gantry_api::types::JobDetail = api.get(&format!("/v1/jobs/{id}")).await?;
    let mut workers: Vec<(u32, i64)> =
        detail.workers.iter().filter_map(|w| Some((w.gang.as_ref()?.rank?, w.id))).collect();
    workers.sort_unstable();
    Ok(workers)
}

/// Every worker's output, rank by rank, each line prefixed `[rank N] ` (stderr to stderr).
async fn print_ranks(
    api: &Api,
    workers: &[(u32, i64)],
    attempt: Option<u32>,
    tail: Option<usize>,
    dating: Dating,
) -> anyhow::Result<()> {
    for (rank, id) in workers {
        for (name, to) in
            [("stdout", &mut std::io::stdout() as &mut dyn Write), ("stderr", &mut std::io::stderr())]
        {
            let prefix = format!("[rank {rank}] ");
            to.write_all(&Stream { id: *id, name, attempt }.dated(api, tail, dating, &prefix).await?)?;
            to.flush()?;
        }
    }
    Ok(())
}

/// The last `n` lines of `text` (a last line without a newline counts).
fn last_lines(text: &[u8], n: usize) -> &[u8] {
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let start = body
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(n.saturating_sub(1))
        .map(|(i, _)| i + 1);
    if n == 0 {
        return &text[text.len()..];
    }
    &text[start.unwrap_or(0)..]
}

/// One stream of one attempt (`None`: the latest).
struct Stream {
    id: i64,
    name: &'static str,
    attempt: Option<u32>,
}

impl Stream {
    /// The whole stream, as much as is kept.
    async fn read_all(&self, api: &Api) -> anyhow::Result<Vec<u8>> {
        Ok(self.read_from(api, 0).await?.1)
    }

    /// The stream from position `start` on (or from the oldest output kept, if later): that
    /// position and the bytes.
    async fn read_from(&self, api: &Api, start: u64) -> anyhow::Result<(u64, Vec<u8>)> {
        let (mut at, mut all) = (start, Vec::new());
        let mut base = None;
        loop {
            let got = self.copy(api, &mut at, &mut all).await?;
            // `at` moved past output rotated away before the first byte: that is where it starts.
            base.get_or_insert(at - all.len() as u64);
            if !got {
                return Ok((base.unwrap_or(start), all));
            }
        }
    }

    /// The kept output as `--since`, `--tail`, `--timestamps` and a line `prefix` shape it.
    async fn dated(
        &self,
        api: &Api,
        tail: Option<usize>,
        dating: Dating,
        prefix: &str,
    ) -> anyhow::Result<Vec<u8>> {
        let records = if dating.needed() {
            log_times::fetch(api, self.id, self.name, self.attempt, 0).await?
        } else {
            Vec::new()
        };
        let start = match dating.since_ms {
            Some(since) => match log_times::start(&records, since) {
                Some(at) => at,
                None => return Ok(Vec::new()),
            },
            None => 0,
        };
        let (base, text) = self.read_from(api, start).await?;
        let kept = tail.map_or(&text[..], |n| last_lines(&text, n));
        let base = base + (text.len() - kept.len()) as u64;
        Ok(log_times::render(kept, base, &records, dating.timestamps, prefix))
    }

    async fn copy(&self, api: &Api, at: &mut u64, to: &mut dyn Write) -> anyhow::Result<bool> {
        let attempt = self.attempt.map(|a| format!("&attempt={a}")).unwrap_or_default();
        let path = format!("/v1/jobs/{}/logs?stream={}&offset={at}{attempt}", self.id, self.name);
        copy_from(api, &path, self.name, at, to).await
    }
}

/// Prints the job's output as it comes until the job ends; returns the job as it ended. When
/// the job is requeued, the new attempt's output follows from its start.
pub async fn follow(api: &Api, id: i64, announce: &mut Announcer) -> anyhow::Result<Job> {
    follow_with(api, id, announce, Dating::default()).await
}

/// [`follow`], with `--since` and `--timestamps`.
async fn follow_with(api: &Api, id: i64, announce: &mut Announcer, dating: Dating) -> anyhow::Result<Job> {
    let (mut out_at, mut err_at) = (0u64, 0u64);
    let mut following = None;
    loop {
        // Read the state first: output written before the job ended is then already on disk.
        let job = watch::job(api, id).await?;
        announce.saw(&job);
        let attempt = Some(job.attempt).filter(|a| *a > 0);
        if attempt.is_none() {
            // Not placed yet, so there is no output. Reading "the latest attempt" now could read
            // attempt 1 begun since the state was read, and read it again once it is named.
            if job.state.is_terminal() {
                return Ok(job);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let (out, err) = (Stream { id, name: "stdout", attempt }, Stream { id, name: "stderr", attempt });
        if attempt != following {
            (following, out_at, err_at) = (attempt, 0, 0);
            if let Some(since) = dating.since_ms {
                out_at = out.since(api, since).await?;
                err_at = err.since(api, since).await?;
            }
        }
        let ended = job.state.is_terminal();
        let got_out = out.follow_step(api, &mut out_at, &mut std::io::stdout(), dating, ended).await?;
        let got_err = err.follow_step(api, &mut err_at, &mut std::io::stderr(), dating, ended).await?;
        if job.state.is_terminal() && !got_out && !got_err {
            return Ok(job);
        }
        if !got_out && !got_err {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

impl Stream {
    /// Where `--since` starts in this stream: the first output in the window, else its end.
    async fn since(&self, api: &Api, since_ms: i64) -> anyhow::Result<u64> {
        let records = log_times::fetch(api, self.id, self.name, self.attempt, 0).await?;
        match log_times::start(&records, since_ms) {
            Some(at) => Ok(at),
            // Nothing in the window yet: follow from the end (what is there now is older).
            None => Ok(self.read_from(api, 0).await.map(|(base, text)| base + text.len() as u64)?),
        }
    }

    /// One read of a follower, dated when `--timestamps` asks: then only whole lines are
    /// printed while the job runs (a line's date goes before it), the rest once it has ended.
    async fn follow_step(
        &self,
        api: &Api,
        at: &mut u64,
        to: &mut dyn Write,
        dating: Dating,
        ended: bool,
    ) -> anyhow::Result<bool> {
        if !dating.timestamps {
            return self.copy(api, at, to).await;
        }
        let mut chunk = Vec::new();
        if !self.copy(api, at, &mut chunk).await? {
            return Ok(false);
        }
        let base = *at - chunk.len() as u64;
        let whole =
            if ended { chunk.len() } else { chunk.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1) };
        // A partial line is read again next time, with whatever completes it.
        *at = base + whole as u64;
        if whole == 0 {
            return Ok(false);
        }
        let records = log_times::fetch(api, self.id, self.name, self.attempt, base).await?;
        to.write_all(&log_times::render(&chunk[..whole], base, &records, true, ""))?;
        to.flush()?;
        Ok(true)
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

#[cfg(test)]
mod tests {
    use super::last_lines;

    #[test]
    fn the_tail_is_the_last_lines_with_or_without_a_final_newline() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(last_lines(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(last_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(last_lines(b"a\nb\n", 0), b"");
        assert_eq!(last_lines(b"", 3), b"");
    }
}
