//! `gantry bench exporter` (also spelled `gantry exporter --bench`, as before): resident memory
//! and scrape latency of the exporter under a simulated 8-GPU, 200-process load, scraped from a
//! second process over loopback.

use crate::cmd::backend::BackendKind;
use crate::cmd::exporter::{Args, runtime};
use anyhow::{Context, ensure};
use gantry_agent::exporter::client::{self, percentile};
use gantry_agent::exporter::{Exporter, server};
use gantry_gpu::{Collector, UtilProfile};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Benchmark flags.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Run the benchmark instead of serving (simulated fleet, default 8xH100).
    #[arg(long)]
    pub bench: bool,
    /// Seconds to run before measuring resident memory.
    #[arg(long, default_value_t = 60)]
    pub bench_seconds: u64,
    /// Scrapes to time.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub bench_scrapes: u32,
    /// Simulated processes spread over the GPUs.
    #[arg(long, default_value_t = 200)]
    pub bench_processes: u32,
    /// Internal: act as the scraping process against this address.
    #[arg(long, hide = true)]
    pub bench_client: Option<SocketAddr>,
}

/// Arguments of `gantry bench exporter`.
#[derive(Debug, clap::Args)]
pub struct ExporterBenchArgs {
    /// Seconds to run before measuring resident memory.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Scrapes to time.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    scrapes: u32,
    /// Simulated processes spread over the GPUs.
    #[arg(long, default_value_t = 200)]
    processes: u32,
    /// The simulated fleet, e.g. `8xH100` (the default) or `4xA100-80GB`.
    #[arg(long, value_name = "SPEC")]
    simulated_gpus: Option<String>,
}

/// The exporter's own flags, read from a command line (what `gantry exporter` would take).
#[derive(Debug, clap::Parser)]
struct ExporterLine {
    #[command(flatten)]
    args: Args,
}

/// `gantry bench exporter`: the exporter's benchmark with the exporter's defaults.
pub fn run_command(b: &ExporterBenchArgs) -> anyhow::Result<()> {
    use clap::Parser;
    let (seconds, scrapes, processes) =
        (b.seconds.to_string(), b.scrapes.to_string(), b.processes.to_string());
    let mut line = vec!["exporter", "--bench", "--bench-seconds", &seconds, "--bench-scrapes", &scrapes];
    line.extend(["--bench-processes", &processes]);
    if let Some(spec) = &b.simulated_gpus {
        line.extend(["--simulated-gpus", spec]);
    }
    let parsed = ExporterLine::try_parse_from(line).map_err(|e| anyhow::anyhow!("{e}"))?;
    run(parsed.args)
}

/// Runs the exporter on loopback with load on it, then measures.
pub fn run(mut args: Args) -> anyhow::Result<()> {
    args.backend.backend = Some(BackendKind::Simulated);
    args.backend.simulated_gpus.get_or_insert_with(|| "8xH100".to_owned());
    let (health, findings, cfg) = args.configs()?;
    let opened = args.backend.open()?;
    let fleet = opened.fleet.context("the benchmark needs the simulated backend")?;
    let gpus = fleet.gpus().len() as u32;
    for i in 0..args.bench.bench_processes {
        let profile = if i % 3 == 0 {
            UtilProfile::Bursty { low: 5.0, high: 90.0, period_s: 4.0 }
        } else {
            UtilProfile::Steady { percent: f64::from(i % 7) * 3.0 }
        };
        fleet.start_process(i % gpus, 100_000 + i, Some(format!("bench-job-{}", i / 4)), 256, profile)?;
    }
    let rt = runtime()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let interval = cfg.interval;
    let exporter = Exporter::start(Collector::new(opened.backend, health, findings), cfg)?;
    let router = server::router(exporter.cell(), interval * 3 + Duration::from_secs(10));
    rt.spawn(server::serve(listener, router, std::future::pending()));
    println!(
        "gantry exporter benchmark: {gpus} simulated GPUs, {} processes, {} ms collection interval, pid {}",
        args.bench.bench_processes,
        interval.as_millis(),
        std::process::id()
    );
    let warm_up = Duration::from_secs(args.bench.bench_seconds);
    rt.block_on(async { tokio::time::sleep(warm_up).await });
    let rss_warm = status_kib("VmRSS")?;
    let exe = std::env::current_exe()?;
    let scrapes = args.bench.bench_scrapes.to_string();
    let out = rt.block_on(async {
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args(["exporter", "--bench-client", &addr.to_string(), "--bench-scrapes", &scrapes]);
        cmd.output().await
    })?;
    ensure!(
        out.status.success(),
        "the scraping process failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let (rss_after, hwm) = (status_kib("VmRSS")?, status_kib("VmHWM")?);
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "RSS after {} s: {:.1} MiB; after the scrapes: {:.1} MiB; peak: {:.1} MiB",
        args.bench.bench_seconds,
        mib(rss_warm),
        mib(rss_after),
        mib(hwm)
    );
    print!("{}", String::from_utf8_lossy(&out.stdout));
    drop(exporter);
    Ok(())
}

/// The scraping side: `n` timed GETs of /metrics, one new connection each.
pub fn client(addr: SocketAddr, n: u32) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(5);
    let mut bytes = 0;
    for _ in 0..10 {
        bytes = client::get(addr, "/metrics", timeout)?.body.len();
    }
    let mut times = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t = Instant::now();
        let r = client::get(addr, "/metrics", timeout)?;
        times.push(t.elapsed());
        ensure!(
            r.status == 200 && r.body.contains("DCGM_FI_DEV_GPU_UTIL"),
            "bad scrape: status {}",
            r.status
        );
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "scrape latency over {n} scrapes from a second process (new connection each): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms; body {:.1} KiB",
        ms(percentile(&times, 0.50)),
        ms(percentile(&times, 0.99)),
        ms(percentile(&times, 1.0)),
        bytes as f64 / 1024.0
    );
    Ok(())
}

fn status_kib(key: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok())
        .with_context(|| format!("no {key} in /proc/self/status"))
}
