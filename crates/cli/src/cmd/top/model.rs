//! What `gantry top` shows, as plain data: the cluster as of the last poll (GPUs, the jobs the
//! caller may see, the queue), each GPU's utilisation history kept here from successive polls,
//! and the view's state (sort, team filter, selection, open log). Keys change the view through
//! [`View::key`]; nothing here does I/O, so the renderer and the keys are tested on values.

use std::collections::{BTreeSet, HashMap, VecDeque};

use gantry_api::types::GpuView;
use gantry_store::{Job, JobId};
use serde_json::Value;

/// Points of history kept per GPU (one per poll).
pub const HISTORY: usize = 60;

/// One GPU as a row.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRow {
    pub node: String,
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub health: String,
    /// Percent, when the GPU reported one.
    pub util: Option<f64>,
    pub mem_used_mib: u64,
    pub mem_total_mib: u64,
    /// Finding kinds (`idle_allocated`, `thermal_throttle`, …).
    pub findings: Vec<String>,
    /// Jobs holding it that the caller may see (the API leaves the others out).
    pub jobs: Vec<JobId>,
    /// Utilisation of the last polls, oldest first, percent.
    pub history: Vec<u64>,
}

impl GpuRow {
    /// Memory used, percent of the GPU's memory.
    pub fn mem_pct(&self) -> f64 {
        if self.mem_total_mib == 0 {
            0.0
        } else {
            100.0 * self.mem_used_mib as f64 / self.mem_total_mib as f64
        }
    }

    fn from_view(v: &GpuView) -> Self {
        let sample = v.gpu.sample.as_ref();
        let reading = sample.and_then(|s| s.get("sample"));
        let num = |key: &str| reading.and_then(|r| r.get(key)).and_then(Value::as_f64);
        let findings = sample
            .and_then(|s| s.get("findings"))
            .and_then(Value::as_array)
            .map(|f| f.iter().filter_map(|f| f.get("kind")?.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        Self {
            node: v.gpu.node_id.clone(),
            index: v.gpu.info.index,
            uuid: v.gpu.info.uuid.clone(),
            model: v.gpu.info.model.clone(),
            health: v.gpu.health.to_string(),
            util: num("gpu_util_percent"),
            mem_used_mib: num("memory_used_bytes").map_or(0, |b| (b / 1_048_576.0) as u64),
            mem_total_mib: v.gpu.info.memory_mib,
            findings,
            jobs: v.holders.iter().map(|h| h.job_id).collect(),
            history: Vec::new(),
        }
    }
}

/// One poll of the API.
#[derive(Debug, Clone, Default)]
pub struct Poll {
    pub gpus: Vec<GpuView>,
    /// Scheduled and running jobs the caller may see.
    pub active: Vec<Job>,
    /// Pending jobs the caller may see, oldest first.
    pub pending: Vec<Job>,
}

/// The cluster as the last polls showed it.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// `server · user · role`, for the title.
    pub title: String,
    pub gpus: Vec<GpuRow>,
    /// Active jobs by id.
    pub jobs: HashMap<JobId, Job>,
    pub queue: Vec<Job>,
    /// Mean utilisation of the shown GPUs over the last polls, percent.
    pub mean_history: VecDeque<u64>,
    /// The last poll's failure, shown until one succeeds.
    pub error: Option<String>,
    history: HashMap<String, VecDeque<u64>>,
}

impl Model {
    /// Takes in a poll, extending each GPU's history.
    pub fn apply(&mut self, poll: Poll) {
        let mut gpus: Vec<GpuRow> = poll.gpus.iter().map(GpuRow::from_view).collect();
        for g in &mut gpus {
            let h = self.history.entry(g.uuid.clone()).or_default();
            h.push_back(g.util.map_or(0, |u| u.round().clamp(0.0, 100.0) as u64));
            while h.len() > HISTORY {
                h.pop_front();
            }
            g.history = h.iter().copied().collect();
        }
        let live: BTreeSet<&str> = gpus.iter().map(|g| g.uuid.as_str()).collect();
        self.history.retain(|k, _| live.contains(k.as_str()));
        let utils: Vec<f64> = gpus.iter().filter_map(|g| g.util).collect();
        let mean = if utils.is_empty() { 0.0 } else { utils.iter().sum::<f64>() / utils.len() as f64 };
        self.mean_history.push_back(mean.round() as u64);
        while self.mean_history.len() > HISTORY {
            self.mean_history.pop_front();
        }
        self.gpus = gpus;
        self.jobs = poll.active.into_iter().map(|j| (j.id, j)).collect();
        self.queue = poll.pending;
        self.error = None;
    }

    /// Teams of the jobs in view, for the filter.
    pub fn teams(&self) -> Vec<String> {
        let set: BTreeSet<&str> = self.jobs.values().chain(&self.queue).map(|j| j.team.as_str()).collect();
        set.into_iter().map(str::to_owned).collect()
    }

    /// The team a GPU works for (its first visible holder's), if any.
    pub fn team_of(&self, g: &GpuRow) -> Option<&str> {
        g.jobs.iter().find_map(|id| self.jobs.get(id)).map(|j| j.team.as_str())
    }
}

/// How the GPU table is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sort {
    /// Busiest first.
    #[default]
    Util,
    /// Most memory used first.
    Memory,
    /// By node, then index.
    Node,
}

impl Sort {
    pub fn name(self) -> &'static str {
        match self {
            Sort::Util => "utilisation",
            Sort::Memory => "memory",
            Sort::Node => "node",
        }
    }

    fn next(self) -> Self {
        match self {
            Sort::Util => Sort::Memory,
            Sort::Memory => Sort::Node,
            Sort::Node => Sort::Util,
        }
    }
}

/// A job's output as the log pane shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogPane {
    pub job: JobId,
    /// Bytes of stdout read so far (the next offset).
    pub offset: u64,
    /// The last lines read.
    pub lines: VecDeque<String>,
    /// Bytes not yet ending in a newline.
    pub partial: String,
}

/// Lines the log pane keeps.
pub const LOG_LINES: usize = 2000;

impl LogPane {
    /// Appends output read at `at` (the server's offset, past rotated-away bytes).
    pub fn append(&mut self, at: u64, bytes: &[u8]) {
        if at > self.offset {
            self.lines.push_back(format!("[… {} bytes rotated away …]", at - self.offset));
        }
        self.offset = at + bytes.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(bytes));
        while let Some(nl) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=nl).collect();
            self.lines.push_back(line.trim_end_matches(['\n', '\r']).to_owned());
        }
        while self.lines.len() > LOG_LINES {
            self.lines.pop_front();
        }
    }
}

/// What the keys have set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    pub sort: Sort,
    /// Only this team's GPUs and queue.
    pub team: Option<String>,
    /// Row of the GPU table under the cursor.
    pub selected: usize,
    /// The open log, if any.
    pub log: Option<LogPane>,
}

/// A key, reduced to what `top` tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Esc,
    Up,
    Down,
    PageUp,
    PageDown,
}

/// What the loop does after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Redraw,
    Quit,
    /// Read the open log's output now.
    ReadLog,
}

impl View {
    /// GPU rows in view: filtered by team, sorted.
    pub fn rows<'m>(&self, model: &'m Model) -> Vec<&'m GpuRow> {
        let mut rows: Vec<&GpuRow> = model
            .gpus
            .iter()
            .filter(|g| self.team.as_deref().is_none_or(|t| model.team_of(g) == Some(t)))
            .collect();
        let by_node = |a: &&GpuRow, b: &&GpuRow| natural(&a.node, &b.node).then(a.index.cmp(&b.index));
        match self.sort {
            Sort::Util => rows.sort_by(|a, b| {
                b.util.unwrap_or(-1.0).total_cmp(&a.util.unwrap_or(-1.0)).then(by_node(a, b))
            }),
            Sort::Memory => rows.sort_by(|a, b| b.mem_pct().total_cmp(&a.mem_pct()).then(by_node(a, b))),
            Sort::Node => rows.sort_by(by_node),
        }
        rows
    }

    /// The queue in view: filtered by team.
    pub fn queue<'m>(&self, model: &'m Model) -> Vec<&'m Job> {
        model.queue.iter().filter(|j| self.team.as_deref().is_none_or(|t| j.team == t)).collect()
    }

    /// Applies a key.
    pub fn key(&mut self, model: &Model, key: Key) -> Action {
        if self.log.is_some() {
            return match key {
                Key::Char('q') => Action::Quit,
                Key::Esc | Key::Char('b') | Key::Char('l') => {
                    self.log = None;
                    Action::Redraw
                }
                _ => Action::Redraw,
            };
        }
        match key {
            Key::Char('q') => return Action::Quit,
            Key::Char('s') => self.sort = self.sort.next(),
            Key::Char('t') => self.team = next_team(&model.teams(), self.team.as_deref()),
            Key::Up | Key::Char('k') => self.selected = self.selected.saturating_sub(1),
            Key::Down | Key::Char('j') => self.selected += 1,
            Key::PageUp => self.selected = self.selected.saturating_sub(10),
            Key::PageDown => self.selected += 10,
            Key::Enter | Key::Char('l') => {
                let job = self.rows(model).get(self.selected).and_then(|g| g.jobs.first().copied());
                if let Some(job) = job {
                    self.log = Some(LogPane { job, ..LogPane::default() });
                    return Action::ReadLog;
                }
            }
            Key::Char(_) | Key::Esc => {}
        }
        self.selected = self.selected.min(self.rows(model).len().saturating_sub(1));
        Action::Redraw
    }
}

/// All teams → the first → … → the last → all teams.
fn next_team(teams: &[String], current: Option<&str>) -> Option<String> {
    match current {
        None => teams.first().cloned(),
        Some(t) => teams.iter().position(|x| x == t).and_then(|i| teams.get(i + 1)).cloned(),
    }
}

/// `node-2` before `node-10`.
pub fn natural(a: &str, b: &str) -> std::cmp::Ordering {
    let split = |s: &str| {
        let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (head, tail) = s.split_at(s.len() - digits);
        (head.to_owned(), tail.parse::<u64>().unwrap_or(0))
    };
    split(a).cmp(&split(b)).then_with(|| a.cmp(b))
}
