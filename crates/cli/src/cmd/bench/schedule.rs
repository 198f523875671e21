//! `gantry bench schedule`: placements per second of one full scheduling pass (the server's
//! `plan`, queue and `gantry` placement) over a synthetic fleet and a mixed pending queue, beside
//! the plain priority-FIFO best-fit pass measured in the same run.

use std::time::Instant;

use clap::Args;
use gantry_core::{PolicyKind, RandomSource, SplitMix64};
use gantry_server::scheduler::{Plan, Snapshot, plan, plan_priority_fifo};
use gantry_store::{Gpu, GpuHealth, GpuInfo, Job, JobRequest, Node, NodeState, Team};

/// Flags of `gantry bench schedule`.
#[derive(Debug, Args)]
pub struct ScheduleBenchArgs {
    /// Nodes in the synthetic fleet.
    #[arg(long, default_value_t = 5000)]
    pub nodes: u32,
    /// GPUs per node (H100, 80 GB).
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// Pending jobs: 55 % whole GPUs (1, 2, 4), 15 % 8-GPU, 30 % slices of 10–40 GB.
    #[arg(long, default_value_t = 50_000)]
    pub pending: u32,
    /// Teams the jobs are spread over (each guaranteed an even share).
    #[arg(long, default_value_t = 4)]
    pub teams: u32,
    /// Seed of the queue's mix.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Builds the fleet and queue, times both passes, prints the figures.
pub fn run(args: &ScheduleBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.nodes > 0 && args.gpus_per_node > 0, "--nodes and --gpus-per-node must be positive");
    let s = snapshot(args);
    let (gantry, gantry_s) = timed(|| plan(&s, PolicyKind::Gantry, 0x9a17));
    let (base, base_s) = timed(|| plan_priority_fifo(&s, PolicyKind::Bestfit, 0x9a17));
    let rate = |p: &Plan, secs: f64| p.placements.len() as f64 / secs.max(1e-9);
    if args.json {
        let out = serde_json::json!({
            "nodes": args.nodes,
            "gpus_per_node": args.gpus_per_node,
            "pending": args.pending,
            "placements": gantry.placements.len(),
            "pass_s": gantry_s,
            "placements_per_s": rate(&gantry, gantry_s),
            "baseline_placements": base.placements.len(),
            "baseline_pass_s": base_s,
            "baseline_placements_per_s": rate(&base, base_s),
        });
        println!("{out}");
    } else {
        println!(
            "{} nodes x {} GPUs, {} pending jobs ({} teams)",
            args.nodes, args.gpus_per_node, args.pending, args.teams
        );
        println!(
            "gantry (queue + gantry placement): {} placed in {:.3} s = {:.0} placements/s",
            gantry.placements.len(),
            gantry_s,
            rate(&gantry, gantry_s)
        );
        println!(
            "baseline (priority-FIFO best fit): {} placed in {:.3} s = {:.0} placements/s",
            base.placements.len(),
            base_s,
            rate(&base, base_s)
        );
    }
    Ok(())
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed().as_secs_f64())
}

fn snapshot(args: &ScheduleBenchArgs) -> Snapshot {
    let mut s = Snapshot { at: 1_000_000, ..Snapshot::default() };
    for n in 0..args.nodes {
        let id = format!("node-{n:05}");
        s.nodes.push(Node {
            id: id.clone(),
            hostname: id.clone(),
            advertise_addr: None,
            network: Default::default(),
            job_defaults: None,
            labels: Default::default(),
            state: NodeState::Ready,
            scheduling: Default::default(),
            drain_at: None,
            epoch: 1,
            cpu_milli: 192_000,
            memory_mib: 2_000_000,
            last_heartbeat: 0,
        });
        for i in 0..args.gpus_per_node {
            s.gpus.push(Gpu {
                info: GpuInfo {
                    uuid: format!("GPU-{n}-{i}"),
                    index: i,
                    model: "H100-80GB".into(),
                    memory_mib: 81_920,
                },
                node_id: id.clone(),
                health: GpuHealth::Healthy,
                sample: None,
            });
        }
    }
    let teams = args.teams.max(1);
    let share = args.nodes * args.gpus_per_node / teams;
    s.teams = (0..teams)
        .map(|t| Team { name: format!("team-{t}"), gpu_quota: Some(share), ..Team::default() })
        .collect();
    let mut rng = SplitMix64::new(args.seed);
    for id in 1..=i64::from(args.pending) {
        let draw = rng.next_u64() % 100;
        let (gpus, gpu_memory_mib) = match draw {
            0..30 => (0, [10_240, 20_480, 40_960][(rng.next_u64() % 3) as usize]),
            30..85 => ([1, 1, 2, 4][(rng.next_u64() % 4) as usize].min(args.gpus_per_node), 0),
            _ => (args.gpus_per_node, 0),
        };
        let cpu_milli = 4_000 * u64::from(gpus.max(1));
        s.pending.push(Job {
            id,
            team: format!("team-{}", rng.next_u64() % u64::from(teams)),
            name: format!("bench-{id}"),
            priority: (rng.next_u64() % 3) as i32,
            command: vec!["true".into()],
            request: JobRequest {
                gpus,
                gpu_memory_mib,
                cpu_milli,
                memory_mib: 16_384 * u64::from(gpus.max(1)),
                ..JobRequest::default()
            },
            submitted_at: id,
            ..Job::default()
        });
    }
    s
}
