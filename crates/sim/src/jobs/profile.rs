//! Measured application profiles: how fast a job runs on a placement, and how much each step is
//! worth. This is the Pollux (OSDI'21) simulator's ground truth, read from
//! `traces/job-profiles/<app>/` (`placements.csv`, `scalability.csv`, `validation-<B>.csv`).
//!
//! - **Speed.** A placement is the tuple of GPUs per node, named by its lexicographically smallest
//!   rotation (`(4,2)` → `24`). When `placements.csv` measured that tuple, step and sync time are
//!   linear in the local batch size between measured points, exactly as scipy's `interp1d`
//!   computes them. Otherwise (in practice ≥ 5 nodes) Pollux interpolates over a 3-D Delaunay
//!   triangulation of (nodes, replicas, local batch); for every query Tiresias can make on the
//!   published T4 workloads we use the values that triangulation gives (`data/pollux-nd-t4.csv`,
//!   from the reference's Appendix A), and for anything else a tensor-product interpolation over
//!   the same points: linear in local batch within a (nodes, replicas) series, then in replicas,
//!   then in nodes. Another valid triangulation moves the published means by ≤ 0.3 %, so the
//!   fallback is within the model's own uncertainty.
//! - **Worth.** Progress is counted in initial-batch-size iterations. A step at global batch `B`
//!   earns `gain = (var + sqr) / (var / scale + sqr)` of them, `scale = B / init`, with the
//!   gradient statistics of the current epoch interpolated linearly in `B` between the two
//!   validated batch sizes around it. Epoch `e` ends at `P(e)`, the smallest progress any
//!   validation run had after `e` epochs; a job is done at `P(max_epochs)`.
//!
//! Queries outside the measured range are clamped to it (the published workloads never make
//! one; other workload sets might, and a clamped estimate beats refusing to simulate).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::trace::{Table, TraceError};

/// The N-D values scipy's default triangulation gives for every Tiresias query on the T4
/// profiles (reference doc, Appendix A).
const ND_T4: &str = include_str!("../../data/pollux-nd-t4.csv");

/// Epochs to completion as the Pollux artifact fixes them per application; other applications
/// run for as many epochs as their shortest validation file records.
const MAX_EPOCHS: [(&str, usize); 6] =
    [("bert", 2), ("cifar10", 100), ("deepspeech2", 80), ("imagenet", 90), ("ncf", 10), ("yolov3", 50)];

/// Applications whose batch size Pollux pins for elastic jobs (`simulator.py:191-192`): ncf runs
/// on one GPU at batch 32,768.
const PINNED_BATCH: [(&str, u64); 1] = [("ncf", 32_768)];

/// Global batch sizes tried per width when an elastic job picks its batch size (Pollux tries 50
/// geometric sizes; the goodput curve is flat near its maximum, so fewer suffice).
const BATCH_CANDIDATES: u32 = 24;

/// Step and sync time as a function of the local batch size, for one placement or one
/// (nodes, replicas) series.
#[derive(Debug, Clone, Default)]
struct Curve {
    x: Vec<f64>,
    step: Vec<f64>,
    sync: Vec<f64>,
}

impl Curve {
    fn from_points(mut points: Vec<(f64, f64, f64)>) -> Self {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        Self {
            x: points.iter().map(|p| p.0).collect(),
            step: points.iter().map(|p| p.1).collect(),
            sync: points.iter().map(|p| p.2).collect(),
        }
    }

    fn covers(&self, q: f64) -> bool {
        self.x.first().is_some_and(|lo| *lo <= q) && self.x.last().is_some_and(|hi| q <= *hi)
    }

    /// scipy `interp1d(kind="linear")`: left insertion index clamped to `[1, n-1]`, so a grid hit
    /// uses the segment to its left (the same value, but the same rounding too).
    fn at(&self, q: f64) -> (f64, f64) {
        let n = self.x.len();
        if n == 1 {
            return (self.step[0], self.sync[0]);
        }
        let q = q.clamp(self.x[0], self.x[n - 1]);
        let i = self.x.partition_point(|x| *x < q).clamp(1, n - 1);
        let f = |y: &[f64]| (y[i] - y[i - 1]) / (self.x[i] - self.x[i - 1]) * (q - self.x[i - 1]) + y[i - 1];
        (f(&self.step), f(&self.sync))
    }
}

/// One validation run: per-epoch progress and gradient statistics at one global batch size.
#[derive(Debug, Clone)]
struct Validation {
    batch: f64,
    progress: Vec<f64>,
    grad_sqr: Vec<f64>,
    grad_var: Vec<f64>,
}

/// A job's batch split on `R` replicas: `atomic` samples per GPU per micro-step, `accum` extra
/// accumulation steps before each optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Local (per-GPU) batch of one micro-step.
    pub atomic: u64,
    /// Gradient-accumulation steps beyond the first.
    pub accum: u64,
}

/// The measured profile of one application.
#[derive(Debug, Clone)]
pub struct Application {
    /// Application name (`cifar10`, …).
    pub name: String,
    /// Smallest validated global batch size.
    pub init_batch: u64,
    /// Largest validated global batch size.
    pub max_batch: u64,
    /// Smallest measured local batch size.
    pub min_local: u64,
    /// Largest local batch size a GPU may take.
    pub max_local: u64,
    /// Epochs to completion.
    pub max_epochs: usize,
    /// `P(e)` for `e = 0..=max_epochs`.
    pub epoch_bounds: Vec<f64>,
    validation: Vec<Validation>,
    placements: HashMap<String, Curve>,
    /// (nodes, replicas) → curve, sorted by nodes then replicas.
    series: Vec<((u32, u32), Curve)>,
    nd_exact: HashMap<(u32, u64, u32), (f64, f64)>,
}

impl Application {
    /// The batch size Pollux pins this application to when elastic, if any (one GPU then).
    pub fn pinned_batch(&self) -> Option<u64> {
        PINNED_BATCH.iter().find(|(name, _)| *name == self.name).map(|(_, b)| *b)
    }

    /// Most GPUs an elastic job of this application can use: its largest batch split into the
    /// smallest local batches (`max_batch / min_local`), one when its batch is pinned.
    pub fn max_replicas(&self) -> u32 {
        if self.pinned_batch().is_some() {
            return 1;
        }
        (self.max_batch / self.min_local.max(1)).clamp(1, u64::from(u32::MAX)) as u32
    }

    /// The split an elastic job picks on `placement` in epoch `epoch`: the global batch size,
    /// between `max(init, min_local × R)` and the largest validated one, with the highest
    /// goodput (throughput × statistical efficiency), as Pollux's jobs re-pick it at every
    /// reallocation and epoch boundary. A pinned application keeps its batch.
    pub fn best_split(&self, placement: &[u32], epoch: usize) -> Split {
        let replicas: u32 = placement.iter().sum();
        if let Some(batch) = self.pinned_batch() {
            return self.split(replicas, batch);
        }
        let r = u64::from(replicas.max(1));
        let lo = self.init_batch.max(self.min_local * r) as f64;
        let hi = self.max_batch as f64;
        if lo >= hi {
            return self.split(replicas, self.max_batch);
        }
        let mut best = (f64::NEG_INFINITY, self.split(replicas, lo as u64));
        for i in 0..BATCH_CANDIDATES {
            let batch = lo * (hi / lo).powf(f64::from(i) / f64::from(BATCH_CANDIDATES - 1));
            let local = batch / r as f64;
            let accum = ((local / self.max_local as f64 - 1e-8).ceil() as u64).max(1) - 1;
            let atomic = ((local / (accum + 1) as f64).floor() as u64).clamp(self.min_local, self.max_local);
            if r * atomic * (accum + 1) > self.max_batch {
                continue;
            }
            let split = Split { atomic, accum };
            let rate = self.rate(placement, split, epoch);
            if rate > best.0 {
                best = (rate, split);
            }
        }
        best.1
    }

    /// Progress needed to finish.
    pub fn total_progress(&self) -> f64 {
        self.epoch_bounds[self.max_epochs]
    }

    /// The fixed-batch split of Tiresias and Optimus (Pollux artifact, `simulator.py:64-83`).
    pub fn split(&self, replicas: u32, batch: u64) -> Split {
        let r = f64::from(replicas.max(1));
        let local = (batch as f64 / r - 1e-8).ceil();
        let mut accum = (local / self.max_local as f64 - 1e-8).ceil() as i64 - 1;
        if replicas == 1 && batch > self.init_batch {
            accum = accum.max(1);
        }
        let accum = accum.max(0) as u64;
        let atomic = (local / (accum + 1) as f64 - 1e-8).ceil() as u64;
        let cap = self.max_batch / (u64::from(replicas.max(1)) * (accum + 1));
        Split { atomic: atomic.min(cap).max(1), accum }
    }

    /// Step and sync time (seconds) of one micro-step of `atomic` samples per GPU on `placement`
    /// (GPUs per node, in allocation order).
    pub fn throughput(&self, placement: &[u32], atomic: u64) -> (f64, f64) {
        let q = atomic as f64;
        if let Some(curve) = placement_id(placement).and_then(|id| self.placements.get(&id)) {
            return curve.at(q);
        }
        let nodes = (placement.len() as u32).min(16);
        let replicas: u32 = placement.iter().sum();
        if let Some(v) = self.nd_exact.get(&(replicas, atomic, nodes)) {
            return *v;
        }
        self.nd_fallback(nodes, replicas, q)
    }

    /// Progress per second of a job with `split` on `placement` during epoch `epoch`.
    pub fn rate(&self, placement: &[u32], split: Split, epoch: usize) -> f64 {
        let replicas: u32 = placement.iter().sum();
        let batch = f64::from(replicas) * split.atomic as f64 * (split.accum + 1) as f64;
        let scale = batch / self.init_batch as f64;
        let (step, sync) = self.throughput(placement, split.atomic);
        let per_step = step + split.accum as f64 * (step - sync);
        let (sqr, var) = self.grad_stats(batch, epoch);
        let gain = (var + sqr) / (var / scale + sqr);
        gain / per_step
    }

    /// Gradient statistics (`grad_sqr`, `grad_var`) at global batch `batch` in epoch `epoch`,
    /// linear in the batch size between the validated sizes around it.
    pub fn grad_stats(&self, batch: f64, epoch: usize) -> (f64, f64) {
        let v = &self.validation;
        let row = |k: usize| {
            let e = epoch.min(v[k].grad_sqr.len() - 1);
            (v[k].grad_sqr[e], v[k].grad_var[e])
        };
        if v.len() == 1 || batch <= v[0].batch {
            return row(0);
        }
        if batch >= v[v.len() - 1].batch {
            return row(v.len() - 1);
        }
        let hi = v.partition_point(|x| x.batch < batch).clamp(1, v.len() - 1);
        let (lo_b, hi_b) = (v[hi - 1].batch, v[hi].batch);
        let ((s_lo, v_lo), (s_hi, v_hi)) = (row(hi - 1), row(hi));
        let mix = |x_lo: f64, x_hi: f64| ((batch - lo_b) * x_hi + (hi_b - batch) * x_lo) / (hi_b - lo_b);
        (mix(s_lo, s_hi), mix(v_lo, v_hi))
    }

    /// Seconds an isolated job needs on `placement` at global batch `batch` (restart excluded);
    /// the oracle behind `srtf` and nothing else.
    pub fn ideal_seconds(&self, placement: &[u32], batch: u64, from_progress: f64, from_epoch: usize) -> f64 {
        let replicas: u32 = placement.iter().sum();
        let split = self.split(replicas, batch);
        let mut total = 0.0;
        let mut progress = from_progress;
        for e in from_epoch..self.max_epochs {
            let end = self.epoch_bounds[e + 1];
            total += (end - progress).max(0.0) / self.rate(placement, split, e);
            progress = end;
        }
        total
    }

    fn nd_fallback(&self, nodes: u32, replicas: u32, q: f64) -> (f64, f64) {
        let mut levels: Vec<u32> = self.series.iter().map(|s| s.0.0).collect();
        levels.dedup();
        let answers: Vec<(u32, (f64, f64))> =
            levels.iter().filter_map(|n| self.at_level(*n, replicas, q).map(|v| (*n, v))).collect();
        let below = answers.iter().rev().find(|a| a.0 <= nodes);
        let above = answers.iter().find(|a| a.0 >= nodes);
        match (below, above) {
            (Some(a), Some(b)) if a.0 != b.0 => {
                let t = f64::from(nodes - a.0) / f64::from(b.0 - a.0);
                (a.1.0 + t * (b.1.0 - a.1.0), a.1.1 + t * (b.1.1 - a.1.1))
            }
            (Some(a), _) => a.1,
            (None, Some(b)) => b.1,
            (None, None) => self.nearest_series(nodes, replicas, q),
        }
    }

    /// Step/sync at `nodes` nodes, linear in replicas between the series that bracket `replicas`.
    fn at_level(&self, nodes: u32, replicas: u32, q: f64) -> Option<(f64, f64)> {
        let level: Vec<&((u32, u32), Curve)> =
            self.series.iter().filter(|s| s.0.0 == nodes && s.1.covers(q)).collect();
        let lo = level.iter().rev().find(|s| s.0.1 <= replicas)?;
        let hi = level.iter().find(|s| s.0.1 >= replicas)?;
        let (a, b) = (lo.1.at(q), hi.1.at(q));
        if lo.0.1 == hi.0.1 {
            return Some(a);
        }
        let t = f64::from(replicas - lo.0.1) / f64::from(hi.0.1 - lo.0.1);
        Some((a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1)))
    }

    fn nearest_series(&self, nodes: u32, replicas: u32, q: f64) -> (f64, f64) {
        let distance = |s: &((u32, u32), Curve)| s.0.0.abs_diff(nodes) * 64 + s.0.1.abs_diff(replicas);
        self.series.iter().min_by_key(|s| distance(s)).map_or((1.0, 0.0), |s| s.1.at(q))
    }
}

/// The name Pollux gives a placement: counts joined as digits, rotated to the lexicographically
/// smallest rotation (not sorted: `(1,3,2)` and `(1,2,3)` are measured separately). `None` when a
/// node holds ten or more GPUs (no table names such placements).
pub fn placement_id(placement: &[u32]) -> Option<String> {
    if placement.is_empty() || placement.iter().any(|c| *c == 0 || *c > 9) {
        return None;
    }
    let n = placement.len();
    let best = (0..n)
        .map(|r| (0..n).map(|i| placement[(r + i) % n]).collect::<Vec<u32>>())
        .min()
        .expect("a non-empty placement has at least one rotation");
    Some(best.iter().map(|c| char::from(b'0' + *c as u8)).collect())
}

/// The profiles of the applications a workload names, for one GPU type.
#[derive(Debug, Clone, Default)]
pub struct Profiles {
    apps: HashMap<String, Application>,
}

impl Profiles {
    /// Loads `apps` from `dir/<app>/`. `suffix` selects a GPU type's files (`placements-<suffix>.csv`);
    /// `None` is Pollux's T4 cluster (the un-suffixed files).
    pub fn load(dir: &Path, suffix: Option<&str>, apps: &[String]) -> Result<Self, TraceError> {
        let mut out = HashMap::new();
        for app in apps {
            if !out.contains_key(app) {
                out.insert(app.clone(), load_app(dir, suffix, app)?);
            }
        }
        Ok(Self { apps: out })
    }

    /// One application's profile.
    pub fn get(&self, app: &str) -> Option<&Application> {
        self.apps.get(app)
    }
}

fn load_app(dir: &Path, suffix: Option<&str>, app: &str) -> Result<Application, TraceError> {
    let base = dir.join(app);
    let file = |stem: &str| match suffix {
        Some(s) => base.join(format!("{stem}-{s}.csv")),
        None => base.join(format!("{stem}.csv")),
    };
    let validation = read_validation(&base)?;
    let (placements, grouped) = read_placements(&file("placements"))?;
    let scalability = read_scalability(&file("scalability"))?;
    let shortest = validation.iter().map(|v| v.progress.len()).min().unwrap_or(0);
    let max_epochs =
        MAX_EPOCHS.iter().find(|(name, _)| *name == app).map_or(shortest, |(_, e)| *e).min(shortest);
    let mut epoch_bounds = vec![0.0];
    for e in 1..=max_epochs {
        epoch_bounds.push(validation.iter().map(|v| v.progress[e - 1]).fold(f64::INFINITY, f64::min));
    }
    let locals = placements.values().flat_map(|c| c.x.iter().copied());
    let (min_local, max_local) = locals.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let max_local = if app == "yolov3" { 8.0 } else { max_local };
    let mut series: Grouped = grouped;
    for (key, point) in scalability {
        series.entry(key).or_default().push(point);
    }
    let mut series: Vec<((u32, u32), Curve)> =
        series.into_iter().map(|(k, v)| (k, Curve::from_points(v))).collect();
    series.sort_by_key(|s| s.0);
    let nd_exact = if suffix.is_none() { nd_table(app) } else { HashMap::new() };
    Ok(Application {
        name: app.to_string(),
        init_batch: validation[0].batch as u64,
        max_batch: validation[validation.len() - 1].batch as u64,
        min_local: min_local as u64,
        max_local: max_local as u64,
        max_epochs,
        epoch_bounds,
        validation,
        placements,
        series,
        nd_exact,
    })
}

fn read_validation(base: &Path) -> Result<Vec<Validation>, TraceError> {
    let entries = std::fs::read_dir(base).map_err(|error| TraceError::Io { path: base.into(), error })?;
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let batch = name.strip_prefix("validation-").and_then(|s| s.strip_suffix(".csv"));
        if let Some(batch) = batch.and_then(|b| b.parse::<u64>().ok()) {
            files.push((batch, entry.path()));
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(TraceError::NoRows { path: base.join("validation-<batch>.csv") });
    }
    let mut out = Vec::new();
    for (batch, path) in files {
        let mut table = Table::open(&path, &["progress", "grad_sqr", "grad_var"])?;
        let (mut progress, mut grad_sqr, mut grad_var) = (Vec::new(), Vec::new(), Vec::new());
        while let Some(row) = table.next_row()? {
            progress.push(row.float("progress")?);
            grad_sqr.push(row.float("grad_sqr")?);
            grad_var.push(row.float("grad_var")?);
        }
        let progress = table.finish(progress)?;
        out.push(Validation { batch: batch as f64, progress, grad_sqr, grad_var });
    }
    Ok(out)
}

/// (local batch, step time, sync time).
type Point = (f64, f64, f64);

/// (nodes, replicas) → measured points.
type Grouped = HashMap<(u32, u32), Vec<Point>>;

/// Reads `placements.csv`: one curve per placement id, and the means grouped by
/// (nodes, replicas, local batch) that feed the N-D interpolation.
fn read_placements(path: &Path) -> Result<(HashMap<String, Curve>, Grouped), TraceError> {
    let mut table = Table::open(path, &["placement", "local_bsz", "step_time", "sync_time"])?;
    let mut raw: HashMap<String, Vec<(f64, f64, f64)>> = HashMap::new();
    while let Some(row) = table.next_row()? {
        let id = row.text("placement")?.trim().to_string();
        if id.is_empty() || !id.bytes().all(|b| (b'1'..=b'9').contains(&b)) {
            return Err(row.bad("placement", format!("expected GPUs per node as digits, found `{id}`")));
        }
        let point = (row.float("local_bsz")?, row.float("step_time")?, row.float("sync_time")?);
        raw.entry(id).or_default().push(point);
    }
    let raw = table.finish(raw.into_iter().collect::<Vec<_>>())?;
    let mut sums: HashMap<(u32, u32, u64), (f64, f64, u32)> = HashMap::new();
    for (id, points) in &raw {
        let nodes = id.len() as u32;
        let replicas: u32 = id.bytes().map(|b| u32::from(b - b'0')).sum();
        for (x, step, sync) in points {
            let e = sums.entry((nodes, replicas, x.to_bits())).or_insert((0.0, 0.0, 0));
            *e = (e.0 + step, e.1 + sync, e.2 + 1);
        }
    }
    let mut grouped: Grouped = HashMap::new();
    for ((nodes, replicas, x), (step, sync, n)) in sums {
        let n = f64::from(n);
        grouped.entry((nodes, replicas)).or_default().push((f64::from_bits(x), step / n, sync / n));
    }
    let curves = raw.into_iter().map(|(id, points)| (id, Curve::from_points(points))).collect();
    Ok((curves, grouped))
}

/// (nodes, replicas) and one measured point.
type SeriesPoint = ((u32, u32), Point);

fn read_scalability(path: &Path) -> Result<Vec<SeriesPoint>, TraceError> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let columns = ["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"];
    let mut table = Table::open(path, &columns)?;
    let mut out = Vec::new();
    while let Some(row) = table.next_row()? {
        let key = (row.int("num_nodes")? as u32, row.int("num_replicas")? as u32);
        out.push((key, (row.float("local_bsz")?, row.float("step_time")?, row.float("sync_time")?)));
    }
    Ok(out)
}

fn nd_table(app: &str) -> HashMap<(u32, u64, u32), (f64, f64)> {
    let mut out = HashMap::new();
    for line in ND_T4.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 6 || f[0] != app {
            continue;
        }
        let parsed = (f[1].parse(), f[2].parse(), f[3].parse(), f[4].parse(), f[5].parse());
        if let (Ok(r), Ok(a), Ok(n), Ok(step), Ok(sync)) = parsed {
            out.insert((r, a, n), (step, sync));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_ids_are_the_smallest_rotation_not_the_sorted_tuple() {
        assert_eq!(placement_id(&[4, 2]).as_deref(), Some("24"));
        assert_eq!(placement_id(&[3, 2, 1]).as_deref(), Some("132"));
        assert_eq!(placement_id(&[4, 4, 4]).as_deref(), Some("444"));
        assert_eq!(placement_id(&[12]), None);
    }

    #[test]
    fn interpolation_at_a_grid_point_uses_the_segment_to_its_left() {
        let c = Curve::from_points(vec![(1.0, 1.0, 0.0), (2.0, 3.0, 0.0), (4.0, 4.0, 0.0)]);
        assert_eq!(c.at(2.0).0, 3.0);
        assert_eq!(c.at(3.0).0, 3.5);
        assert_eq!(c.at(9.0).0, 4.0, "clamped above the measured range");
    }
}
