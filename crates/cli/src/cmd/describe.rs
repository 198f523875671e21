//! `gantry describe job|node ID`: everything about one job or node and what recently happened
//! to it (`scontrol show`, `kubectl describe`): the job's fields, attempts and transitions, or the
//! node's state, GPUs and the jobs on it; then its latest events.

use clap::{Args, ValueEnum};
use gantry_api::model::Event;
use gantry_api::types::{GpuView, NodeView};
use gantry_store::Job;

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// What to describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// A job (an array member as `12_3`).
    Job,
    /// A node.
    Node,
}

/// Arguments of `gantry describe`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry describe job 12
  gantry describe node gpu-2")]
pub struct DescribeArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// `job` or `node`.
    #[arg(value_enum)]
    kind: Kind,
    /// The job id or node id.
    id: String,
}

/// Events shown at the end.
const EVENTS: u32 = 20;

/// Describes a job or a node.
pub fn run(args: DescribeArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let subject = match args.kind {
        Kind::Job => {
            let id = block_on(super::jobs::resolve(&api, &args.id))??;
            super::jobs::show(super::jobs::JobArgs::table(args.server.clone(), id.to_string()))?;
            format!("job/{id}")
        }
        Kind::Node => {
            node(&api, &args.id)?;
            args.id.clone()
        }
    };
    let query = [("limit".to_owned(), EVENTS.to_string()), ("subject".to_owned(), subject)];
    let events: Vec<Event> = block_on(api.get(&super::events::path(&query)))??;
    println!("events (newest first)");
    if events.is_empty() {
        println!("  none");
    }
    for e in &events {
        println!("  {}  {:<20} {}", table::when(e.at), e.kind, table::printable(&e.message));
    }
    Ok(())
}

fn node(api: &Api, id: &str) -> anyhow::Result<()> {
    let nodes: Vec<NodeView> = block_on(api.get("/v1/nodes"))??;
    let Some(v) = nodes.into_iter().find(|n| n.node.id == id) else {
        anyhow::bail!("node {id} not found (gantry nodes lists them)");
    };
    let n = &v.node;
    println!("node {}  {}  (host {})", n.id, n.state, table::printable(&n.hostname));
    println!("address   {}", n.advertise_addr.as_deref().unwrap_or("- (its host name)"));
    println!("epoch     {}  last heartbeat {}", n.epoch, table::when(n.last_heartbeat));
    println!("capacity  {} CPUs  {} MiB memory", n.cpu_milli / 1000, n.memory_mib);
    println!("gpus      {} ({} free, {} unhealthy)", v.gpus, v.gpus_free, v.gpus_unhealthy);
    let gpus: Vec<GpuView> = block_on(api.get("/v1/gpus"))??;
    for g in gpus.iter().filter(|g| g.gpu.node_id == n.id) {
        let holders: Vec<String> = g.holders.iter().map(|h| format!("job {}", h.job_id)).collect();
        let held = if holders.is_empty() { "idle".to_owned() } else { holders.join(", ") };
        println!(
            "  {} {}  {}  {}  {held}",
            g.gpu.info.index, g.gpu.info.uuid, g.gpu.info.model, g.gpu.health
        );
    }
    let mut jobs: Vec<Job> = Vec::new();
    for state in ["scheduled", "running"] {
        jobs.extend(block_on(super::jobs::all_pages(api, &format!("/v1/jobs?state={state}&limit=1000")))??);
    }
    jobs.retain(|j| j.node_id.as_deref() == Some(n.id.as_str()));
    println!("jobs      {}", if jobs.is_empty() { "none".to_owned() } else { String::new() });
    for j in &jobs {
        println!("  {} {}  {}  {}", j.id, table::printable(&j.name), j.team, super::jobs::state(j));
    }
    Ok(())
}
