//! Reports: the JSON contract of `gantry sim fgd --json`, a text table, CSV curves and an SVG
//! line chart (mean with a ± 1 std band) of unallocated GPU % against arrived workload %.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::experiment::MAX_BIN;
use gantry_core::PolicyKind;

use crate::runner::{PolicyResult, paired};

/// Arrived-% points shown in the table and the JSON.
pub const POINTS: [usize; 5] = [90, 95, 100, 110, 130];

/// The JSON object printed by `--json`.
pub fn json(trace: &str, total_gpus: u64, wall_seconds: f64, results: &[PolicyResult]) -> Value {
    let policies: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut unallocated = Map::new();
            let mut fragmentation = Map::new();
            for p in POINTS {
                let u = r.unallocated(p);
                let f = r.fragmentation(p);
                unallocated.insert(
                    p.to_string(),
                    json!({"mean": round4(u.mean), "std": round4(u.std), "median": round4(u.median)}),
                );
                fragmentation.insert(p.to_string(), json!({"mean": round4(f.mean), "std": round4(f.std)}));
            }
            let failed: usize = r.runs.iter().map(|c| c.failed).sum();
            let vs_fgd = versus_fgd(results, r)
                .map(|(mean, se)| json!({"mean_diff_pp": round4(mean), "std_error_pp": round4(se)}));
            json!({
                "paired_vs_fgd_at_100": vs_fgd,
                "policy": r.policy.as_str(),
                "seeds": r.runs.len(),
                "unallocated_pct": unallocated,
                "fragmentation_pct": fragmentation,
                "failed_pods_mean": failed as f64 / r.runs.len().max(1) as f64,
            })
        })
        .collect();
    json!({"trace": trace, "total_gpus": total_gpus, "wall_seconds": round4(wall_seconds), "policies": policies})
}

/// The paired difference at 100 % arrived between `r` and FGD in the same results, if both ran.
fn versus_fgd(results: &[PolicyResult], r: &PolicyResult) -> Option<(f64, f64)> {
    if r.policy == PolicyKind::Fgd {
        return None;
    }
    let fgd = results.iter().find(|x| x.policy == PolicyKind::Fgd)?;
    paired(r, fgd, 100)
}

fn round4(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

/// A text table like the FGD paper's Table B, plus the curve at [`POINTS`].
pub fn table(trace: &str, total_gpus: u64, results: &[PolicyResult]) -> String {
    let mut out = String::new();
    let seeds = results.first().map_or(0, |r| r.runs.len());
    let _ = writeln!(
        out,
        "trace {trace}: {total_gpus} GPUs, {seeds} seed(s); unallocated GPU % (mean ± std over seeds)"
    );
    let _ = write!(out, "{:<11}", "policy");
    for p in POINTS {
        let _ = write!(out, "{:>16}", format!("@{p}% arrived"));
    }
    let _ = writeln!(out, "{:>14}", "frag@100%");
    for r in results {
        let _ = write!(out, "{:<11}", r.policy.as_str());
        for p in POINTS {
            let s = r.unallocated(p);
            let _ = write!(out, "{:>16}", format!("{:.2} ± {:.2}", s.mean, s.std));
        }
        let _ = writeln!(out, "{:>14}", format!("{:.2}", r.fragmentation(100).mean));
    }
    for r in results {
        if let Some((mean, se)) = versus_fgd(results, r) {
            let _ = writeln!(
                out,
                "{} − fgd at 100% arrived, paired over seeds: {mean:+.3} pp (standard error {se:.3})",
                r.policy.as_str()
            );
        }
    }
    out
}

/// Every run's full curve, one row per (policy, seed, arrived %).
pub fn curves_csv(results: &[PolicyResult]) -> String {
    let mut out = String::from("policy,seed,arrived_pct,alloc_pct,unallocated_pct,frag_pct\n");
    for r in results {
        for (seed, run) in r.seeds.iter().zip(&r.runs) {
            for bin in 0..=MAX_BIN {
                let a = run.alloc_pct[bin];
                let _ = writeln!(
                    out,
                    "{},{seed},{bin},{a:.4},{:.4},{:.4}",
                    r.policy.as_str(),
                    100.0 - a,
                    run.frag_pct[bin]
                );
            }
        }
    }
    out
}

/// Aggregated curves, one row per (policy, arrived %).
pub fn summary_csv(results: &[PolicyResult]) -> String {
    let mut out = String::from(
        "policy,arrived_pct,unallocated_mean,unallocated_std,unallocated_median,unallocated_p25,unallocated_p75,frag_mean\n",
    );
    for r in results {
        for bin in 0..=MAX_BIN {
            let s = r.unallocated(bin);
            let f = r.fragmentation(bin);
            let _ = writeln!(
                out,
                "{},{bin},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4}",
                r.policy.as_str(),
                s.mean,
                s.std,
                s.median,
                s.p25,
                s.p75,
                f.mean
            );
        }
    }
    out
}

const COLORS: [&str; 8] =
    ["#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#17becf", "#8c564b"];

/// An SVG line chart: x = arrived % from 75 to 120, y = unallocated GPU %, one line per policy
/// (mean over seeds, the statistic of the tables and the JSON) with a band of ± one standard
/// deviation; the legend gives the mean at 100 % arrived.
pub fn svg(trace: &str, results: &[PolicyResult]) -> String {
    let (x0, x1) = (75usize, 120usize);
    let (w, h, left, right, top, bottom) = (780.0, 480.0, 70.0, 170.0, 40.0, 78.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let y_max = results.iter().flat_map(|r| (x0..=x1).map(|b| upper(r, b))).fold(0.0f64, f64::max).max(1.0);
    let y_top = (y_max / 5.0).ceil() * 5.0;
    let sx = |x: f64| left + (x - x0 as f64) / (x1 - x0) as f64 * pw;
    let sy = |y: f64| top + (1.0 - y / y_top) * ph;
    let title = format!("Unallocated GPUs vs arrived workload — {trace}");
    let mut s = crate::svg::open(w, h, &title, left + pw / 2.0);
    for k in 0..=5 {
        let y = y_top * f64::from(k) / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{0}" y1="{1:.1}" y2="{1:.1}" stroke="#e5e5e5"/><text x="{2}" y="{3:.1}" text-anchor="end">{y:.0}</text>"##,
            left + pw,
            sy(y),
            left - 6.0,
            sy(y) + 4.0
        );
    }
    for x in (x0..=x1).step_by(5) {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{top}" y2="{1}" stroke="#e5e5e5"/><text x="{0:.1}" y="{2}" text-anchor="middle">{x}</text>"##,
            sx(x as f64),
            top + ph,
            top + ph + 16.0
        );
    }
    let _ =
        writeln!(s, r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">Arrived workload (% of GPU capacity)</text>"#,
        left + pw / 2.0,
        top + ph + 38.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">Unallocated GPUs (%)</text>"#,
        top + ph / 2.0
    );
    for (i, r) in results.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let upper: Vec<String> =
            (x0..=x1).map(|b| format!("{:.1},{:.1}", sx(b as f64), sy(upper(r, b)))).collect();
        let lower: Vec<String> =
            (x0..=x1).rev().map(|b| format!("{:.1},{:.1}", sx(b as f64), sy(lower(r, b)))).collect();
        let _ = writeln!(
            s,
            r#"<polygon points="{} {}" fill="{color}" fill-opacity="0.18" stroke="none"/>"#,
            upper.join(" "),
            lower.join(" ")
        );
        let line: Vec<String> =
            (x0..=x1).map(|b| format!("{:.1},{:.1}", sx(b as f64), sy(r.unallocated(b).mean))).collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            line.join(" ")
        );
        let ly = top + 14.0 + 20.0 * i as f64;
        let lx = left + pw + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{} ({:.2}%)</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            r.policy.as_str(),
            r.unallocated(100).mean
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" font-size="10" fill="#555">lines: mean over seeds (as in the table); bands: ± 1 std; legend: mean at 100 %</text>"##,
        left,
        h - 8.0
    );
    s.push_str("</svg>\n");
    s
}

/// Top of a policy's band at arrived % `bin`: mean + one standard deviation.
fn upper(r: &PolicyResult, bin: usize) -> f64 {
    let u = r.unallocated(bin);
    u.mean + u.std
}

/// Bottom of the band: mean − one standard deviation, not below zero.
fn lower(r: &PolicyResult, bin: usize) -> f64 {
    let u = r.unallocated(bin);
    (u.mean - u.std).max(0.0)
}
