//! `gantry top` drawn into ratatui's `TestBackend`: the frame as text, checked for what people
//! read (bars, sparklines, owners, the queue and its reasons, sorting, the team filter, the log).

use gantry_api::types::{GpuHolder, GpuView};
use gantry_store::{Gpu, GpuHealth, GpuInfo, Job, JobRequest, JobState};
use serde_json::json;

use super::model::{Key, Model, Poll, Sort, View};
use super::once;

const NOW: i64 = 1_800_000_000_000;

fn gpu(node: &str, index: u32, util: f64, used_gib: u64, holder: Option<i64>) -> GpuView {
    let info = GpuInfo {
        uuid: format!("GPU-{node}-{index}"),
        index,
        model: "NVIDIA H100 80GB HBM3".into(),
        memory_mib: 81920,
    };
    let used = used_gib << 30;
    let findings = if util < 5.0 && holder.is_some() {
        json!([{"gpu": index, "kind": "idle_allocated", "detail": "utilisation at most 0% for 300s"}])
    } else {
        json!([])
    };
    let sample = json!({"findings": findings, "sample": {"gpu_util_percent": util, "memory_used_bytes": used,
        "memory_free_bytes": (80u64 << 30) - used}});
    let health = if node == "node-10" && index == 1 { GpuHealth::Unhealthy } else { GpuHealth::Healthy };
    let gpu = Gpu { info, node_id: node.into(), health, sample: Some(sample) };
    let holders =
        holder.map(|job_id| GpuHolder { job_id, share_milli: 1000, memory_mib: 0 }).into_iter().collect();
    GpuView { gpu, holders }
}

fn job(id: i64, team: &str, name: &str, state: JobState, reason: Option<&str>) -> Job {
    Job {
        id,
        team: team.into(),
        name: name.into(),
        command: vec!["python".into(), "train.py".into()],
        request: JobRequest { gpus: 2, ..JobRequest::default() },
        state,
        attempt: 1,
        max_retries: 3,
        reason: reason.map(str::to_owned),
        submitted_at: NOW - 300_000,
        ..Job::default()
    }
}

fn poll(utils: [f64; 4]) -> Poll {
    Poll {
        gpus: vec![
            gpu("node-2", 0, utils[0], 60, Some(7)),
            gpu("node-2", 1, utils[1], 10, Some(8)),
            gpu("node-10", 0, utils[2], 0, None),
            gpu("node-10", 1, utils[3], 5, Some(8)),
        ],
        active: vec![
            job(7, "vision", "resnet", JobState::Running, None),
            job(8, "nlp", "llama-ft", JobState::Running, None),
        ],
        pending: vec![
            job(9, "vision", "sweep-3", JobState::Pending, Some("needs 2 GPUs on one node; 1 free")),
            job(10, "nlp", "eval", JobState::Pending, Some("team nlp is over its guarantee")),
        ],
    }
}

fn model() -> Model {
    let mut m = Model::default();
    m.title = "http://head:7070 · ana (admin)".into();
    for step in 0..6u32 {
        let x = f64::from(step) * 10.0;
        m.apply(poll([50.0 + x, 2.0, 0.0, 20.0 + x]));
    }
    m
}

fn frame(m: &Model, v: &View) -> String {
    once(m, v, (140, 30))
}

fn line_with<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no line with {needle:?} in\n{text}"))
}

#[test]
fn the_frame_shows_bars_sparklines_owners_findings_and_the_queue_with_reasons() {
    let text = frame(&model(), &View::default());
    assert!(text.contains("gantry top"), "{text}");
    assert!(text.contains("4 GPUs on 2 nodes"), "{text}");
    assert!(text.contains("mean utilisation"), "{text}");
    let busy = line_with(&text, "#7 resnet (vision)");
    assert!(busy.contains("node-2") && busy.contains("100%") && busy.contains("██████████"), "{busy}");
    assert!(busy.contains("▄▅▆▆▇█"), "the row's sparkline rises with its history: {busy}");
    let idle = line_with(&text, "idle_allocated");
    assert!(idle.contains("#8 llama-ft (nlp)") && idle.contains("░░░░░░░░░░   2%"), "{idle}");
    assert!(line_with(&text, "node-10").contains("1"), "{text}");
    assert!(text.contains("unhealthy"), "a failing GPU is noted: {text}");
    assert!(text.contains("queue (2 pending)"), "{text}");
    let waiting = line_with(&text, "sweep-3");
    assert!(waiting.contains("needs 2 GPUs on one node; 1 free") && waiting.contains("vision"), "{waiting}");
    assert!(text.contains("q quit"), "{text}");
}

#[test]
fn s_cycles_the_order_between_utilisation_memory_and_node() {
    let m = model();
    let mut v = View::default();
    let order = |v: &View| v.rows(&m).iter().map(|g| format!("{}/{}", g.node, g.index)).collect::<Vec<_>>();
    assert_eq!(order(&v), ["node-2/0", "node-10/1", "node-2/1", "node-10/0"]);
    v.key(&m, Key::Char('s'));
    assert_eq!(v.sort, Sort::Memory);
    assert_eq!(order(&v), ["node-2/0", "node-2/1", "node-10/1", "node-10/0"]);
    v.key(&m, Key::Char('s'));
    assert_eq!(order(&v), ["node-2/0", "node-2/1", "node-10/0", "node-10/1"], "node-2 before node-10");
    assert!(frame(&m, &v).contains("sort node"));
    v.key(&m, Key::Char('s'));
    assert_eq!(v.sort, Sort::Util);
}

#[test]
fn t_filters_gpus_and_queue_by_team_and_cycles_back_to_all() {
    let m = model();
    let mut v = View::default();
    v.key(&m, Key::Char('t'));
    assert_eq!(v.team.as_deref(), Some("nlp"));
    let text = frame(&m, &v);
    assert!(text.contains("team nlp") && text.contains("GPUs (2)"), "{text}");
    assert!(
        !text.contains("resnet") && !text.contains("sweep-3"),
        "vision shows under the nlp filter:\n{text}"
    );
    assert!(text.contains("eval"), "{text}");
    v.key(&m, Key::Char('t'));
    assert_eq!(v.team.as_deref(), Some("vision"));
    v.key(&m, Key::Char('t'));
    assert_eq!(v.team, None);
}

#[test]
fn enter_opens_the_selected_gpus_job_log_and_esc_closes_it() {
    let m = model();
    let mut v = View::default();
    v.key(&m, Key::Down);
    assert_eq!(v.key(&m, Key::Enter), super::model::Action::ReadLog);
    let log = v.log.as_mut().expect("a log opens");
    assert_eq!(log.job, 8, "the second row (node-10/1) is held by job 8");
    log.append(0, b"epoch 1 loss 2.31\nepoch 2 loss 1.");
    log.append(40, b"87\n");
    let text = frame(&m, &v);
    assert!(text.contains("job #8 llama-ft (nlp) · running · stdout"), "{text}");
    assert!(text.contains("epoch 1 loss 2.31"), "{text}");
    assert!(text.contains("bytes rotated away"), "{text}");
    assert!(!text.contains("queue ("), "the log replaces the tables:\n{text}");
    v.key(&m, Key::Esc);
    assert!(v.log.is_none());
    assert_eq!(v.key(&m, Key::Char('q')), super::model::Action::Quit);
}

#[test]
fn a_gpu_without_a_visible_holder_and_an_empty_fleet_render_without_panicking() {
    let mut m = Model::default();
    m.apply(Poll::default());
    let mut v = View::default();
    v.key(&m, Key::Enter);
    v.key(&m, Key::Down);
    assert!(v.log.is_none());
    assert!(frame(&m, &v).contains("0 GPUs on 0 nodes"));
    assert!(once(&m, &v, (20, 20)).lines().count() == 20, "a tiny terminal still draws");
}

#[test]
fn the_whole_frame_matches_its_snapshot() {
    let (m, v) = (model(), View::default());
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(140, 30)).expect("a test backend");
    terminal.draw(|f| super::render::render(f, &m, &v, NOW)).expect("draw");
    insta::assert_snapshot!(super::text(terminal.backend().buffer()));
}
