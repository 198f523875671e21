//! `gantry top`: the cluster in the terminal, like nvtop across nodes. It polls the same API as
//! every other client command (`/v1/gpus`, `/v1/jobs`), so a member sees exactly what the API
//! shows it: holders and queue entries of its own teams only. Utilisation history for the
//! sparklines is kept here from successive polls (the server keeps only the latest sample).
//!
//! [`model`] holds the data and the keys, [`render`] draws it (pure, tested on ratatui's
//! `TestBackend`); this module only polls, reads keys and owns the terminal.

pub mod model;
pub mod render;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use gantry_api::job_logs::OFFSET_HEADER;
use gantry_api::types::{GpuView, WhoAmI};
use gantry_store::Job;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use super::client::{Api, ServerArgs, block_on};
use model::{Action, Key, Model, Poll, Sort, View};

/// Pending jobs read per poll (the newest).
const QUEUE_READ: u32 = 200;

/// `gantry top` flags.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Keys: s sort (util/mem/node) · t team · ↑↓ select · Enter/l job log (Esc back) · q quit

Examples:
  gantry top
  gantry top --team vision --sort mem
  gantry top --once --size 120x40 > cluster.txt   # one frame as text, for scripts"
)]
pub struct TopArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Seconds between polls of the server.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    interval: u64,
    /// Only this team's GPUs and queue (the `t` key cycles teams).
    #[arg(long)]
    team: Option<String>,
    /// GPU order (the `s` key cycles it).
    #[arg(long, value_enum, default_value_t = SortArg::Util)]
    sort: SortArg,
    /// Print one frame as plain text and exit, without taking over the terminal (for scripts).
    #[arg(long)]
    once: bool,
    /// The `--once` frame's size, COLUMNSxROWS.
    #[arg(long, default_value = "160x48", value_parser = parse_size)]
    size: (u16, u16),
}

/// `--sort` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SortArg {
    Util,
    Mem,
    Node,
}

fn parse_size(s: &str) -> Result<(u16, u16), String> {
    let (w, h) = s.split_once('x').ok_or_else(|| format!("`{s}` is not COLUMNSxROWS, e.g. 160x48"))?;
    let parse = |v: &str| v.parse::<u16>().ok().filter(|n| (20..=1000).contains(n));
    match (parse(w), parse(h)) {
        (Some(w), Some(h)) => Ok((w, h)),
        _ => Err(format!("`{s}`: columns and rows must be numbers from 20 to 1000")),
    }
}

/// Runs `gantry top`.
pub fn run(args: TopArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let mut model = Model::default();
    let sort = match args.sort {
        SortArg::Util => Sort::Util,
        SortArg::Mem => Sort::Memory,
        SortArg::Node => Sort::Node,
    };
    let mut view = View { sort, team: args.team.clone(), ..View::default() };
    block_on(async {
        let me: WhoAmI = api.get("/v1/whoami").await?;
        let who = me.user.unwrap_or_else(|| format!("token {}", me.token_id));
        model.title = format!("{} · {who} ({})", api.base(), me.role);
        model.apply(poll(&api).await?);
        anyhow::Ok(())
    })??;
    if args.once {
        print!("{}", once(&model, &view, args.size));
        return Ok(());
    }
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        bail!("gantry top needs a terminal; use `gantry top --once` to print one frame");
    }
    let mut terminal = ratatui::init();
    let result = interactive(&mut terminal, &api, &mut model, &mut view, Duration::from_secs(args.interval));
    ratatui::restore();
    result
}

/// One frame as text, lines without trailing spaces.
pub fn once(model: &Model, view: &View, (w, h): (u16, u16)) -> String {
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).expect("a test backend");
    terminal.draw(|f| render::render(f, model, view, crate::cmd::top::now_ms())).expect("draw into a buffer");
    text(terminal.backend().buffer())
}

/// A buffer as lines of text.
pub fn text(buffer: &ratatui::buffer::Buffer) -> String {
    let width = usize::from(buffer.area.width).max(1);
    let mut out = String::new();
    for row in buffer.content.chunks(width) {
        let line: String = row.iter().map(|c| c.symbol()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(crate) fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

async fn poll(api: &Api) -> anyhow::Result<Poll> {
    let gpus: Vec<GpuView> = api.get("/v1/gpus").await.context("reading GPUs")?;
    let mut active: Vec<Job> = api.get("/v1/jobs?state=running&limit=1000").await.context("reading jobs")?;
    active.extend(api.get::<Vec<Job>>("/v1/jobs?state=scheduled&limit=1000").await?);
    let mut pending: Vec<Job> = api.get(&format!("/v1/jobs?state=pending&limit={QUEUE_READ}")).await?;
    pending.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.submitted_at.cmp(&b.submitted_at)));
    Ok(Poll { gpus, active, pending })
}

/// Reads what the open log gained since the last read (a few chunks at most per tick).
async fn read_log(api: &Api, view: &mut View) -> anyhow::Result<()> {
    let Some(log) = view.log.as_mut() else { return Ok(()) };
    for _ in 0..4 {
        let path = format!("/v1/jobs/{}/logs?stream=stdout&offset={}", log.job, log.offset);
        let (at, bytes) = api.get_bytes_and_header(&path, OFFSET_HEADER).await?;
        let at = at.and_then(|a| a.parse().ok()).unwrap_or(log.offset);
        log.append(at, &bytes);
        if bytes.is_empty() {
            break;
        }
    }
    Ok(())
}

fn interactive(
    terminal: &mut ratatui::DefaultTerminal,
    api: &Api,
    model: &mut Model,
    view: &mut View,
    every: Duration,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut next = Instant::now() + every;
    loop {
        terminal.draw(|f| render::render(f, model, view, now_ms()))?;
        if event::poll(next.saturating_duration_since(Instant::now()))? {
            let action = match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => match to_key(k.code, k.modifiers) {
                    Some(key) => view.key(model, key),
                    None => Action::Redraw,
                },
                _ => Action::Redraw,
            };
            match action {
                Action::Quit => return Ok(()),
                Action::ReadLog => note(model, rt.block_on(read_log(api, view))),
                Action::Redraw => {}
            }
        }
        if Instant::now() >= next {
            match rt.block_on(poll(api)) {
                Ok(p) => model.apply(p),
                Err(e) => model.error = Some(format!("{e:#}")),
            }
            note(model, rt.block_on(read_log(api, view)));
            next = Instant::now() + every;
        }
    }
}

fn note(model: &mut Model, result: anyhow::Result<()>) {
    if let Err(e) = result {
        model.error = Some(format!("{e:#}"));
    }
}

fn to_key(code: KeyCode, modifiers: KeyModifiers) -> Option<Key> {
    Some(match code {
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Key::Char('q'),
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc | KeyCode::Backspace => Key::Esc,
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        _ => return None,
    })
}
