//! What `gantry whatif` prints and writes.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use gantry_sim::whatif::{Comparison, Fleet, FleetChange, Summary};
use serde_json::json;

use super::history::Recorded;
use crate::cmd::table;

fn fleet_text(f: &Fleet) -> String {
    let parts: Vec<String> = f.gpus_by_model().iter().map(|(m, g)| format!("{g}×{m}")).collect();
    format!("{} nodes, {}", f.nodes.len(), parts.join(" + "))
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), num)
}

fn with_range(s: &Summary, field: &str, v: f64) -> String {
    match s.intervals.get(field) {
        Some([lo, hi]) => format!("{} ({}–{})", num(v), num(*lo), num(*hi)),
        None => num(v),
    }
}

fn rows(label: &str, s: &Summary) -> Vec<String> {
    vec![
        label.to_string(),
        s.jobs.to_string(),
        num(s.wait_p50_s),
        with_range(s, "wait_p95_s", s.wait_p95_s),
        with_range(s, "wait_mean_s", s.wait_mean_s),
        with_range(s, "jct_mean_s", s.jct_mean_s),
        num(s.jct_p99_s),
        num(s.gpu_allocation_pct),
        opt(s.gpu_use_pct),
        opt(s.fragmented_gpus),
        s.cost_per_used_gpu_hour.map_or_else(|| "-".into(), |c| format!("{c:.2}")),
    ]
}

const HEADER: [&str; 11] = [
    "",
    "JOBS",
    "WAIT P50 S",
    "WAIT P95 S",
    "WAIT MEAN S",
    "JCT MEAN S",
    "JCT P99 S",
    "ALLOC %",
    "USE %",
    "FRAG GPUS",
    "$/USED GPU-H",
];

/// The side-by-side table, overall and per team.
pub fn print(c: &Comparison, r: &Recorded, changed: &Fleet, changes: &[FleetChange], elapsed: Duration) {
    println!("fleet now:     {}", fleet_text(&r.fleet));
    println!(
        "fleet changed: {}{}",
        fleet_text(changed),
        if changes.is_empty() { " (no change asked)" } else { "" }
    );
    println!(
        "{} jobs replayed ({} left out: queued, running or never ran), reaction time {:.2} s, {} seeds, {:.1} s",
        r.jobs.len(),
        r.left_out,
        r.pass_delay_s,
        c.seeds,
        elapsed.as_secs_f64()
    );
    // A `--trace` has no recorded outcome: its `recorded` rows would be empty.
    let recorded = c.recorded.jobs > 0;
    let mut all = Vec::new();
    let mut three = |label: &str, rec: &Summary, base: &Summary, changed: &Summary| {
        let sep = if label.is_empty() { "" } else { " " };
        if recorded {
            all.push(rows(&format!("{label}{sep}recorded"), rec));
        }
        all.push(rows(&format!("{label}{sep}baseline"), base));
        all.push(rows(&format!("{label}{sep}changed"), changed));
    };
    three("", &c.recorded, &c.baseline, &c.changed);
    if c.teams.len() > 1 {
        for t in &c.teams {
            three(&t.team, &t.recorded, &t.baseline, &t.changed);
        }
    }
    table::print(&HEADER, &all);
    if c.changed.unplaceable > 0 {
        println!(
            "{} jobs could never run on the changed fleet (too large, or a GPU model it lacks)",
            c.changed.unplaceable
        );
    }
    if c.changed.guessed_run_times > 0 {
        println!(
            "{} jobs ran on a model whose speed nothing measured: their run times are kept as recorded (pass --speedups FILE)",
            c.changed.guessed_run_times
        );
    }
}

/// `--json`: the comparison with the fleets.
pub fn json(c: &Comparison, r: &Recorded, changed: &Fleet) -> anyhow::Result<()> {
    let mut v = serde_json::to_value(c)?;
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "fleet".into(),
            json!({"baseline": r.fleet.gpus_by_model(), "changed": changed.gpus_by_model()}),
        );
        o.insert("left_out".into(), json!(r.left_out));
        o.insert("reaction_s".into(), json!(r.pass_delay_s));
    }
    table::json(&v)
}

/// `--out DIR`: summary.csv, waits.csv and wait-cdf.svg.
pub fn write_dir(dir: &Path, c: &Comparison) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut summary = String::from(
        "scope,fleet,jobs,wait_p50_s,wait_p95_s,wait_mean_s,jct_mean_s,jct_p99_s,gpu_allocation_pct,gpu_use_pct,fragmented_gpus,cost_per_used_gpu_hour\n",
    );
    let mut line = |scope: &str, fleet: &str, s: &Summary| {
        let o = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
        summary.push_str(&format!(
            "{scope},{fleet},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{},{},{}\n",
            s.jobs,
            s.wait_p50_s,
            s.wait_p95_s,
            s.wait_mean_s,
            s.jct_mean_s,
            s.jct_p99_s,
            s.gpu_allocation_pct,
            o(s.gpu_use_pct),
            o(s.fragmented_gpus),
            o(s.cost_per_used_gpu_hour)
        ));
    };
    line("all", "recorded", &c.recorded);
    line("all", "baseline", &c.baseline);
    line("all", "changed", &c.changed);
    for t in &c.teams {
        line(&t.team, "recorded", &t.recorded);
        line(&t.team, "baseline", &t.baseline);
        line(&t.team, "changed", &t.changed);
    }
    let mut waits = String::from("fleet,wait_s\n");
    for (name, v) in ["recorded", "baseline", "changed"].iter().zip(&c.waits) {
        for w in v {
            waits.push_str(&format!("{name},{w:.3}\n"));
        }
    }
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text)
            .with_context(|| format!("cannot write {}", dir.join(name).display()))
    };
    write("summary.csv", &summary)?;
    write("waits.csv", &waits)?;
    write("wait-cdf.svg", &gantry_sim::whatif::chart::wait_cdf_svg(c))
}
