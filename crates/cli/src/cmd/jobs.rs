//! `gantry jobs` and `gantry job <id>`.

use clap::Args;
use gantry_api::types::JobDetail;
use gantry_store::Job;

use super::client::{Api, Output, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Output,
    /// Only jobs in this state.
    #[arg(long)]
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
    match args.output {
        Output::Json => table::json(&jobs),
        Output::Table => {
            let rows: Vec<Vec<String>> = jobs.iter().map(row).collect();
            table::print(&["ID", "STATE", "TEAM", "NAME", "ASKED", "GPUS", "REASON"], &rows);
            Ok(())
        }
    }
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

fn row(j: &Job) -> Vec<String> {
    vec![
        j.id.to_string(),
        j.state.to_string(),
        j.team.clone(),
        j.name.clone(),
        asked(j),
        if j.state.is_active() { j.gpu_uuids.join(",") } else { String::new() },
        j.reason.clone().unwrap_or_default(),
    ]
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
    println!("job {}  {}  ({})", j.id, j.state, j.name);
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
    for t in &detail.transitions {
        let from = t.from.map_or("-".to_owned(), |f| f.to_string());
        let after = (t.at - j.submitted_at) as f64 / 1000.0;
        println!("  +{after:>8.3}s  {from} -> {}  {}", t.to, t.reason.as_deref().unwrap_or(""));
    }
    Ok(())
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
