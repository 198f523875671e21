//! `gantry queue`: what is waiting and what is running, like `squeue`: only pending, scheduled
//! and running jobs, newest first, each waiting job with why it waits (the scheduler's last
//! word on it) and each running one with its node.

use clap::Args;
use gantry_store::Job;

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry queue`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry queue
  gantry queue --team vision -o json")]
pub struct QueueArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Only this team's jobs.
    #[arg(long)]
    team: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

/// Lists the active and waiting jobs.
pub fn run(args: QueueArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let team = args.team.as_ref().map(|t| format!("&team={t}")).unwrap_or_default();
    let mut jobs: Vec<Job> = Vec::new();
    for state in ["pending", "scheduled", "running"] {
        jobs.extend(block_on(super::jobs::all_pages(
            &api,
            &format!("/v1/jobs?state={state}&limit=1000{team}"),
        ))??);
    }
    jobs.sort_by(|a, b| b.submitted_at.cmp(&a.submitted_at).then(b.id.cmp(&a.id)));
    let values: Vec<serde_json::Value> = jobs.iter().map(super::jobs::with_times).collect();
    if table::structured(args.output, &values)? {
        return Ok(());
    }
    let now = gantry_server::now_ms();
    let rows: Vec<Vec<String>> = jobs.iter().map(|j| row(j, now)).collect();
    let header = ["ID", "NAME", "TEAM", "USER", "STATE", "PRIORITY", "ASKED", "TIME", "NODE (REASON)"];
    table::print(&header, &rows);
    Ok(())
}

fn row(j: &Job, now: i64) -> Vec<String> {
    let id = j.array.map_or_else(|| j.id.to_string(), |a| format!("{} ({}_{})", j.id, a.id, a.index));
    let (time, whereabouts) = match j.started_at {
        Some(start) if j.state.is_active() => {
            (table::span(now - start), j.node_id.clone().unwrap_or_else(|| "-".into()))
        }
        _ => (table::span(now - j.submitted_at), format!("({})", j.reason.as_deref().unwrap_or("queued"))),
    };
    vec![
        id,
        j.name.clone(),
        j.team.clone(),
        j.user.clone().unwrap_or_else(|| "-".into()),
        super::jobs::state(j),
        j.priority.to_string(),
        super::jobs::asked(j),
        time,
        whereabouts,
    ]
}
