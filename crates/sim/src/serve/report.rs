//! What `gantry sim serve` prints and writes: per policy SLO attainment, latency percentiles,
//! replica- and GPU-hours, cold starts and decisions; CSVs of the series, decisions and grid;
//! an SVG of load and replicas over time.

use std::fmt::Write;

use serde_json::{Value, json};

use super::ServePolicy;
use super::engine::RunResult;

/// One policy's result.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The policy.
    pub policy: ServePolicy,
    /// Its target (requests per replica; the count for `fixed`).
    pub target: Option<f64>,
    /// The run.
    pub run: RunResult,
    /// Share of requests with TTFT within the SLO.
    pub slo_attainment: f64,
    /// The grid tried: (target, attainment, GPU-seconds).
    pub grid: Vec<(f64, f64, f64)>,
}

/// The share of `ttft` within `slo` (refused requests are infinite, so they miss).
pub fn attainment(ttft: &[f64], slo: f64) -> f64 {
    if ttft.is_empty() {
        return 1.0;
    }
    ttft.iter().filter(|&&t| t <= slo).count() as f64 / ttft.len() as f64
}

/// The `q` quantile of the finite values (nearest rank), 0 when there is none.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1]
}

impl Outcome {
    /// Wraps a run.
    pub fn new(policy: ServePolicy, target: Option<f64>, run: RunResult, slo: f64) -> Self {
        let slo_attainment = attainment(&run.ttft, slo);
        Self { policy, target, run, slo_attainment, grid: Vec::new() }
    }

    /// Replica-hours.
    pub fn replica_hours(&self) -> f64 {
        self.run.replica_s / 3600.0
    }

    /// GPU-hours.
    pub fn gpu_hours(&self) -> f64 {
        self.replica_hours() * f64::from(self.run.gpus)
    }

    fn json(&self) -> Value {
        let r = &self.run;
        json!({
            "policy": self.policy.as_str(),
            "target": self.target.map(round4),
            "slo_attainment": round4(self.slo_attainment),
            "gpu_hours": round4(self.gpu_hours()),
            "replica_hours": round4(self.replica_hours()),
            "ttft_p50_s": round4(quantile(&r.ttft, 0.5)),
            "ttft_p99_s": round4(quantile(&r.ttft, 0.99)),
            "e2e_p50_s": round4(quantile(&r.e2e, 0.5)),
            "e2e_p99_s": round4(quantile(&r.e2e, 0.99)),
            "cold_starts": r.cold_starts,
            "decisions": r.decisions.len(),
            "requests": r.ttft.len(),
            "refused": r.ttft.iter().filter(|t| t.is_infinite()).count(),
            "peak_replicas": r.series.iter().map(|p| p.replicas).max().unwrap_or(0),
        })
    }
}

fn round4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

/// The report of one evaluation.
#[derive(Debug, Clone)]
pub struct Report {
    /// Trace name.
    pub trace: String,
    /// Profile name.
    pub profile: String,
    /// Time compression.
    pub rate_scale: f64,
    /// TTFT SLO.
    pub slo_ttft_s: f64,
    /// Per policy.
    pub outcomes: Vec<Outcome>,
}

impl Report {
    /// The `--json` object.
    pub fn json(&self) -> Value {
        json!({
            "trace": self.trace,
            "profile": self.profile,
            "rate_scale": self.rate_scale,
            "slo_ttft_s": self.slo_ttft_s,
            "policies": self.outcomes.iter().map(Outcome::json).collect::<Vec<_>>(),
        })
    }

    /// The text table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "trace {}  profile {}  rate ×{}  SLO TTFT ≤ {} s\n",
            self.trace, self.profile, self.rate_scale, self.slo_ttft_s
        );
        let _ = writeln!(
            s,
            "{:<9} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9}",
            "policy",
            "target",
            "SLO %",
            "TTFT p50",
            "TTFT p99",
            "E2E p50",
            "E2E p99",
            "rep-h",
            "GPU-h",
            "cold",
            "decisions"
        );
        for o in &self.outcomes {
            let r = &o.run;
            let _ = writeln!(
                s,
                "{:<9} {:>7} {:>8.2} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>6} {:>9}",
                o.policy.as_str(),
                o.target.map_or("-".to_string(), |t| format!("{t:.1}")),
                100.0 * o.slo_attainment,
                quantile(&r.ttft, 0.5),
                quantile(&r.ttft, 0.99),
                quantile(&r.e2e, 0.5),
                quantile(&r.e2e, 0.99),
                o.replica_hours(),
                o.gpu_hours(),
                r.cold_starts,
                r.decisions.len()
            );
        }
        s
    }

    /// `summary.csv`: one row per policy.
    pub fn summary_csv(&self) -> String {
        let mut s = String::from(
            "policy,target,slo_attainment,ttft_p50_s,ttft_p99_s,e2e_p50_s,e2e_p99_s,replica_hours,gpu_hours,cold_starts,decisions,requests\n",
        );
        for o in &self.outcomes {
            let r = &o.run;
            let _ = writeln!(
                s,
                "{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{},{},{}",
                o.policy.as_str(),
                o.target.map_or(String::new(), |t| t.to_string()),
                o.slo_attainment,
                quantile(&r.ttft, 0.5),
                quantile(&r.ttft, 0.99),
                quantile(&r.e2e, 0.5),
                quantile(&r.e2e, 0.99),
                o.replica_hours(),
                o.gpu_hours(),
                r.cold_starts,
                r.decisions.len(),
                r.ttft.len()
            );
        }
        s
    }

    /// `series.csv`: per policy and second, load and replicas.
    pub fn series_csv(&self) -> String {
        let mut s = String::from("policy,t_s,rps,in_flight,queue,replicas,ready\n");
        for o in &self.outcomes {
            for p in &o.run.series {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{}",
                    o.policy.as_str(),
                    p.t,
                    p.rps,
                    p.in_flight,
                    p.queue,
                    p.replicas,
                    p.ready
                );
            }
        }
        s
    }

    /// `decisions.csv`: every change of count with its reason.
    pub fn decisions_csv(&self) -> String {
        let mut s = String::from("policy,at_s,from,to,reason\n");
        for o in &self.outcomes {
            for d in &o.run.decisions {
                let _ = writeln!(
                    s,
                    "{},{},{},{},\"{}\"",
                    o.policy.as_str(),
                    d.at_s,
                    d.from,
                    d.to,
                    d.reason.replace('"', "'")
                );
            }
        }
        s
    }

    /// `grid.csv`: every target tried for the baselines.
    pub fn grid_csv(&self) -> String {
        let mut s = String::from("policy,target,slo_attainment,gpu_hours\n");
        for o in &self.outcomes {
            for (t, a, g) in &o.grid {
                let _ = writeln!(s, "{},{t},{a:.4},{:.4}", o.policy.as_str(), g / 3600.0);
            }
        }
        s
    }

    /// `replicas.svg`: arrivals per second (10 s means, grey, right axis) and each policy's replicas.
    pub fn svg(&self) -> String {
        super::svg::chart(self)
    }
}
