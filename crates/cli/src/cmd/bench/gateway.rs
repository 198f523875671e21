//! `gantry bench gateway`: what the serving gateway adds to a request's latency. One process
//! starts a replica that answers after `--replica-delay-ms` (10 ms), the gateway in front of it,
//! and an open-loop load generator: `--connections` keep-alive connections (100) sending at each
//! of `--rates` (1,000 and 5,000 requests/s) for `--seconds`, first straight to the replica, then
//! through the gateway (the engine is [`gantry_server::gateway::bench`]).

use std::time::Duration;

use clap::Args;
use gantry_server::gateway::bench::{self, BenchSettings};

/// Arguments of `gantry bench gateway`.
#[derive(Debug, Args)]
pub struct GatewayBenchArgs {
    /// Client connections (each sends one request at a time, keep-alive).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    connections: u32,
    /// Request rates to run, requests per second (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1000u32, 5000])]
    rates: Vec<u32>,
    /// Seconds per rate and path (direct, through the gateway).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// How long the replica takes to answer, milliseconds.
    #[arg(long, default_value_t = 10)]
    replica_delay_ms: u64,
    /// Print JSON: a list of `{"rps", "direct_p99_ms", "gateway_p99_ms", "added_p99_ms", "errors", …}`.
    #[arg(long)]
    json: bool,
}

/// Runs the benchmark.
pub fn run(args: &GatewayBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!((1.0..=3600.0).contains(&args.seconds), "--seconds must be between 1 and 3600");
    anyhow::ensure!(
        args.rates.iter().all(|r| (1..=1_000_000).contains(r)),
        "--rates must be between 1 and 1000000"
    );
    let settings = BenchSettings {
        connections: args.connections,
        rates: args.rates.clone(),
        seconds: args.seconds,
        replica_delay: Duration::from_millis(args.replica_delay_ms),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let rows = rt.block_on(bench::measure(&settings))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    for r in rows {
        println!(
            "{} requests/s over {} connections, replica {} ms: p99 direct {:.3} ms, through the gateway {:.3} ms \
             (+{:.3} ms); p50 +{:.3} ms; {} errors; CPU per request {:.1} µs direct, {:.1} µs through the gateway",
            r.rps,
            r.connections,
            r.replica_delay_ms,
            r.direct_p99_ms,
            r.gateway_p99_ms,
            r.added_p99_ms,
            r.added_p50_ms,
            r.errors,
            r.direct_cpu_us_per_request,
            r.gateway_cpu_us_per_request
        );
    }
    Ok(())
}
