//! Job-simulator reports: the JSON contract, a text table, CSVs and two SVG charts (JCT CDF,
//! queue length over time).
//!
//! `avg_jct_s` is the mean over workload files of each file's mean JCT (Pollux's `mean`);
//! median and p99 are over all jobs of all files; `jain` is Jain's index across teams of
//! `1 / mean slowdown` (slowdown = JCT / the job's time alone on its requested GPUs), averaged
//! over files: 1 when every team's jobs are slowed equally.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::JobPolicyKind;
use super::engine::{ClusterShape, RunResult};

/// Everything one `sim jobs` invocation measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// The cluster.
    pub cluster: ClusterShape,
    /// One entry per policy, in the order asked.
    pub policies: Vec<PolicyReport>,
}

/// One policy over all workload files.
#[derive(Debug, Clone)]
pub struct PolicyReport {
    /// The policy.
    pub policy: JobPolicyKind,
    /// Whether it resized elastic jobs (`--elastic` with a policy that resizes).
    pub elastic: bool,
    /// Per file.
    pub workloads: Vec<WorkloadReport>,
    /// How jobs got their datasets (`--datasets`), when they had any.
    pub data: Option<super::data::DataMode>,
}

/// One policy on one workload file.
#[derive(Debug, Clone)]
pub struct WorkloadReport {
    /// File name.
    pub file: String,
    /// The run.
    pub run: RunResult,
}

impl WorkloadReport {
    /// Mean JCT, s.
    pub fn avg_jct(&self) -> f64 {
        mean(self.run.jobs.iter().map(|j| j.jct_s))
    }

    /// Mean wait before the first start, s.
    pub fn avg_queueing(&self) -> f64 {
        mean(self.run.jobs.iter().map(|j| j.start_s as f64 - j.submit_s))
    }

    /// Mean restarts per job.
    pub fn restarts_per_job(&self) -> f64 {
        mean(self.run.jobs.iter().map(|j| f64::from(j.restarts)))
    }

    /// Jain's index across teams of 1 / mean slowdown.
    pub fn jain(&self) -> f64 {
        let mut teams: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
        for j in &self.run.jobs {
            let e = teams.entry(j.team).or_default();
            e.0 += j.jct_s / j.ideal_s.max(1.0);
            e.1 += 1.0;
        }
        let x: Vec<f64> = teams.values().map(|(s, n)| n / s.max(f64::MIN_POSITIVE)).collect();
        let sum: f64 = x.iter().sum();
        let sq: f64 = x.iter().map(|v| v * v).sum();
        if sq == 0.0 { 1.0 } else { sum * sum / (x.len() as f64 * sq) }
    }
}

impl PolicyReport {
    /// Collects a policy's runs.
    pub fn new(policy: JobPolicyKind, elastic: bool, files: Vec<(String, RunResult)>) -> Self {
        Self {
            policy,
            elastic,
            workloads: files.into_iter().map(|(file, run)| WorkloadReport { file, run }).collect(),
            data: None,
        }
    }

    /// The policy's name in tables, CSVs and charts: `gantry (elastic)` when it resized jobs.
    pub fn label(&self) -> String {
        let name = if self.elastic {
            format!("{} (elastic)", self.policy.as_str())
        } else {
            self.policy.as_str().to_string()
        };
        match self.data {
            Some(mode) => format!("{name} {}", mode.as_str()),
            None => name,
        }
    }

    /// The datasets' figures summed over files, when the runs had datasets.
    pub fn data_stats(&self) -> Option<super::data::DataStats> {
        self.data?;
        let mut sum = super::data::DataStats::default();
        for w in &self.workloads {
            sum.add(&w.run.data.unwrap_or_default());
        }
        Some(sum)
    }

    /// Mean over files of each file's mean JCT.
    pub fn avg_jct(&self) -> f64 {
        mean(self.workloads.iter().map(WorkloadReport::avg_jct))
    }

    fn all_jcts(&self) -> Vec<f64> {
        let mut v: Vec<f64> =
            self.workloads.iter().flat_map(|w| w.run.jobs.iter().map(|j| j.jct_s)).collect();
        v.sort_by(f64::total_cmp);
        v
    }

    fn over_files(&self, f: impl Fn(&WorkloadReport) -> f64) -> f64 {
        mean(self.workloads.iter().map(f))
    }

    /// The JSON object of this policy.
    pub fn json(&self) -> Value {
        let jcts = self.all_jcts();
        let data = self.data.zip(self.data_stats()).map(|(mode, d)| {
            json!({
                "mode": mode.as_str(),
                "copy_idle_gpu_h": round3(d.copy_idle_gpu_s / 3600.0),
                "stage_in_h": round3(d.stage_in_s / 3600.0),
                "exposed_h": round3(d.exposed_s / 3600.0),
                "hidden_share": round3(d.hidden_share()),
                "stagings": d.stagings,
                "cache_hits": d.hits,
            })
        });
        json!({
            "policy": self.policy.as_str(),
            "data": data,
            "elastic": self.elastic,
            "avg_jct_s": round(self.avg_jct()),
            "median_jct_s": round(quantile(&jcts, 0.5)),
            "p99_jct_s": round(quantile(&jcts, 0.99)),
            "makespan_s": round(self.over_files(|w| w.run.makespan_s as f64)),
            "jain": round3(self.over_files(WorkloadReport::jain)),
            "avg_queueing_s": round(self.over_files(WorkloadReport::avg_queueing)),
            "utilisation": round3(self.over_files(|w| w.run.utilisation)),
            "restarts_per_job": round3(self.over_files(WorkloadReport::restarts_per_job)),
            "workloads": self.workloads.iter().map(|w| json!({
                "file": w.file,
                "jobs": w.run.jobs.len(),
                "avg_jct_s": round(w.avg_jct()),
                "makespan_s": w.run.makespan_s,
                "restarts_per_job": round3(w.restarts_per_job()),
            })).collect::<Vec<_>>(),
        })
    }
}

impl Report {
    /// The `--json` object.
    pub fn json(&self) -> Value {
        let c = &self.cluster;
        json!({
            "cluster": format!("{}x{}x{}", c.nodes, c.gpus_per_node, c.model),
            "policies": self.policies.iter().map(PolicyReport::json).collect::<Vec<_>>(),
        })
    }

    /// A text table, one row per policy.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<26} {:>10} {:>10} {:>10} {:>11} {:>9} {:>6} {:>6} {:>9}",
            "policy", "avg JCT s", "median s", "p99 s", "makespan s", "queue s", "util", "jain", "restarts"
        );
        for p in &self.policies {
            let jcts = p.all_jcts();
            let _ = writeln!(
                s,
                "{:<26} {:>10.0} {:>10.0} {:>10.0} {:>11.0} {:>9.0} {:>6.3} {:>6.3} {:>9.2}",
                p.label(),
                p.avg_jct(),
                quantile(&jcts, 0.5),
                quantile(&jcts, 0.99),
                p.over_files(|w| w.run.makespan_s as f64),
                p.over_files(WorkloadReport::avg_queueing),
                p.over_files(|w| w.run.utilisation),
                p.over_files(WorkloadReport::jain),
                p.over_files(WorkloadReport::restarts_per_job),
            );
        }
        s
    }

    /// With datasets: one row per mode, GPU-hours idle in copies, stage-in hours, the share
    /// hidden behind queue wait, stagings and cache hits.
    pub fn data_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<26} {:>10} {:>14} {:>11} {:>8} {:>9} {:>6}",
            "mode", "avg JCT s", "idle GPU-h", "stage-in h", "hidden", "stagings", "hits"
        );
        for p in &self.policies {
            let Some(d) = p.data_stats() else { continue };
            let _ = writeln!(
                s,
                "{:<26} {:>10.0} {:>14.2} {:>11.2} {:>7.1}% {:>9} {:>6}",
                p.label(),
                p.avg_jct(),
                d.copy_idle_gpu_s / 3600.0,
                d.stage_in_s / 3600.0,
                d.hidden_share() * 100.0,
                d.stagings,
                d.hits,
            );
        }
        s
    }

    /// `jobs.csv`: one line per (policy, file, job).
    pub fn jobs_csv(&self) -> String {
        let mut s = String::from("policy,file,job,app,team,gpus,submit_s,start_s,end_s,jct_s,restarts\n");
        for p in &self.policies {
            for w in &p.workloads {
                for j in &w.run.jobs {
                    let _ = writeln!(
                        s,
                        "{},{},{},{},{},{},{},{},{},{},{}",
                        p.label(),
                        w.file,
                        j.name,
                        j.app,
                        j.team,
                        j.gpus,
                        j.submit_s,
                        j.start_s,
                        j.end_s,
                        j.jct_s,
                        j.restarts
                    );
                }
            }
        }
        s
    }

    /// `queue.csv`: jobs waiting and GPUs held after each round.
    pub fn queue_csv(&self) -> String {
        let mut s = String::from("policy,file,t_s,waiting_jobs,gpus_allocated\n");
        for p in &self.policies {
            for w in &p.workloads {
                for (t, waiting, gpus) in &w.run.queue {
                    let _ = writeln!(s, "{},{},{t},{waiting},{gpus}", p.label(), w.file);
                }
            }
        }
        s
    }

    /// `summary.csv`: the JSON's numbers, one line per policy.
    pub fn summary_csv(&self) -> String {
        let mut s = String::from(
            "policy,avg_jct_s,median_jct_s,p99_jct_s,makespan_s,avg_queueing_s,utilisation,jain,restarts_per_job\n",
        );
        for p in &self.policies {
            let v = p.json();
            let keys = [
                "avg_jct_s",
                "median_jct_s",
                "p99_jct_s",
                "makespan_s",
                "avg_queueing_s",
                "utilisation",
                "jain",
            ];
            let _ = write!(s, "{}", p.label());
            for k in keys.iter().chain(&["restarts_per_job"]) {
                let _ = write!(s, ",{}", v[*k]);
            }
            s.push('\n');
        }
        s
    }

    /// SVG: CDF of JCT over all jobs, log-scaled x, one line per policy.
    pub fn cdf_svg(&self) -> String {
        let series: Vec<(String, Vec<(f64, f64)>)> = self
            .policies
            .iter()
            .map(|p| {
                let jcts = p.all_jcts();
                let n = jcts.len().max(1) as f64;
                let pts = jcts
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (v.max(1.0).log10(), (i + 1) as f64 / n * 100.0))
                    .collect();
                (format!("{} (mean {:.0} s)", p.label(), p.avg_jct()), pts)
            })
            .collect();
        chart("JCT CDF, all jobs of all files", "JCT (s, log scale)", "jobs finished (%)", &series, true)
    }

    /// SVG: jobs waiting over time (mean over files), one line per policy.
    pub fn queue_svg(&self) -> String {
        let series: Vec<(String, Vec<(f64, f64)>)> = self
            .policies
            .iter()
            .map(|p| {
                let mut by_t: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
                for w in &p.workloads {
                    for (t, waiting, _) in &w.run.queue {
                        let e = by_t.entry(*t).or_default();
                        e.0 += f64::from(*waiting);
                        e.1 += 1.0;
                    }
                }
                let files = p.workloads.len().max(1) as f64;
                let pts = by_t.iter().map(|(t, (sum, _))| (*t as f64 / 3600.0, sum / files)).collect();
                (p.label().to_string(), pts)
            })
            .collect();
        chart("Jobs waiting (mean over files)", "time (h)", "jobs waiting", &series, false)
    }
}

const COLORS: [&str; 6] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];

fn chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
) -> String {
    let (w, h, left, right, top, bottom) = (820.0, 480.0, 70.0, 230.0, 40.0, 60.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (x0, x1, y1) = pts.fold((f64::INFINITY, f64::NEG_INFINITY, 0.0f64), |(a, b, c), p| {
        (a.min(p.0), b.max(p.0), c.max(p.1))
    });
    let (x0, x1) = if x0.is_finite() && x1 > x0 { (x0.floor(), x1.ceil()) } else { (0.0, 1.0) };
    let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
    let sx = |x: f64| left + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| top + (1.0 - y / y1) * ph;
    let mut s = crate::svg::open(w, h, title, left + pw / 2.0);
    let _ =
        writeln!(s, r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
    for k in 0..=4 {
        let y = y1 * f64::from(k) / 4.0;
        let _ =
            writeln!(s, r#"<text x="{}" y="{:.1}" text-anchor="end">{y:.0}</text>"#, left - 6.0, sy(y) + 4.0);
    }
    let ticks = if log_x { (x1 - x0) as usize } else { 6 };
    for k in 0..=ticks.max(1) {
        let x = x0 + (x1 - x0) * k as f64 / ticks.max(1) as f64;
        let label = if log_x { format!("{:.0}", 10f64.powf(x)) } else { format!("{x:.1}") };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{label}</text>"#,
            sx(x),
            top + ph + 16.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{x_label}</text>"#,
        left + pw / 2.0,
        h - 12.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">{y_label}</text>"#,
        top + ph / 2.0
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let line: Vec<String> = pts.iter().map(|p| format!("{:.1},{:.1}", sx(p.0), sy(p.1))).collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            line.join(" ")
        );
        let (lx, ly) = (left + pw + 14.0, top + 14.0 + 20.0 * i as f64);
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{name}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// Linear-interpolated quantile of sorted values (numpy's default).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

fn round(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
