//! The `gantry` command: clap arguments → validated settings → one function per subcommand.
mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "gantry", version, about = "Gantry: a GPU cluster manager")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve GPU metrics for Prometheus in dcgm-exporter's names and labels.
    Exporter(cmd::exporter::Args),
    /// Print GPU inventory, readings, health and findings once.
    Gpus(cmd::gpus::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Exporter(args) => cmd::exporter::run(args),
        Command::Gpus(args) => cmd::gpus::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
