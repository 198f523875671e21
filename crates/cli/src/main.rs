//! The `gantry` command: clap arguments → validated settings → one function per subcommand.

mod cmd;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

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
    /// Serve the kube-scheduler extender (filter, prioritize, bind) on the gantry policy.
    Extender(cmd::extender::Args),
    /// Serve the kubelet device plugin: gantry.dev/gpu and gantry.dev/gpu-memory, health from the GPU layer.
    DevicePlugin(cmd::device_plugin::Args),
    /// List GPUs: this machine's with --backend (inventory, readings, health, findings), else the cluster's.
    Gpus(cmd::gpus::Args),
    /// Start a single-machine cluster: control plane + local agent on an embedded store.
    Up(cmd::up::UpArgs),
    /// Run the control plane alone (a head node without GPUs; agents join with `gantry agent`).
    Server(cmd::server::ServeArgs),
    /// Run the node agent against a server.
    Agent(cmd::agent::AgentArgs),
    /// Queue a job (a command after `--`, or a batch script); prints its id.
    Submit(cmd::submit::SubmitArgs),
    /// Queue the job a YAML file declares (the fields of `submit`); applying it again is a no-op.
    Apply(cmd::apply::ApplyArgs),
    /// Run a job attached (as srun): submit, stream its output, exit with its exit status.
    Run(cmd::submit::RunArgs),
    /// List jobs.
    Jobs(cmd::jobs::JobsArgs),
    /// Show one job and its history.
    Job(cmd::jobs::JobArgs),
    /// Print a job's output.
    Logs(cmd::logs::LogsArgs),
    /// Cancel a job, or every member of an array (`cancel ARRAY_ID`; one member: `cancel 12_3`).
    Cancel(cmd::cancel::CancelArgs),
    /// List nodes.
    Nodes(cmd::nodes::NodesArgs),
    /// Cordon, uncordon or drain a node (`node drain gpu-3 --grace 10m`; operators).
    #[command(subcommand)]
    Node(cmd::nodes::NodeCommand),
    /// What happened, newest first: nodes, GPUs, jobs (`--job ID`, `--node N`, `--since 1h`, `-w`).
    Events(cmd::events::EventsArgs),
    /// Pending and running jobs only, with why each waits or where it runs (as squeue).
    Queue(cmd::queue::QueueArgs),
    /// Services: long-running replicas behind the gateway, autoscaled.
    Services(cmd::service::ServicesArgs),
    /// Apply, create, show or delete a service (`service apply -f svc.yaml`).
    #[command(subcommand)]
    Service(cmd::service::ServiceCommand),
    /// Node pools: nodes, GPUs, placement (pack or spread) and teams.
    Pools(cmd::pools::PoolsArgs),
    /// The nodes' dataset caches: declared inputs with size, last use and hits.
    Cache(cmd::data::CacheArgs),
    /// The container images the nodes hold: reference, digest, size, last use, in use.
    Images(cmd::data::ImagesArgs),
    /// Team secrets S3 inputs are read with (`secret set NAME KEY=VALUE…`).
    #[command(subcommand)]
    Secret(cmd::data::SecretCommand),
    /// Volumes of your teams: directories that outlive jobs (`--volume NAME:/mnt/x`).
    Volumes(cmd::volume::VolumesArgs),
    /// Create or delete a volume (`volume create data --team vision --size 100G`).
    #[command(subcommand)]
    Volume(cmd::volume::VolumeCommand),
    /// Set a node pool's placement or teams (`pool set inference --placement spread`; admins).
    #[command(subcommand)]
    Pool(cmd::pools::PoolCommand),
    /// Teams: guarantee, limits, queue and output kept.
    Teams(cmd::teams::TeamsArgs),
    /// Change a team's guarantee or limits (`team set vision --guarantee 8`).
    #[command(subcommand)]
    Team(cmd::teams::TeamCommand),
    /// Users, their roles and teams (admin).
    Users(cmd::users::UsersArgs),
    /// Create a user or set its role and teams (`user set alice --team vision --role member`).
    #[command(subcommand)]
    User(cmd::users::UserCommand),
    /// Print a one-time link that signs a browser in to the dashboard (no token in the URL).
    Dashboard(cmd::dashboard::DashboardArgs),
    /// Everything about one job or node, with its recent events (`describe job 12`).
    Describe(cmd::describe::DescribeArgs),
    /// The cluster live in the terminal: GPUs with utilisation, memory and history, their jobs,
    /// the queue (keys: s sort, t team, Enter/l a job's log, q quit).
    Top(cmd::top::TopArgs),
    /// The clusters this client knows (contexts) and which one is current.
    #[command(subcommand)]
    Config(cmd::config::ConfigCommand),
    /// Manage API tokens.
    #[command(subcommand)]
    Token(cmd::token::TokenCommand),
    /// The cluster CA: its fingerprint, and trusting it on this machine (for the dashboard).
    #[command(subcommand)]
    Ca(cmd::ca::CaCommand),
    /// Read the audit log of every change (admin); `audit verify` checks its hash chain.
    Audit(cmd::audit::AuditArgs),
    /// GPU-hours allocated, used and wasted (idle) per team or user over a period.
    Usage(cmd::usage::UsageArgs),
    /// Replay the cluster's history on a changed fleet: what would waits, completion times and cost be?
    Whatif(cmd::whatif::WhatifArgs),
    /// Print a shell completion script.
    Completions(cmd::completions::CompletionsArgs),
    /// Print the man page (roff): `gantry man > gantry.1`.
    Man,
    /// The store's database: `db migrate --from DATA_DIR --to postgres://…` moves a SQLite cluster.
    #[command(subcommand)]
    Db(cmd::db::DbCommand),
    /// Control-plane benchmarks.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
}

fn main() -> ExitCode {
    // A job's supervisor, started by the agent (not a user command: it reads the job on stdin).
    if std::env::args_os().nth(1).is_some_and(|a| a == gantry_agent::runner::shim::ARG) {
        return ExitCode::from(u8::try_from(gantry_agent::runner::shim::main()).unwrap_or(1));
    }
    let args = cmd::global_flags::hoist(std::env::args_os().collect(), Cli::command);
    let cli = Cli::try_parse_from(&args).unwrap_or_else(|e| exit_with_hint(e, &args));
    // Daemons (and `top`, which owns the terminal) keep SIGPIPE ignored; the rest print and exit.
    let serves = matches!(
        cli.command,
        Command::Exporter(_)
            | Command::Extender(_)
            | Command::DevicePlugin(_)
            | Command::Up(_)
            | Command::Server(_)
            | Command::Agent(_)
            | Command::Top(_)
    );
    if !serves {
        cmd::pipe::exit_quietly_on_closed_pipe();
    }
    let result = match cli.command {
        Command::Sim(c) => cmd::sim::run(c),
        Command::Exporter(args) => cmd::exporter::run(args),
        Command::Extender(args) => cmd::extender::run(args),
        Command::DevicePlugin(args) => cmd::device_plugin::run(args),
        Command::Gpus(args) => cmd::gpus::run(args),
        Command::Up(a) => cmd::up::run(a),
        Command::Server(a) => cmd::server::run(a),
        Command::Agent(a) => cmd::agent::run(a),
        Command::Submit(a) => cmd::submit::run(a),
        Command::Run(a) => cmd::submit::run_attached(a),
        Command::Apply(a) => cmd::apply::run(a),
        Command::Config(c) => cmd::config::run(c),
        Command::Jobs(a) => cmd::jobs::list(a),
        Command::Job(a) => cmd::jobs::show(a),
        Command::Logs(a) => cmd::logs::run(a),
        Command::Cancel(a) => cmd::cancel::run(a),
        Command::Nodes(a) => cmd::nodes::run(a),
        Command::Node(c) => cmd::nodes::set(c),
        Command::Events(a) => cmd::events::run(a),
        Command::Queue(a) => cmd::queue::run(a),
        Command::Services(a) => cmd::service::list(a),
        Command::Service(c) => cmd::service::run(c),
        Command::Pools(a) => cmd::pools::list(a),
        Command::Cache(a) => cmd::data::cache(a),
        Command::Images(a) => cmd::data::images(a),
        Command::Secret(c) => cmd::data::secret(c),
        Command::Volumes(a) => cmd::volume::list(a),
        Command::Volume(c) => cmd::volume::run(c),
        Command::Pool(c) => cmd::pools::run(c),
        Command::Teams(a) => cmd::teams::list(a),
        Command::Team(c) => cmd::teams::run(c),
        Command::Users(a) => cmd::users::list(a),
        Command::User(c) => cmd::users::run(c),
        Command::Describe(a) => cmd::describe::run(a),
        Command::Dashboard(a) => cmd::dashboard::run(a),
        Command::Top(a) => cmd::top::run(a),
        Command::Token(c) => cmd::token::run(c),
        Command::Ca(c) => cmd::ca::run(c),
        Command::Audit(a) => cmd::audit::run(a),
        Command::Usage(a) => cmd::usage::run(a),
        Command::Whatif(a) => cmd::whatif::run(a),
        Command::Completions(a) => cmd::completions::completions::<Cli>(a),
        Command::Man => cmd::completions::man::<Cli>(),
        Command::Db(c) => cmd::db::run(c),
        Command::Bench(c) => cmd::bench::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The job's own status, already said on stderr.
        Err(e) if e.is::<cmd::watch::JobExitCode>() => {
            ExitCode::from(e.downcast_ref::<cmd::watch::JobExitCode>().map_or(1, |c| c.0))
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints clap's error and exits; for `submit` and `run` without `--`, adds how to pass a
/// command (the usual mistake: `gantry submit --gpus 1 python train.py`).
fn exit_with_hint(e: clap::Error, args: &[std::ffi::OsString]) -> ! {
    use clap::error::ErrorKind;
    let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let submitting = matches!(args.get(1).map(String::as_str), Some("submit" | "run"));
    let mistake = matches!(e.kind(), ErrorKind::UnknownArgument | ErrorKind::ArgumentConflict);
    if submitting && mistake && !args.iter().any(|a| a == "--") {
        let _ = e.print();
        eprintln!(
            "\nhint: put the job's command after `--`, so its own flags are not read as gantry's:\n  \
             gantry {} --gpus 1 -- python train.py --lr 3e-4",
            args[1]
        );
        std::process::exit(2);
    }
    e.exit()
}
