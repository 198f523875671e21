//! Readers for the Alibaba openb node and pod lists (the FGD benchmark's input).
//!
//! Columns are found by header name, so extra or reordered columns are fine. Any malformed row
//! is a [`TraceError`] naming the file, line and column; nothing here panics.

use std::fs::File;
use std::path::{Path, PathBuf};

use gantry_core::NodeSpec;

/// Why a trace file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{path}: cannot read: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause (part of the message, so it is said once).
        error: std::io::Error,
    },
    /// The file has no header line.
    #[error("{path}:1: empty file, expected a CSV header line")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The header lacks a required column.
    #[error("{path}:1: missing column `{column}` in the header")]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The column.
        column: &'static str,
    },
    /// A value could not be parsed or is out of range.
    #[error("{path}:{line}: column `{column}`: {message}")]
    BadValue {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// The column.
        column: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The CSV itself is malformed (e.g. a row with too few fields).
    #[error("{path}:{line}: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A header but no rows.
    #[error("{path}:2: no data rows after the header")]
    NoRows {
        /// The file.
        path: PathBuf,
    },
}

/// One pod (task) of a pod list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRow {
    /// Task name.
    pub name: String,
    /// CPU request, milli-cores.
    pub cpu_milli: u64,
    /// Memory request, MiB.
    pub memory_mib: u64,
    /// GPUs requested.
    pub num_gpu: u32,
    /// Per-GPU share, milli-GPU (1000 for multi-GPU tasks, 0 for CPU-only).
    pub gpu_milli: u32,
    /// Allowed GPU models (empty = any).
    pub gpu_spec: Vec<String>,
}

/// Reads a node list (`sn,cpu_milli,memory_mib,gpu,model`).
pub fn read_nodes(path: &Path) -> Result<Vec<NodeSpec>, TraceError> {
    let mut table = Table::open(path, &["sn", "cpu_milli", "memory_mib", "gpu", "model"])?;
    let mut nodes = Vec::new();
    while let Some(row) = table.next_row()? {
        let gpus = row.int("gpu")? as u32;
        let model = row.text("model")?.trim().to_string();
        if gpus > 0 && model.is_empty() {
            return Err(row.bad("model", "a node with GPUs needs a model".into()));
        }
        nodes.push(NodeSpec {
            name: row.text("sn")?.trim().to_string(),
            cpu_milli: row.int("cpu_milli")?,
            memory_mib: row.int("memory_mib")?,
            gpus,
            gpu_model: (gpus > 0).then_some(model),
            gpu_memory_mib: 0,
        });
    }
    table.finish(nodes)
}

/// Reads a pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...`).
///
/// `gpu_milli` is clamped to 1000; multi-GPU tasks take whole GPUs whatever it says (the trace
/// documents it as meaningful for single-GPU tasks only).
pub fn read_pods(path: &Path) -> Result<Vec<PodRow>, TraceError> {
    let mut table = Table::open(path, &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"])?;
    table.optional("gpu_spec");
    let mut pods = Vec::new();
    while let Some(row) = table.next_row()? {
        let num_gpu = row.int("num_gpu")? as u32;
        let raw_milli = row.int("gpu_milli")?.min(1000) as u32;
        let gpu_milli = match num_gpu {
            0 => 0,
            1 if raw_milli == 0 => {
                return Err(row.bad("gpu_milli", "a task with a GPU needs a share of 1 to 1000".into()));
            }
            1 => raw_milli,
            _ => 1000,
        };
        let spec = if row.has("gpu_spec") { row.text("gpu_spec")? } else { "" };
        pods.push(PodRow {
            name: row.text("name")?.trim().to_string(),
            cpu_milli: row.int("cpu_milli")?,
            memory_mib: row.int("memory_mib")?,
            num_gpu,
            gpu_milli,
            gpu_spec: spec.split('|').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect(),
        });
    }
    table.finish(pods)
}

/// A CSV file with named columns (shared with the job-trace readers in [`crate::jobs`]).
pub(crate) struct Table {
    path: PathBuf,
    reader: csv::Reader<File>,
    columns: Vec<(&'static str, usize)>,
    headers: csv::StringRecord,
    record: csv::StringRecord,
    rows: usize,
}

impl Table {
    pub(crate) fn open(path: &Path, required: &[&'static str]) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|error| TraceError::Io { path: path.into(), error })?;
        let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(file);
        let headers = reader.headers().map_err(|e| csv_error(path, &e))?.clone();
        if headers.iter().all(|h| h.trim().is_empty()) {
            return Err(TraceError::Empty { path: path.into() });
        }
        let mut columns = Vec::new();
        for column in required {
            let index = headers
                .iter()
                .position(|h| h.trim() == *column)
                .ok_or(TraceError::MissingColumn { path: path.into(), column })?;
            columns.push((*column, index));
        }
        Ok(Self { path: path.into(), reader, columns, headers, record: csv::StringRecord::new(), rows: 0 })
    }

    /// Adds a column that may be absent (e.g. `gpu_spec` in the multigpu pod lists).
    pub(crate) fn optional(&mut self, column: &'static str) {
        if let Some(index) = self.headers.iter().position(|h| h.trim() == column) {
            self.columns.push((column, index));
        }
    }

    pub(crate) fn next_row(&mut self) -> Result<Option<Row<'_>>, TraceError> {
        match self.reader.read_record(&mut self.record) {
            Ok(false) => Ok(None),
            Ok(true) => {
                self.rows += 1;
                let line = self.record.position().map_or(0, |p| p.line());
                Ok(Some(Row { table: self, line }))
            }
            Err(e) => Err(csv_error(&self.path, &e)),
        }
    }

    pub(crate) fn finish<T>(self, rows: Vec<T>) -> Result<Vec<T>, TraceError> {
        if self.rows == 0 {
            return Err(TraceError::NoRows { path: self.path });
        }
        Ok(rows)
    }
}

pub(crate) struct Row<'a> {
    table: &'a Table,
    line: u64,
}

impl Row<'_> {
    pub(crate) fn has(&self, column: &'static str) -> bool {
        self.table.columns.iter().any(|c| c.0 == column)
    }

    pub(crate) fn text(&self, column: &'static str) -> Result<&str, TraceError> {
        let index = self.table.columns.iter().find(|c| c.0 == column).map(|c| c.1);
        index
            .and_then(|i| self.table.record.get(i))
            .ok_or_else(|| self.bad(column, "value missing (row has too few fields)".into()))
    }

    pub(crate) fn int(&self, column: &'static str) -> Result<u64, TraceError> {
        let text = self.text(column)?.trim();
        text.parse::<u64>().map_err(|_| {
            self.bad(
                column,
                format!("expected a non-negative integer, found `{text}`")
                    .replace("found ``", "found an empty value"),
            )
        })
    }

    /// A finite number (integers and decimals alike, e.g. Sia's `401.0` submission times).
    pub(crate) fn float(&self, column: &'static str) -> Result<f64, TraceError> {
        let text = self.text(column)?.trim();
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(self.bad(column, format!("expected a number, found `{text}`"))),
        }
    }

    pub(crate) fn bad(&self, column: &'static str, message: String) -> TraceError {
        TraceError::BadValue { path: self.table.path.clone(), line: self.line, column, message }
    }
}

fn csv_error(path: &Path, e: &csv::Error) -> TraceError {
    let line = e.position().map_or(1, |p| p.line());
    let message = match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("expected {expected_len} fields like the header, found {len}")
        }
        _ => e.to_string(),
    };
    TraceError::Malformed { path: path.into(), line, message }
}
