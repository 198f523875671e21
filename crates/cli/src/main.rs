//! The `gantry` command: clap arguments → validated settings → one function per subcommand.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Gantry: a GPU cluster manager.
#[derive(Debug, Parser)]
#[command(name = "gantry", version, about = "Gantry: a GPU cluster manager", propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Trace-driven simulations on the scheduling core.
    #[command(subcommand)]
    Sim(cmd::sim::SimCommand),
    /// Serve GPU metrics for Prometheus in dcgm-exporter's names and labels.
    Exporter(cmd::exporter::Args),
    /// List GPUs: this machine's with --backend (inventory, readings, health, findings), else the cluster's.
    Gpus(cmd::gpus::Args),
    /// Start a single-machine cluster: control plane + local agent on an embedded store.
    Up(cmd::up::UpArgs),
    /// Run the control plane alone (a head node without GPUs; agents join with `gantry agent`).
    Server(cmd::server::ServeArgs),
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
    /// Manage API tokens.
    #[command(subcommand)]
    Token(cmd::token::TokenCommand),
    /// Read the audit log of every change (admin); `audit verify` checks its hash chain.
    Audit(cmd::audit::AuditArgs),
    /// Control-plane benchmarks.
    #[command(subcommand)]
    Bench(cmd::bench_submit::BenchCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(c) => cmd::sim::run(c),
        Command::Exporter(args) => cmd::exporter::run(args),
        Command::Gpus(args) => cmd::gpus::run(args),
        Command::Up(a) => cmd::up::run(a),
        Command::Server(a) => cmd::server::run(a),
        Command::Agent(a) => cmd::agent::run(a),
        Command::Submit(a) => cmd::submit::run(a),
        Command::Jobs(a) => cmd::jobs::list(a),
        Command::Job(a) => cmd::jobs::show(a),
        Command::Logs(a) => cmd::logs::run(a),
        Command::Cancel(a) => cmd::cancel::run(a),
        Command::Nodes(a) => cmd::nodes::run(a),
        Command::Token(c) => cmd::token::run(c),
        Command::Audit(a) => cmd::audit::run(a),
        Command::Bench(c) => cmd::bench_submit::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
