//! The `gantry` command: thin clap front-end over Gantry's libraries.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Gantry: a GPU cluster manager.
#[derive(Debug, Parser)]
#[command(name = "gantry", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Trace-driven simulations on the scheduling core.
    #[command(subcommand)]
    Sim(cmd::sim::SimCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(c) => cmd::sim::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
