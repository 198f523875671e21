//! `gantry usage --since 7d --by team|user [-o table|json|csv]`: GPU-hours allocated per team or
//! user, from the server's allocation history (members see their own teams).

use clap::{Args, ValueEnum};
use gantry_api::model::Usage;

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// How to group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    /// One row per team.
    Team,
    /// One row per team and user.
    User,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// JSON.
    Json,
    /// CSV with a header.
    Csv,
}

/// Arguments of `gantry usage`.
#[derive(Debug, Args)]
#[command(after_help = "Example: gantry usage --since 30d --by user -o csv > gpu-hours.csv")]
pub struct UsageArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// How far back, e.g. `24h`, `7d`, `30d`.
    #[arg(long, default_value = "7d")]
    since: String,
    /// Group by team or by user.
    #[arg(long, value_enum, default_value = "team")]
    by: By,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Format,
}

/// Runs `gantry usage`.
pub fn run(args: UsageArgs) -> anyhow::Result<()> {
    let back = super::token::parse_ttl(&args.since)
        .map_err(|e| anyhow::anyhow!(e.to_string().replace("--ttl", "--since")))?;
    let since = gantry_server::now_ms() - 1000 * i64::try_from(back)?;
    let by = if args.by == By::User { "user" } else { "team" };
    let api = Api::connect(&args.server)?;
    let rows: Vec<Usage> = block_on(api.get(&format!("/v1/usage?since={since}&by={by}")))??;
    match args.output {
        Format::Json => table::json(&rows),
        Format::Csv => {
            println!("team,user,gpu_hours,jobs");
            for r in &rows {
                println!("{},{},{:.4},{}", r.team, r.user.as_deref().unwrap_or(""), r.gpu_hours, r.jobs);
            }
            Ok(())
        }
        Format::Table => {
            let lines: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    let user = r.user.clone().unwrap_or_else(|| "-".into());
                    vec![r.team.clone(), user, format!("{:.2}", r.gpu_hours), r.jobs.to_string()]
                })
                .collect();
            table::print(&["TEAM", "USER", "GPU-HOURS", "JOBS"], &lines);
            Ok(())
        }
    }
}
