//! `gantry teams` and `gantry team set`: each team's guarantee, limits and use, and changing
//! them without `curl` (operators set guarantees; admins the rest).

use clap::{Args, Subcommand};
use gantry_api::types::{QuotaRequest, TeamView};

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry teams`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry teams
  gantry teams -o json")]
pub struct TeamsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

/// `gantry team …`.
#[derive(Debug, Subcommand)]
pub enum TeamCommand {
    /// Change a team's guarantee (operator) or limits (admin); what is not named stays.
    Set(SetArgs),
    /// Set a team's idle policy (admin): warn, then requeue, cancel or lend jobs whose GPUs stay
    /// idle.
    Idle(IdleArgs),
}

/// Arguments of `gantry team idle`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry team idle vision --act-after 2h --warn-after 1h --below 1 --action requeue   # the defaults
  gantry team idle vision --act-after 30m --action cancel
  gantry team idle vision --act-after 10m --action lend   # preemptible jobs borrow the idle GPUs")]
pub struct IdleArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The team.
    name: String,
    /// The job kind.
    #[arg(long, default_value = "batch")]
    kind: String,
    /// Idle this long before the owner is warned (default: half of --act-after): `90s`, `1h`.
    #[arg(long, value_name = "DURATION", value_parser = super::submit::parse_time)]
    warn_after: Option<u64>,
    /// Idle this long before the action: `20s`, `2h`.
    #[arg(long, value_name = "DURATION", value_parser = super::submit::parse_time)]
    act_after: u64,
    /// A GPU below this utilisation (percent) is idle.
    #[arg(long, value_name = "PERCENT", default_value_t = 1.0)]
    below: f64,
    /// `requeue` (stopped and queued again, retries unspent), `cancel`, or `lend` (the job
    /// keeps its GPUs; preemptible jobs, priority below 0, run on them until it uses them again).
    #[arg(long, default_value = "requeue")]
    action: String,
}

/// Arguments of `gantry team set`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry team set vision --guarantee 8            # 8 GPUs whenever it asks; borrows beyond when idle
  gantry team set vision --max-priority 200 --pending-limit 5000
  gantry team set vision --guarantee none         # no guarantee
  gantry team set vision --preempt-other-teams true   # its priority may preempt other teams' jobs")]
pub struct SetArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The team.
    name: String,
    /// Whole GPUs guaranteed to the team (`none`: no guarantee).
    #[arg(long, value_name = "GPUS|none", value_parser = parse_guarantee)]
    guarantee: Option<Guarantee>,
    /// The highest priority its members may submit at (default 100).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    max_priority: Option<i32>,
    /// Jobs it may have pending, each array member counting (default 100,000).
    #[arg(long, value_name = "N")]
    pending_limit: Option<u64>,
    /// Most processes and threads each of its jobs may have (`pids.max`; `0`: each node's
    /// default, 4,096 unless the node says).
    #[arg(long, value_name = "N")]
    pids_limit: Option<u64>,
    /// Job output the server keeps for it, e.g. `50GiB` (default: the server's --log-quota).
    #[arg(long, value_name = "SIZE")]
    log_quota: Option<String>,
    /// Whether its jobs may preempt other teams' jobs by priority (default false: across teams,
    /// preemption only reclaims guarantees).
    #[arg(long, value_name = "BOOL")]
    preempt_other_teams: Option<bool>,
    /// Services it may have (default 20).
    #[arg(long, value_name = "N")]
    max_services: Option<u32>,
    /// Replicas its services may hold at once, pending or running (default 100).
    #[arg(long, value_name = "N")]
    max_replicas: Option<u32>,
    /// Command and environment its pending jobs may store, each array member counting, e.g.
    /// `512MiB` (default 64 MiB).
    #[arg(long, value_name = "SIZE")]
    pending_bytes: Option<String>,
}

/// `--guarantee N` or `--guarantee none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guarantee(Option<u32>);

fn parse_guarantee(text: &str) -> Result<Guarantee, String> {
    match text {
        "none" => Ok(Guarantee(None)),
        n => n
            .parse()
            .map(|n| Guarantee(Some(n)))
            .map_err(|_| format!("`{text}` is not a GPU count or `none`")),
    }
}

/// Lists teams.
pub fn list(args: TeamsArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let teams: Vec<TeamView> = block_on(api.get("/v1/teams"))??;
    if table::structured(args.output, &teams)? {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = teams
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.gpu_quota.map_or("-".into(), |g| g.to_string()),
                t.pending.to_string(),
                t.active.to_string(),
                t.max_priority.to_string(),
                if t.preempt_other_teams { "yes".into() } else { "no".into() },
                t.pending_limit.to_string(),
                format!("{}/{}", mib(t.log_bytes), mib(t.log_quota_bytes)),
                format!("{}/{}", t.max_services, t.max_replicas),
            ]
        })
        .collect();
    let header = [
        "TEAM",
        "GUARANTEE",
        "PENDING",
        "ACTIVE",
        "MAX PRIORITY",
        "PREEMPTS OTHERS",
        "PENDING LIMIT",
        "OUTPUT MIB",
        "MAX SERVICES/REPLICAS",
    ];
    table::print(&header, &rows);
    Ok(())
}

fn mib(bytes: u64) -> String {
    (bytes >> 20).to_string()
}

/// Runs `gantry team …`.
pub fn run(command: TeamCommand) -> anyhow::Result<()> {
    match command {
        TeamCommand::Set(args) => set(args),
        TeamCommand::Idle(args) => idle(args),
    }
}

fn idle(args: IdleArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let body = gantry_api::idle::IdlePolicyRequest {
        kind: args.kind,
        warn_after_s: args.warn_after.unwrap_or(args.act_after / 2),
        act_after_s: args.act_after,
        below_percent: args.below,
        action: args.action,
    };
    block_on(api.put(&format!("/v1/teams/{}/idle", args.name), &body))??;
    println!(
        "team {}: {} jobs idle below {}% are warned after {}s and {} after {}s",
        args.name, body.kind, body.below_percent, body.warn_after_s, body.action, body.act_after_s
    );
    Ok(())
}

fn set(args: SetArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let nothing = args.guarantee.is_none()
        && args.max_priority.is_none()
        && args.pending_limit.is_none()
        && args.pids_limit.is_none()
        && args.log_quota.is_none()
        && args.preempt_other_teams.is_none()
        && args.max_services.is_none()
        && args.max_replicas.is_none()
        && args.pending_bytes.is_none();
    if nothing {
        anyhow::bail!(
            "nothing to set: name --guarantee, --max-priority, --pending-limit, --pids-limit, --log-quota, --preempt-other-teams, --max-services, --max-replicas or --pending-bytes"
        );
    }
    // The API's PUT replaces the guarantee: keep the current one unless --guarantee names one.
    let gpu_quota = match args.guarantee {
        Some(Guarantee(g)) => g,
        None => {
            let teams: Vec<TeamView> = block_on(api.get("/v1/teams"))??;
            teams.into_iter().find(|t| t.name == args.name).and_then(|t| t.gpu_quota)
        }
    };
    let log_quota_bytes = args.log_quota.as_deref().map(super::sandbox::parse_size).transpose()?;
    let body = QuotaRequest {
        gpu_quota,
        log_quota_bytes,
        pending_limit: args.pending_limit,
        pids_limit: args.pids_limit,
        max_priority: args.max_priority,
        preempt_other_teams: args.preempt_other_teams,
        max_services: args.max_services,
        max_replicas: args.max_replicas,
        pending_bytes_limit: args.pending_bytes.as_deref().map(super::sandbox::parse_size).transpose()?,
    };
    block_on(api.put(&format!("/v1/teams/{}", args.name), &body))??;
    eprintln!("team {} set", args.name);
    Ok(())
}
