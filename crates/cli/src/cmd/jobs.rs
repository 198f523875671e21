//! `gantry jobs` and `gantry job <id>`.

use clap::Args;
use clap::builder::PossibleValuesParser;
use gantry_api::types::JobDetail;
use gantry_store::{Job, JobState};

use super::client::{Api, Output, ServerArgs, block_on};
use super::table;

/// How `gantry jobs` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JobsOutput {
    /// Aligned columns, GPUs by short id.
    Table,
    /// Also the node, full GPU UUIDs and start time.
    Wide,
    /// JSON for programs (times also as RFC 3339: `submitted_rfc3339`, …).
    Json,
}

/// Arguments of `gantry jobs`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry jobs --state running -o wide
  gantry jobs -o json | jq '.[] | select(.state == \"failed\") | .id'")]
pub struct JobsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: JobsOutput,
    /// Only jobs in this state.
    #[arg(long, value_parser = PossibleValuesParser::new(JobState::ALL.iter().map(|s| s.as_str())))]
    state: Option<String>,
    /// Only this team's jobs.
    #[arg(long)]
    team: Option<String>,
    /// At most this many (up to 1000), newest first; without it every job, oldest first.
    #[arg(long)]
    limit: Option<u32>,
}

/// Jobs per request when listing them all.
const PAGE: u32 = 1000;

/// Lists jobs.
pub fn list(args: JobsArgs) -> anyhow::Result<()> {
    let mut query = Vec::new();
    if let Some(s) = &args.state {
        query.push(format!("state={s}"));
    }
    if let Some(t) = &args.team {
        query.push(format!("team={t}"));
    }
    query.push(format!("limit={}", args.limit.unwrap_or(PAGE)));
    let path = format!("/v1/jobs?{}", query.join("&"));
    let api = Api::connect(&args.server)?;
    let jobs = if args.limit.is_some() {
        block_on(api.get::<Vec<Job>>(&path))??
    } else {
        let mut all = block_on(all_pages(&api, &path))??;
        all.reverse();
        all
    };
    let now = now_ms();
    match args.output {
        JobsOutput::Json => table::json(&jobs.iter().map(with_times).collect::<Vec<_>>()),
        JobsOutput::Table => {
            let rows: Vec<Vec<String>> = jobs.iter().map(|j| row(j, now, false)).collect();
            table::print(
                &["ID", "NAME", "TEAM", "STATE", "ASKED", "GPUS", "AGE", "ELAPSED", "REASON"],
                &rows,
            );
            Ok(())
        }
        JobsOutput::Wide => {
            let rows: Vec<Vec<String>> = jobs.iter().map(|j| row(j, now, true)).collect();
            let header = [
                "ID", "NAME", "TEAM", "STATE", "ASKED", "GPUS", "AGE", "ELAPSED", "REASON", "NODE",
                "STARTED", "PRIORITY",
            ];
            table::print(&header, &rows);
            Ok(())
        }
    }
}

/// The job as the API gives it plus its times in RFC 3339 (the epoch-ms fields stay: scripts
/// read them).
fn with_times(j: &Job) -> serde_json::Value {
    let mut value = serde_json::to_value(j).expect("a job serializes");
    if let Some(map) = value.as_object_mut() {
        for (field, ms) in
            [("submitted", Some(j.submitted_at)), ("started", j.started_at), ("finished", j.finished_at)]
        {
            map.insert(format!("{field}_rfc3339"), ms.map(table::rfc3339).into());
        }
    }
    value
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Follows `x-next-before` until the last page; newest first.
async fn all_pages(api: &Api, path: &str) -> anyhow::Result<Vec<Job>> {
    let (mut all, mut next): (Vec<Job>, _) = api.get_page(path).await?;
    while let Some(before) = next {
        let (page, after): (Vec<Job>, _) = api.get_page(&format!("{path}&before={before}")).await?;
        all.extend(page);
        next = after;
    }
    Ok(all)
}

fn row(j: &Job, now: i64, wide: bool) -> Vec<String> {
    let gpus = if !j.state.is_active() {
        String::new()
    } else if wide {
        j.gpu_uuids.join(",")
    } else {
        j.gpu_uuids.iter().map(|u| short_gpu(u)).collect::<Vec<_>>().join(",")
    };
    let elapsed = j.started_at.map(|s| table::span(j.finished_at.unwrap_or(now) - s)).unwrap_or_default();
    let mut cells = vec![
        j.id.to_string(),
        j.name.clone(),
        j.team.clone(),
        state(j),
        asked(j),
        gpus,
        table::span(now - j.submitted_at),
        elapsed,
        j.reason.clone().unwrap_or_default(),
    ];
    if wide {
        cells.push(j.node_id.clone().unwrap_or_default());
        cells.push(j.started_at.map(table::when).unwrap_or_default());
        cells.push(j.priority.to_string());
    }
    cells
}

/// The state, `cancelling` for a running job whose cancel the agent has not yet confirmed.
pub fn state(j: &Job) -> String {
    match j.stop.as_deref() {
        Some("cancel") if j.state.is_active() => "cancelling".into(),
        _ => j.state.to_string(),
    }
}

/// `GPU-1a2b3c4d-…` as `1a2b3c4d`, enough to tell a node's GPUs apart.
fn short_gpu(uuid: &str) -> String {
    let id = uuid.strip_prefix("GPU-").unwrap_or(uuid);
    id.chars().take(8).collect()
}

fn asked(j: &Job) -> String {
    let r = &j.request;
    match (r.gpus, r.gpu_memory_mib) {
        (0, 0) => "cpu".into(),
        (0, mib) => format!("{mib} MiB slice"),
        (n, _) => format!("{n} GPU"),
    }
}

/// Arguments of `gantry job <id>`.
#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Job id.
    id: i64,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Output,
}

/// Shows one job and its history.
pub fn show(args: JobArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let detail: JobDetail = block_on(api.get(&format!("/v1/jobs/{}", args.id)))??;
    if args.output == Output::Json {
        return table::json(&detail);
    }
    let j = &detail.job;
    println!("job {}  {}  ({})", j.id, state(j), j.name);
    println!("team      {}  priority {}", j.team, j.priority);
    println!("command   {}", j.command.join(" "));
    println!("asked     {}", asked(j));
    println!(
        "attempt   {}  (runs lost to node or GPU failures are retried {} times)",
        j.attempt, j.max_retries
    );
    if let Some(node) = &j.node_id {
        println!("node      {node}  gpus {}", j.gpu_uuids.join(","));
    }
    if let Some(code) = j.exit_code {
        println!("exit      {code}");
    }
    if let Some(reason) = &j.reason {
        println!("reason    {reason}");
    }
    if detail.log_limit_bytes > 0 {
        println!(
            "logs      at most {} per stream kept (older output is rotated away)",
            size(detail.log_limit_bytes)
        );
    }
    print_attempts(&detail);
    for t in &detail.transitions {
        let from = t.from.map_or("-".to_owned(), |f| f.to_string());
        let after = (t.at - j.submitted_at) as f64 / 1000.0;
        let attempt = t.attempt.map_or("  ".to_owned(), |a| format!("#{a}"));
        println!("  +{after:>8.3}s  {attempt:<3} {from} -> {}  {}", t.to, t.reason.as_deref().unwrap_or(""));
    }
    Ok(())
}

/// One line per attempt: where it ran, when, and how it ended.
fn print_attempts(detail: &JobDetail) {
    if detail.attempts.is_empty() {
        return;
    }
    println!("attempts");
    for a in &detail.attempts {
        let started = a.started_at.map_or("-".to_owned(), table::rfc3339);
        let ended = a.finished_at.map_or("-".to_owned(), table::rfc3339);
        let exit = a.exit_code.map_or("-".to_owned(), |c| c.to_string());
        let outcome = match a.outcome {
            None => "running".to_owned(),
            Some(JobState::Pending) => "requeued".to_owned(),
            Some(state) => state.to_string(),
        };
        println!(
            "  #{:<3} node {}  started {started}  ended {ended}  exit {exit}  {outcome}",
            a.attempt, a.node_id
        );
        if let Some(reason) = &a.reason {
            println!("        {reason}");
        }
    }
    println!("events");
}

/// A byte count in the largest binary unit that divides it (`64 MiB`), else in bytes.
fn size(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}
