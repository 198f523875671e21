//! `gantry users` and `gantry user set` (admin): who may do what, and in which teams.

use clap::{Args, Subcommand};
use gantry_api::types::UserRequest;
use gantry_store::{Role, User};

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry users`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry users
  gantry users -o json")]
pub struct UsersArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

/// `gantry user …`.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user or set its role and teams (admin); its tokens follow at once.
    Set(SetArgs),
}

/// Arguments of `gantry user set`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry user set alice --team vision --role member
  gantry user set alice --team vision --team nlp       # teams replace the user's list
  gantry user set victor --team vision --role viewer")]
pub struct SetArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The user.
    name: String,
    /// A team of the user (repeatable; the list replaces the user's teams).
    #[arg(long = "team", value_name = "TEAM")]
    teams: Vec<String>,
    /// `member` (default for a new user), `viewer`, `operator` or `admin`; default: unchanged.
    #[arg(long, value_name = "ROLE")]
    role: Option<String>,
}

/// Lists users.
pub fn list(args: UsersArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let users: Vec<User> = block_on(api.get("/v1/users"))??;
    if table::structured(args.output, &users)? {
        return Ok(());
    }
    let rows: Vec<Vec<String>> =
        users.iter().map(|u| vec![u.name.clone(), u.role.to_string(), u.teams.join(",")]).collect();
    table::print(&["USER", "ROLE", "TEAMS"], &rows);
    Ok(())
}

/// Runs `gantry user …`.
pub fn run(command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Set(args) => set(args),
    }
}

fn set(args: SetArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let current: Vec<User> = block_on(api.get("/v1/users"))??;
    let existing = current.into_iter().find(|u| u.name == args.name);
    let role = match (&args.role, &existing) {
        (Some(r), _) => Role::parse(r).ok_or_else(|| {
            anyhow::anyhow!("--role: `{r}` is not a role (member, viewer, operator or admin)")
        })?,
        (None, Some(u)) => u.role,
        (None, None) => Role::Member,
    };
    let teams = match (args.teams.is_empty(), existing) {
        (true, Some(u)) => u.teams,
        _ => args.teams,
    };
    block_on(api.put(&format!("/v1/users/{}", args.name), &UserRequest { role, teams }))??;
    eprintln!("user {} set", args.name);
    Ok(())
}
