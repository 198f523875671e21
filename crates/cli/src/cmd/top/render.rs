//! Drawing `gantry top`: a pure function from the [`Model`], the [`View`] and the time to a
//! frame. A title line, the fleet's mean utilisation as a sparkline, one row per GPU (node,
//! utilisation and memory bars, its own sparkline, the job holding it, findings), the queue
//! with why each job waits, and the keys. With a log open, the job's output fills the body.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Sparkline, Table, TableState};

use super::model::{GpuRow, LogPane, Model, View};

const SPARK: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// Points of a GPU's sparkline in its row.
const ROW_SPARK: usize = 16;

/// Draws the whole screen.
pub fn render(frame: &mut Frame, model: &Model, view: &View, now_ms: i64) {
    let [title, body, keys] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(3), Constraint::Length(1)])
            .areas(frame.area());
    frame.render_widget(Paragraph::new(title_line(model)), title);
    frame.render_widget(Paragraph::new(keys_line(view)).style(Style::new().fg(Color::DarkGray)), keys);
    if let Some(log) = &view.log {
        render_log(frame, body, model, log);
        return;
    }
    let queue = view.queue(model);
    let queue_height = (queue.len() as u16 + 3).clamp(4, (body.height / 3).max(4));
    let [spark, gpus, waiting] =
        Layout::vertical([Constraint::Length(4), Constraint::Min(3), Constraint::Length(queue_height)])
            .areas(body);
    let mean: Vec<u64> = model.mean_history.iter().copied().collect();
    let last = mean.last().copied().unwrap_or(0);
    frame.render_widget(
        Sparkline::default()
            .block(Block::new().borders(Borders::TOP).title(format!(" mean utilisation {last}% ")))
            .data(&mean)
            .max(100)
            .style(Style::new().fg(Color::Cyan)),
        spark,
    );
    render_gpus(frame, gpus, model, view);
    render_queue(frame, waiting, &queue, now_ms);
}

fn title_line(model: &Model) -> Line<'_> {
    let nodes: std::collections::BTreeSet<&str> = model.gpus.iter().map(|g| g.node.as_str()).collect();
    let held = model.gpus.iter().filter(|g| !g.jobs.is_empty()).count();
    let mut spans = vec![
        Span::styled(" gantry top ", Style::new().add_modifier(Modifier::REVERSED)),
        Span::raw(format!(
            " {} · {} GPUs on {} nodes · {held} held by visible jobs · {} running · {} pending",
            model.title,
            model.gpus.len(),
            nodes.len(),
            model.jobs.len(),
            model.queue.len(),
        )),
    ];
    if let Some(e) = &model.error {
        spans.push(Span::styled(format!(" · {e}"), Style::new().fg(Color::Red)));
    }
    Line::from(spans)
}

fn keys_line(view: &View) -> &'static str {
    if view.log.is_some() {
        " Esc/l back · q quit"
    } else {
        " s sort (util/mem/node) · t team · ↑↓ select · Enter/l job log · q quit"
    }
}

/// A bar of `width` cells for `pct` percent, then the number.
pub fn bar(pct: f64, width: usize) -> String {
    let filled = ((pct.clamp(0.0, 100.0) / 100.0) * width as f64).round() as usize;
    format!("{}{} {:>3.0}%", "█".repeat(filled), "░".repeat(width - filled), pct.clamp(0.0, 100.0))
}

/// The last `n` points as block characters.
pub fn sparkline(points: &[u64], n: usize) -> String {
    let tail = &points[points.len().saturating_sub(n)..];
    let mut s: String = tail.iter().map(|&p| SPARK[((p.min(100) * 8 + 50) / 100) as usize]).collect();
    while s.chars().count() < n {
        s.insert(0, ' ');
    }
    s
}

fn level(pct: f64) -> Color {
    if pct >= 80.0 {
        Color::Green
    } else if pct >= 30.0 {
        Color::Yellow
    } else {
        Color::DarkGray
    }
}

fn gpu_row<'a>(model: &'a Model, g: &'a GpuRow) -> Row<'a> {
    let util = g.util.unwrap_or(0.0);
    let job = match g.jobs.first() {
        None => String::new(),
        Some(id) => match model.jobs.get(id) {
            Some(j) => format!("#{} {} ({})", j.id, j.name, j.team),
            None => format!("#{id}"),
        },
    };
    let mut notes: Vec<&str> = g.findings.iter().map(String::as_str).collect();
    if g.health != "healthy" {
        notes.insert(0, &g.health);
    }
    Row::new(vec![
        Cell::from(g.node.as_str()),
        Cell::from(g.index.to_string()),
        Cell::from(g.model.trim_start_matches("NVIDIA ")),
        Cell::from(if g.util.is_some() { bar(util, 10) } else { "no reading".into() })
            .style(Style::new().fg(level(util))),
        Cell::from(bar(g.mem_pct(), 10)).style(Style::new().fg(level(g.mem_pct()))),
        Cell::from(sparkline(&g.history, ROW_SPARK)).style(Style::new().fg(Color::Cyan)),
        Cell::from(job),
        Cell::from(notes.join(",")).style(Style::new().fg(Color::Red)),
    ])
}

fn render_gpus(frame: &mut Frame, area: Rect, model: &Model, view: &View) {
    let rows = view.rows(model);
    let header = Row::new(["NODE", "GPU", "MODEL", "UTIL", "MEMORY", "HISTORY", "JOB", "NOTES"])
        .style(Style::new().add_modifier(Modifier::BOLD));
    let widths = [
        Constraint::Length(12),
        Constraint::Length(3),
        Constraint::Length(16),
        Constraint::Length(15),
        Constraint::Length(15),
        Constraint::Length(ROW_SPARK as u16),
        Constraint::Fill(2),
        Constraint::Fill(1),
    ];
    let team = view.team.as_deref().unwrap_or("all");
    let title = format!(" GPUs ({}) · sort {} · team {team} ", rows.len(), view.sort.name());
    let table = Table::new(rows.iter().map(|g| gpu_row(model, g)), widths)
        .header(header)
        .block(Block::new().borders(Borders::TOP).title(title))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("▶ ");
    let mut state = TableState::default().with_selected((!rows.is_empty()).then_some(view.selected));
    frame.render_stateful_widget(table, area, &mut state);
}

fn render_queue(frame: &mut Frame, area: Rect, queue: &[&gantry_store::Job], now_ms: i64) {
    let rows = queue.iter().map(|j| {
        let gpus = if let Some(max) = j.request.gpus_max {
            format!("{}..{max}", j.request.gpus)
        } else if j.request.gpus > 0 {
            j.request.gpus.to_string()
        } else if j.request.gpu_memory_mib > 0 {
            format!("{} MiB", j.request.gpu_memory_mib)
        } else {
            "0".into()
        };
        Row::new(vec![
            format!("#{}", j.id),
            j.team.clone(),
            j.name.clone(),
            gpus,
            j.priority.to_string(),
            waited(now_ms - j.submitted_at),
            j.reason.clone().unwrap_or_default(),
        ])
    });
    let widths = [
        Constraint::Length(7),
        Constraint::Length(12),
        Constraint::Length(20),
        Constraint::Length(9),
        Constraint::Length(4),
        Constraint::Length(7),
        Constraint::Fill(1),
    ];
    let table = Table::new(rows, widths)
        .header(
            Row::new(["JOB", "TEAM", "NAME", "GPUS", "PRI", "WAITED", "WHY IT WAITS"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::new().borders(Borders::TOP).title(format!(" queue ({} pending) ", queue.len())));
    frame.render_widget(table, area);
}

fn render_log(frame: &mut Frame, area: Rect, model: &Model, log: &LogPane) {
    let name =
        model.jobs.get(&log.job).map_or(String::new(), |j| format!(" {} ({}) · {}", j.name, j.team, j.state));
    let block = Block::new().borders(Borders::TOP).title(format!(" job #{}{name} · stdout ", log.job));
    let inner = block.inner(area);
    let mut lines: Vec<&str> = log.lines.iter().map(String::as_str).collect();
    if !log.partial.is_empty() {
        lines.push(&log.partial);
    }
    let shown = lines.len().saturating_sub(usize::from(inner.height));
    let text: Vec<Line> = lines[shown..].iter().map(|l| Line::raw(*l)).collect();
    frame.render_widget(Paragraph::new(text).block(block), area);
}

/// `42s`, `5m`, `3h`, `2d`.
pub fn waited(ms: i64) -> String {
    let s = (ms / 1000).max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}
