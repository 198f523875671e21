//! `gantry usage --since 7d --by team|user [-o table|json|yaml|csv]`: GPU-hours allocated per
//! team or user, from the server's allocation history, and how many of them were used (NVML
//! utilisation samples from the agents' heartbeats) or wasted idle (members see their own teams).

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
    /// YAML.
    Yaml,
    /// CSV with a header.
    Csv,
}

/// Arguments of `gantry usage`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry usage --since 30d --by user -o csv > gpu-hours.csv
  gantry usage --since 24h      # WASTE: GPU-hours allocated while the GPUs were idle

USED is each allocated GPU's NVML utilisation times the time and share it was held, counted by
the hour (a period's edges round out to whole hours for USED); WASTE = GPU-HOURS - USED.
STALLED is the part of the GPU time lost waiting for input: the GPU idle while its job read
or saturated its CPU (counted by the hour like USED; see docs/data.md, \"Data stalls\").")]
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
        Format::Yaml => table::yaml(&rows),
        Format::Csv => {
            println!("team,user,gpu_hours,used_gpu_hours,waste_gpu_hours,jobs,stalled_gpu_hours");
            for r in &rows {
                println!(
                    "{},{},{:.4},{:.4},{:.4},{},{:.4}",
                    r.team,
                    r.user.as_deref().unwrap_or(""),
                    r.gpu_hours,
                    r.used_gpu_hours,
                    r.waste_gpu_hours,
                    r.jobs,
                    r.stalled_gpu_hours
                );
            }
            Ok(())
        }
        Format::Table => {
            let lines: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    let user = r.user.clone().unwrap_or_else(|| "-".into());
                    let pct = if r.gpu_hours > 0.0 { 100.0 * r.used_gpu_hours / r.gpu_hours } else { 0.0 };
                    vec![
                        r.team.clone(),
                        user,
                        format!("{:.2}", r.gpu_hours),
                        format!("{:.2}", r.used_gpu_hours),
                        format!("{:.2}", r.waste_gpu_hours),
                        format!("{:.2}", r.stalled_gpu_hours),
                        format!("{pct:.0}%"),
                        r.jobs.to_string(),
                    ]
                })
                .collect();
            table::print(&["TEAM", "USER", "GPU-HOURS", "USED", "WASTE", "STALLED", "USED%", "JOBS"], &lines);
            Ok(())
        }
    }
}
