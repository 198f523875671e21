//! `gantry audit [--since] [-o json]` and `gantry audit verify`.

use anyhow::bail;
use clap::{Args, Subcommand};
use gantry_api::types::AuditVerification;
use gantry_store::AuditRecord;

use super::client::{Api, Output, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: Option<AuditCommand>,
    #[command(flatten)]
    server: ServerArgs,
    /// Only rows from this far back, e.g. `24h`, `7d` (default: all).
    #[arg(long)]
    since: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Output,
}

/// Audit subcommands.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the hash chain: exits 1 if any row was edited, removed or reordered.
    Verify(VerifyArgs),
}

/// Arguments of `gantry audit verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Output,
}

/// Rows per request.
const PAGE: usize = 5000;

/// Runs `gantry audit`.
pub fn run(args: AuditArgs) -> anyhow::Result<()> {
    if let Some(AuditCommand::Verify(v)) = args.command {
        return verify(v);
    }
    let since = match args.since.as_deref() {
        Some(text) => Some(gantry_server::now_ms() - 1000 * i64::try_from(super::token::parse_ttl(text)?)?),
        None => None,
    };
    let api = Api::connect(&args.server)?;
    let rows = block_on(all_rows(&api, since))??;
    if args.output == Output::Json {
        return table::json(&rows);
    }
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                table::when(r.at),
                r.actor.clone(),
                r.role.clone(),
                r.team.clone().unwrap_or_else(|| "-".into()),
                r.action.clone(),
                r.target.clone(),
                if r.count > 1 {
                    format!("{} (×{} that minute)", r.outcome, r.count)
                } else {
                    r.outcome.clone()
                },
                r.peer.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    table::print(&["ID", "TIME", "ACTOR", "ROLE", "TEAM", "ACTION", "TARGET", "OUTCOME", "PEER"], &lines);
    Ok(())
}

async fn all_rows(api: &Api, since: Option<i64>) -> anyhow::Result<Vec<AuditRecord>> {
    let mut all: Vec<AuditRecord> = Vec::new();
    loop {
        let after = all.last().map_or(0, |r| r.id);
        let mut path = format!("/v1/audit?after={after}&limit={PAGE}");
        if let Some(since) = since {
            path.push_str(&format!("&since={since}"));
        }
        let page: Vec<AuditRecord> = api.get(&path).await?;
        let done = page.len() < PAGE;
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
}

fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let result: AuditVerification = block_on(api.get("/v1/audit/verify"))??;
    if args.output == Output::Json {
        table::json(&result)?;
    }
    match (&result.error, args.output) {
        (None, Output::Table) => {
            println!("audit log intact: {} rows, head {} {}", result.rows, result.head_id, result.head_hash);
        }
        (None, Output::Json) => {}
        (Some(error), _) => bail!("audit log broken: {error} ({} rows read)", result.rows),
    }
    Ok(())
}
