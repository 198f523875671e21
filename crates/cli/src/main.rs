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
    /// Start a single-machine cluster: control plane + local agent on an embedded store.
    Up(cmd::up::UpArgs),
    /// Run the node agent against a server.
    Agent(cmd::agent::AgentArgs),
    /// Queue a job; prints its id.
    Submit(cmd::submit::SubmitArgs),
    /// List jobs.
    Jobs(cmd::jobs::JobsArgs),
    /// Show one job and its history.
    Job(cmd::jobs::JobArgs),
    /// Print a job's output.
    Logs(cmd::logs::LogsArgs),
    /// Cancel a job.
    Cancel(cmd::cancel::CancelArgs),
    /// List nodes.
    Nodes(cmd::nodes::NodesArgs),
    /// List GPUs: the cluster's, or this machine's with --backend.
    Gpus(cmd::gpus::GpusArgs),
    /// Manage API tokens.
    #[command(subcommand)]
    Token(cmd::token::TokenCommand),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(c) => cmd::sim::run(c),
        Command::Up(a) => cmd::up::run(a),
        Command::Agent(a) => cmd::agent::run(a),
        Command::Submit(a) => cmd::submit::run(a),
        Command::Jobs(a) => cmd::jobs::list(a),
        Command::Job(a) => cmd::jobs::show(a),
        Command::Logs(a) => cmd::logs::run(a),
        Command::Cancel(a) => cmd::cancel::run(a),
        Command::Nodes(a) => cmd::nodes::run(a),
        Command::Gpus(a) => cmd::gpus::run(a),
        Command::Token(c) => cmd::token::run(c),
        Command::Bench(c) => cmd::bench::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
