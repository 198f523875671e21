//! `gantry bench submit`: durable submissions per second and latency percentiles, against a
//! control plane started in this process on a fresh on-disk store (no agent, so nothing runs).

pub mod exporter;
pub mod failover;
pub mod gateway;
pub mod load;
pub mod pass;
pub mod schedule;
pub mod start;
pub mod whatif;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use gantry_server::{Server, ServerConfig};
use gantry_store::Store;

use crate::cmd::client::Api;

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Durable job submissions over HTTP from concurrent clients.
    Submit(SubmitBenchArgs),
    /// Mixed submit/get/list load from keep-alive clients against a `gantry server` process:
    /// throughput, latency per kind, errors and the server's resident memory.
    Load(load::LoadBenchArgs),
    /// Placements per second of one full scheduling pass over a synthetic fleet and a mixed
    /// queue, beside the priority-FIFO best-fit pass (`--json`: `placements_per_s`,
    /// `baseline_placements_per_s`).
    Schedule(schedule::ScheduleBenchArgs),
    /// What one scheduling pass costs with a long pending queue on an on-disk store: a full
    /// reload and plan beside the incremental passes (idle, time-based, after one change).
    Pass(pass::PassBenchArgs),
    /// Latency the serving gateway adds: an in-process replica answering after 10 ms, reached
    /// directly and through the gateway by 100 connections at 1,000 and 5,000 requests/s
    /// (`--json`: `rps`, `direct_p99_ms`, `gateway_p99_ms`, `added_p99_ms`, `errors` per rate).
    Gateway(gateway::GatewayBenchArgs),
    /// Submission to running on an idle cluster (an in-process control plane and agent on a
    /// simulated fleet), one tiny job at a time (`--json`: `p50_s`, `p90_s`, `p99_s`).
    Start(start::StartBenchArgs),
    /// Faults injected into replicas on one PostgreSQL (kill -9 or SIGSTOP the leader, kill -9 a
    /// follower, restart PostgreSQL, terminate connections) under submissions and running jobs,
    /// and a checker of the whole history (`--json`: the counts of each violation, all 0, and
    /// `failover_s` `p50`/`p99`).
    Failover(failover::FailoverBenchArgs),
    /// Resident memory and scrape latency of the GPU exporter under a simulated 8-GPU,
    /// 200-process load, scraped from a second process (`gantry exporter --bench` before).
    Exporter(exporter::ExporterBenchArgs),
    /// How fast `gantry whatif` replays: a synthetic 30-day history of 100,000 jobs on the fleet
    /// and on a larger one, against real time (`--json`: `wall_s`, `times_real_time`).
    Whatif(whatif::WhatifBenchArgs),
}

/// Arguments of `gantry bench submit`.
#[derive(Debug, Args)]
pub struct SubmitBenchArgs {
    /// Concurrent clients (each submits one request at a time).
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Submissions in total.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Store directory (default: a fresh directory under the system temp dir, removed after).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The store: `sqlite` (in the data directory) or an empty PostgreSQL database,
    /// `postgres://USER@HOST:PORT/DB`.
    #[arg(long, value_name = "sqlite|postgres://…", default_value = "sqlite", value_parser = crate::cmd::control::Database::parse)]
    db: crate::cmd::control::Database,
}

/// Runs a benchmark.
pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    let args = match command {
        BenchCommand::Submit(args) => args,
        BenchCommand::Load(args) => return load::run(args),
        BenchCommand::Schedule(args) => return schedule::run(&args),
        BenchCommand::Pass(args) => return pass::run(&args),
        BenchCommand::Gateway(args) => return gateway::run(&args),
        BenchCommand::Start(args) => return start::run(&args),
        BenchCommand::Exporter(args) => return exporter::run_command(&args),
        BenchCommand::Failover(args) => return failover::run(&args),
        BenchCommand::Whatif(args) => return whatif::run(&args),
    };
    let (dir, remove) = match &args.data_dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("gantry-bench-{}", std::process::id())), true),
    };
    let result = tokio::runtime::Runtime::new()?.block_on(bench(&args, &dir));
    if remove {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn bench(args: &SubmitBenchArgs, dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let store: Arc<dyn Store> = args.db.open(dir)?;
    let token =
        gantry_server::ensure_admin_token(&*store)?.context("the bench store already has an admin token")?;
    let mut config = ServerConfig::local(dir.join("logs"));
    config.listen = ([127, 0, 0, 1], 0).into();
    let server = Server::bind(config, store).await?;
    let url = format!("http://{}", server.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async move {
        let _ = stop_rx.await;
    }));
    let per_client = args.requests.div_ceil(args.clients.max(1));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..args.clients.max(1) {
        let api = Api::new(&url, &token)?;
        tasks.push(tokio::spawn(async move { client(api, c, per_client).await }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    let wall = started.elapsed();
    let _ = stop_tx.send(());
    serving.await??;
    report(&latencies, wall, args.clients);
    Ok(())
}

async fn client(api: Api, c: usize, n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let body =
            serde_json::json!({ "command": ["true"], "gpus": 1, "request_id": format!("bench-{c}-{i}") });
        let t = Instant::now();
        let _: serde_json::Value = api.post("/v1/jobs", &body).await?;
        out.push(t.elapsed());
    }
    Ok(out)
}

fn report(latencies: &[Duration], wall: Duration, clients: usize) {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let pct = |p: f64| {
        let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
        sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let rate = latencies.len() as f64 / wall.as_secs_f64();
    println!(
        "{} durable submissions from {clients} clients in {:.2} s: {rate:.0}/s; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        wall.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        pct(1.0)
    );
}
