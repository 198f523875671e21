//! `gantry token create --team T`.

use clap::{Args, Subcommand};
use gantry_server::api::types::TokenResponse;

use super::client::{Api, ServerArgs, block_on};

/// Token subcommands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token (needs an admin token); prints the secret once.
    Create(CreateArgs),
}

/// Arguments of `gantry token create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Team the token acts for.
    #[arg(long)]
    team: Option<String>,
    /// `user`, `admin` or `agent`.
    #[arg(long, default_value = "user")]
    role: String,
    /// Label.
    #[arg(long)]
    name: Option<String>,
}

/// Runs a token subcommand.
pub fn run(command: TokenCommand) -> anyhow::Result<()> {
    let TokenCommand::Create(args) = command;
    let api = Api::connect(&args.server)?;
    let body = serde_json::json!({ "role": args.role, "team": args.team, "name": args.name });
    let resp: TokenResponse = block_on(api.post("/v1/tokens", &body))??;
    println!("{}", resp.token);
    Ok(())
}
