//! How long a job runs on another GPU model.
//!
//! Two sources, in this order: the cluster's own history, where the same job (its `job_type`
//! label, else its name, else its command) ran on both models, and a speed table
//! (`--speedups FILE`). The history wins because it measured this cluster's jobs on this
//! cluster's hardware; the table covers the models the cluster never had. A job neither knows
//! keeps its run time and is counted, so a report can say how much of it is a guess.
//!
//! The table is a CSV of measured throughputs, one row per job type and model:
//! `job_type,gpu_model,throughput` (any unit, the same within a job type). Gavel's table
//! (OSDI'20, `testdata/speedups/gavel.csv`) ships in this format. A job matches a job type when
//! their names agree ignoring case and punctuation, or, when no job type agrees so, the job's name starts with the job
//! type's name before its parenthesis (`resnet18-seed3` matches `ResNet-18 (batch size 32)`);
//! several matching rows are averaged geometrically.

use std::collections::HashMap;
use std::path::Path;

use gantry_core::resources::model_matches;

/// Measured throughputs: job type → (model, throughput).
#[derive(Debug, Clone, Default)]
pub struct SpeedTable {
    rows: Vec<(String, String, f64)>,
}

/// Where a run time on another model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpeedSource {
    /// The job runs on the model it ran on.
    Same,
    /// The cluster's history measured it on both models.
    History,
    /// The speed table.
    Table,
    /// Nothing knew: the run time is kept.
    Unknown,
}

/// A speed table that cannot be read, in a sentence.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SpeedError(pub String);

fn normal(s: &str) -> String {
    s.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect()
}

impl SpeedTable {
    /// Reads `job_type,gpu_model,throughput` rows.
    pub fn read(path: &Path) -> Result<Self, SpeedError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SpeedError(format!("cannot read the speed table {}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| SpeedError(format!("{}: {}", path.display(), e.0)))
    }

    /// Parses the CSV text of [`SpeedTable::read`].
    pub fn parse(text: &str) -> Result<Self, SpeedError> {
        let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(text.as_bytes());
        let headers = reader.headers().map_err(|e| SpeedError(format!("bad header: {e}")))?.clone();
        let col = |name: &str| {
            headers.iter().position(|h| h == name).ok_or_else(|| {
                SpeedError(format!(
                    "the header must name job_type, gpu_model and throughput; `{name}` is missing"
                ))
            })
        };
        let (jt, gm, tp) = (col("job_type")?, col("gpu_model")?, col("throughput")?);
        let mut rows = Vec::new();
        for (line, record) in reader.records().enumerate() {
            let record = record.map_err(|e| SpeedError(format!("line {}: {e}", line + 2)))?;
            let get = |i: usize| record.get(i).unwrap_or("").to_string();
            let throughput: f64 =
                get(tp).parse().ok().filter(|t: &f64| t.is_finite() && *t > 0.0).ok_or_else(|| {
                    SpeedError(format!("line {}: throughput must be a positive number", line + 2))
                })?;
            rows.push((get(jt), get(gm), throughput));
        }
        if rows.is_empty() {
            return Err(SpeedError("the speed table has no rows".into()));
        }
        Ok(Self { rows })
    }

    /// How many times faster `key` runs on `to` than on `from`, when the table knows both.
    pub fn speedup(&self, key: &str, from: &str, to: &str) -> Option<f64> {
        let key = normal(key);
        let exact = self.rows.iter().any(|(job_type, _, _)| normal(job_type) == key);
        let matches = |job_type: &str| {
            let base = normal(job_type.split('(').next().unwrap_or(job_type));
            normal(job_type) == key || (!exact && !base.is_empty() && key.starts_with(&base))
        };
        let mut by_type: HashMap<&str, (Option<f64>, Option<f64>)> = HashMap::new();
        for (job_type, model, throughput) in &self.rows {
            if !matches(job_type) {
                continue;
            }
            let entry = by_type.entry(job_type.as_str()).or_default();
            if model_matches(model, from) {
                entry.0 = Some(*throughput);
            }
            if model_matches(model, to) {
                entry.1 = Some(*throughput);
            }
        }
        let ratios: Vec<f64> =
            by_type.values().filter_map(|(f, t)| Some(t.as_ref()? / f.as_ref()?)).collect();
        (!ratios.is_empty()).then(|| (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp())
    }
}

/// Run times measured on the cluster: job key → model → median run time, s.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    runs: HashMap<String, HashMap<String, Vec<f64>>>,
}

impl Observed {
    /// Records that `key` ran `run_s` on `model`.
    pub fn record(&mut self, key: &str, model: &str, run_s: f64) {
        self.runs.entry(key.to_string()).or_default().entry(model.to_string()).or_default().push(run_s);
    }

    fn median(&self, key: &str, model: &str) -> Option<f64> {
        let runs =
            self.runs.get(key)?.iter().find(|(m, _)| model_matches(m, model) || model_matches(model, m))?.1;
        let mut v = runs.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }
}

/// Both sources together.
#[derive(Debug, Clone, Default)]
pub struct SpeedModel {
    /// The cluster's own measurements.
    pub observed: Observed,
    /// The speed table, when one was given.
    pub table: Option<SpeedTable>,
}

impl SpeedModel {
    /// `run_s` measured on `from`, as it would be on `to`, and where the figure came from.
    pub fn run_s(&self, key: &str, run_s: f64, from: &str, to: &str) -> (f64, SpeedSource) {
        if model_matches(from, to) || model_matches(to, from) {
            return (run_s, SpeedSource::Same);
        }
        if let (Some(f), Some(t)) = (self.observed.median(key, from), self.observed.median(key, to))
            && f > 0.0
        {
            return (run_s * t / f, SpeedSource::History);
        }
        if let Some(speedup) = self.table.as_ref().and_then(|t| t.speedup(key, from, to)) {
            return (run_s / speedup, SpeedSource::Table);
        }
        (run_s, SpeedSource::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "job_type,gpu_model,throughput\n\
        ResNet-18 (batch size 32),v100,30\nResNet-18 (batch size 32),k80,10\n\
        ResNet-18 (batch size 64),v100,40\nResNet-18 (batch size 64),k80,10\n\
        Transformer (batch size 64),v100,8\n";

    #[test]
    fn the_table_matches_job_types_by_name_and_averages_batch_sizes_geometrically() {
        let t = SpeedTable::parse(TABLE).expect("valid");
        let s = t.speedup("resnet18-seed3", "Tesla K80", "NVIDIA V100-SXM2").expect("valid");
        assert!((s - (3.0f64 * 4.0).sqrt()).abs() < 1e-9, "{s}");
        assert_eq!(t.speedup("ResNet-18 (batch size 64)", "K80", "V100"), Some(4.0));
        assert_eq!(t.speedup("transformer", "K80", "V100"), None, "no K80 row for it");
        assert_eq!(t.speedup("bert", "K80", "V100"), None);
    }

    #[test]
    fn history_wins_over_the_table_and_unknown_jobs_keep_their_run_time() {
        let mut model =
            SpeedModel { table: Some(SpeedTable::parse(TABLE).expect("valid")), ..Default::default() };
        model.observed.record("resnet18", "K80", 100.0);
        model.observed.record("resnet18", "V100", 50.0);
        assert_eq!(model.run_s("resnet18", 80.0, "K80", "V100"), (40.0, SpeedSource::History));
        let (s, src) = model.run_s("resnet18-b", 120.0, "K80", "V100");
        assert_eq!(src, SpeedSource::Table);
        assert!((s - 120.0 / 12f64.sqrt()).abs() < 1e-9);
        assert_eq!(model.run_s("bert", 7.0, "K80", "V100"), (7.0, SpeedSource::Unknown));
        assert_eq!(model.run_s("bert", 7.0, "V100", "NVIDIA V100"), (7.0, SpeedSource::Same));
    }

    #[test]
    fn bad_tables_say_what_is_wrong() {
        assert!(SpeedTable::parse("a,b\n1,2\n").expect_err("refused").0.contains("job_type"));
        assert!(
            SpeedTable::parse("job_type,gpu_model,throughput\nx,v100,-1\n")
                .expect_err("refused")
                .0
                .contains("line 2")
        );
        assert!(
            SpeedTable::parse("job_type,gpu_model,throughput\n").expect_err("refused").0.contains("no rows")
        );
    }
}
