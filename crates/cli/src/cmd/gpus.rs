//! `gantry gpus`: inventory, readings, health and findings, once.

use super::backend::BackendArgs;
use super::client::ServerArgs;
use gantry_agent::exporter::attribution::Attributor;
use gantry_gpu::findings::FindingsConfig;
use gantry_gpu::health::HealthConfig;
use gantry_gpu::{Collection, Collector, MIB};
use std::fmt::Write;
use std::time::{Duration, Instant};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// One JSON document for programs.
    Json,
}

/// `gantry gpus` flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Readings to take, one second apart (windowed findings need more than one).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=3600))]
    samples: u32,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let local = args.backend.backend.is_some() || args.backend.simulated_gpus.is_some();
    if !local && super::client::server_configured(&args.server) {
        return super::cluster_gpus::run(&args.server, args.output == Output::Json);
    }
    let opened = args.backend.open()?;
    let mut collector = Collector::new(opened.backend, HealthConfig::default(), FindingsConfig::default());
    let origin = Instant::now();
    let mut c = collector.collect(Duration::ZERO)?;
    for i in 1..args.samples {
        std::thread::sleep(
            (origin + Duration::from_secs(u64::from(i))).saturating_duration_since(Instant::now()),
        );
        c = collector.collect(origin.elapsed())?;
    }
    let jobs = Attributor::new("/proc").attribute(&c.processes);
    for (p, job) in c.processes.iter_mut().zip(&jobs) {
        p.job_id = Some(job.to_string());
    }
    let text = match args.output {
        Output::Json => serde_json::to_string_pretty(&c)? + "\n",
        Output::Table => table(&c),
    };
    print!("{text}");
    Ok(())
}

/// Renders the collection as two tables (GPUs, processes).
pub fn table(c: &Collection) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "backend {}, driver {}", c.backend, c.driver_version);
    let _ = writeln!(
        out,
        "{:<4} {:<24} {:<14} {:>5} {:>17} {:>5} {:>7} {:<10} FINDINGS",
        "GPU", "MODEL", "PCI", "UTIL%", "MEMORY MiB", "TEMP", "POWER W", "HEALTH"
    );
    for g in &c.gpus {
        let (util, mem, temp, power) = match &g.sample {
            Some(s) => (
                s.gpu_util_percent.map_or("-".to_owned(), |u| format!("{u:.0}")),
                format!("{}/{}", s.memory_used_bytes / MIB, g.info.memory_total_bytes / MIB),
                s.gpu_temp_celsius.map_or("-".to_owned(), |t| format!("{t:.0}")),
                s.power_watts.map_or("-".to_owned(), |w| format!("{w:.0}")),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let findings: Vec<&str> = g.findings.iter().map(|f| f.kind.as_str()).collect();
        let findings = if findings.is_empty() { "-".to_owned() } else { findings.join(",") };
        let _ = writeln!(
            out,
            "{:<4} {:<24} {:<14} {:>5} {:>17} {:>5} {:>7} {:<10} {}",
            g.info.index,
            g.info.name,
            g.info.pci_bus_id.get(4..).unwrap_or(&g.info.pci_bus_id),
            util,
            mem,
            temp,
            power,
            g.health.as_str(),
            findings
        );
    }
    if !c.processes.is_empty() {
        let _ = writeln!(out, "\n{:<8} {:<4} {:>10} JOB", "PID", "GPU", "MEMORY MiB");
        for p in &c.processes {
            let job = p.job_id.as_deref().unwrap_or("unknown");
            let _ = writeln!(out, "{:<8} {:<4} {:>10} {job}", p.pid, p.gpu_index, p.memory_used_bytes / MIB);
        }
    }
    out
}
