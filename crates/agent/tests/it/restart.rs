//! Jobs outlive their agent: a stopped or killed agent leaves them to their shims, and the next
//! start adopts the running ones (by pid and start time), reports those that ended meanwhile
//! with their real exit, and lets the server requeue only those that really died.

use std::time::Duration;

use gantry_agent::runner::{BackendChoice, Gpus};
use gantry_store::JobState;

use gantry_agent::runner::record;
use tokio::sync::watch;

use crate::runner::{Harness, Setup, job, start_with, submit, until};

fn fleet() -> Gpus {
    Gpus::open(&BackendChoice::Simulated("1xA100-80GB".into()), 3).expect("fleet")
}

fn record_path(h: &Harness, id: i64, attempt: u32) -> std::path::PathBuf {
    h.dir.path().join(format!("agent/attempts/{id}-{attempt}.json"))
}

fn log(h: &Harness, id: i64, attempt: u32) -> String {
    let path = h.dir.path().join(format!("logs/{id}/{attempt}/stdout"));
    std::fs::read_to_string(path).unwrap_or_default()
}

fn record(h: &Harness, id: i64, attempt: u32) -> serde_json::Value {
    let bytes = std::fs::read(record_path(h, id, attempt)).expect("attempt record");
    serde_json::from_slice(&bytes).expect("record json")
}

fn kill(pid: i64) {
    let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
}

/// The harness with its first agent replaced by one that only `stop` stops, leaving its jobs.
async fn harness() -> (Harness, watch::Sender<bool>) {
    let mut h = start_with(Setup::default()).await;
    // The harness's own agent is replaced before any job is submitted.
    h.agent.abort();
    let _ = (&mut h.agent).await;
    let (stop, stop_rx) = watch::channel(false);
    h.agent = h.start_agent_until(fleet(), false, stop_rx);
    (h, stop)
}

/// Stops the agent as Ctrl-C would (it leaves its jobs running); the server keeps running.
async fn stop_agent(h: &mut Harness, stop: &watch::Sender<bool>) {
    let _ = stop.send(true);
    let _ = (&mut h.agent).await;
}

async fn running(h: &Harness, id: i64) {
    until("the job to run", || Some(job(&*h.store, id)).filter(|j| j.state == JobState::Running)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_keeps_running_through_an_agent_restart_and_finishes_as_attempt_1_with_all_its_output() {
    let (mut h, stop) = harness().await;
    let go = h.shared.join("go");
    let script =
        format!("echo before; while [ ! -e {go} ]; do sleep 0.1; done; echo after", go = go.display());
    let id = submit(&*h.store, &script, 1);
    running(&h, id).await;
    until("the first line", || log(&h, id, 1).contains("before").then_some(())).await;
    let shim = record(&h, id, 1)["shim_pid"].as_i64().expect("shim pid");
    let epoch = job(&*h.store, id).epoch.expect("placed");
    stop_agent(&mut h, &stop).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(std::path::Path::new(&format!("/proc/{shim}")).exists(), "the shim outlived its agent");
    assert_eq!(job(&*h.store, id).state, JobState::Running);

    let (stop, stop_rx) = watch::channel(false);
    h.agent = h.start_agent_until(fleet(), false, stop_rx);
    until("the node to register again", || {
        h.store.nodes().expect("nodes").first().filter(|n| n.epoch == epoch + 1).map(|_| ())
    })
    .await;
    let kept = job(&*h.store, id);
    assert_eq!((kept.state, kept.attempt, kept.epoch), (JobState::Running, 1, Some(epoch + 1)), "{kept:?}");
    std::fs::write(&go, "").expect("go");
    let done =
        until("the job to succeed", || Some(job(&*h.store, id)).filter(|j| j.state.is_terminal())).await;
    assert_eq!((done.state, done.attempt, done.exit_code), (JobState::Succeeded, 1, Some(0)), "{done:?}");
    assert_eq!(log(&h, id, 1), "before\nafter\n");
    until("the record to be forgotten once reported", || (!record_path(&h, id, 1).exists()).then_some(()))
        .await;
    stop_agent(&mut h, &stop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ended_while_its_agent_was_away_is_reported_with_its_real_exit_code() {
    let (mut h, stop) = harness().await;
    let go = h.shared.join("go");
    let script = format!("while [ ! -e {go} ]; do sleep 0.1; done; echo bye; exit 3", go = go.display());
    let id = submit(&*h.store, &script, 1);
    running(&h, id).await;
    stop_agent(&mut h, &stop).await;
    std::fs::write(&go, "").expect("go");
    let exit = h.dir.path().join(format!("agent/attempts/{id}-1.exit"));
    until("the shim to record the exit", || exit.exists().then_some(())).await;

    let (stop, stop_rx) = watch::channel(false);
    h.agent = h.start_agent_until(fleet(), false, stop_rx);
    let done = until("the job to end", || Some(job(&*h.store, id)).filter(|j| j.state.is_terminal())).await;
    assert_eq!((done.state, done.attempt, done.exit_code), (JobState::Failed, 1, Some(3)), "{done:?}");
    assert_eq!(log(&h, id, 1), "bye\n");
    stop_agent(&mut h, &stop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_died_while_its_agent_was_away_is_requeued_and_keeps_its_first_attempts_output() {
    let (mut h, stop) = harness().await;
    let script = "echo attempt $GANTRY_JOB_ID; exec sleep 1000";
    let id = submit(&*h.store, script, 1);
    running(&h, id).await;
    until("the first attempt's output", || log(&h, id, 1).contains("attempt").then_some(())).await;
    let first = record(&h, id, 1);
    let epoch = job(&*h.store, id).epoch.expect("placed");
    stop_agent(&mut h, &stop).await;
    // The machine "reboots": the shim and the job are gone, no exit was written.
    for key in ["shim_pid", "pid"] {
        let pid = first[key].as_u64().and_then(|p| u32::try_from(p).ok()).expect("pid");
        let started = record::start_time(pid).expect("running");
        kill(i64::from(pid));
        until("the killed process to be gone", || (!record::is_alive(pid, started)).then_some(())).await;
    }

    let (stop, stop_rx) = watch::channel(false);
    h.agent = h.start_agent_until(fleet(), false, stop_rx);
    let again = until("the second attempt to run", || {
        Some(job(&*h.store, id))
            .filter(|j| j.state.is_terminal() || (j.state == JobState::Running && j.attempt == 2))
    })
    .await;
    assert_eq!((again.state, again.epoch), (JobState::Running, Some(epoch + 1)), "{again:?}");
    assert_eq!(log(&h, id, 1), format!("attempt {id}\n"), "the first attempt's output is kept");
    until("the second attempt's output", || (log(&h, id, 2) == format!("attempt {id}\n")).then_some(()))
        .await;
    let attempts = h.store.attempts(id).expect("attempts");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0].outcome, Some(JobState::Pending), "the first attempt was requeued: {attempts:?}");
    assert!(attempts[0].reason.as_deref().unwrap_or_default().contains("lost"), "{attempts:?}");
    h.store.cancel(id, gantry_server::now_ms()).expect("cancel");
    until("the job to be cancelled", || Some(job(&*h.store, id)).filter(|j| j.state.is_terminal())).await;
    stop_agent(&mut h, &stop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_shim_pid_with_another_start_time_is_not_adopted() {
    let (mut h, stop) = harness().await;
    let id = submit(&*h.store, "exec sleep 1000", 1);
    running(&h, id).await;
    stop_agent(&mut h, &stop).await;
    // The pid now belongs to another process: same number, another start time.
    let mut forged = record(&h, id, 1);
    forged["shim_start"] = serde_json::json!(forged["shim_start"].as_u64().expect("start") + 1);
    std::fs::write(record_path(&h, id, 1), serde_json::to_vec(&forged).expect("json")).expect("write");
    let shim = forged["shim_pid"].as_u64().and_then(|p| u32::try_from(p).ok()).expect("shim");
    let started = record::start_time(shim).expect("the shim runs");

    let (stop, stop_rx) = watch::channel(false);
    h.agent = h.start_agent_until(fleet(), false, stop_rx);
    let again = until("the job to be requeued and run again", || {
        Some(job(&*h.store, id)).filter(|j| j.state == JobState::Running && j.attempt == 2)
    })
    .await;
    assert_eq!(again.attempt, 2, "the attempt whose identity did not match was not adopted");
    // Unsupervised as far as the agent can tell, attempt 1 is ended (its cgroup, or its process
    // group whose leader is still the recorded process), so nothing of it runs on.
    until("the unadopted attempt to end", || (!record::is_alive(shim, started)).then_some(())).await;
    h.store.cancel(id, gantry_server::now_ms()).expect("cancel");
    until("the job to be cancelled", || Some(job(&*h.store, id)).filter(|j| j.state.is_terminal())).await;
    stop_agent(&mut h, &stop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_issued_while_the_agent_was_away_takes_effect_when_it_returns() {
    let (mut h, stop) = harness().await;
    let id = submit(&*h.store, "exec sleep 1000", 1);
    running(&h, id).await;
    stop_agent(&mut h, &stop).await;
    h.store.cancel(id, gantry_server::now_ms()).expect("cancel");
    let (stop, stop_rx) = watch::channel(false);
    h.agent = h.start_agent_until(fleet(), false, stop_rx);
    let done =
        until("the job to be cancelled", || Some(job(&*h.store, id)).filter(|j| j.state.is_terminal())).await;
    assert_eq!(done.state, JobState::Cancelled);
    stop_agent(&mut h, &stop).await;
}

#[test]
fn a_shim_records_its_jobs_exit_even_before_the_agent_has_recorded_any_attempt() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("dir");
    let (state, logs, work) = (dir.path().join("state"), dir.path().join("logs"), dir.path().join("w"));
    std::fs::create_dir_all(&logs).expect("logs");
    std::fs::create_dir_all(&work).expect("work");
    let spec = serde_json::json!({"job_id": 5, "attempt": 1, "argv": ["sh", "-c", "echo hi; exit 4"],
        "env": {"PATH": "/usr/bin:/bin"}, "cwd": work, "workdir": work, "user": null, "cgroup": null, "logs": logs,
        "log_limit": 1_000_000, "state": state});
    let mut shim = std::process::Command::new(crate::runner::SHIM)
        .arg(gantry_agent::runner::shim::ARG)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("shim");
    shim.stdin.take().expect("stdin").write_all(spec.to_string().as_bytes()).expect("spec");
    let out = shim.wait_with_output().expect("shim ends");
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("started "), "{out:?}");
    let exit = record::read_exit(&state, 5, 1).expect("the exit is recorded");
    assert_eq!(gantry_agent::runner::shim::status(&exit).code(), Some(4));
    assert_eq!(std::fs::read_to_string(logs.join("stdout")).expect("output"), "hi\n");
    assert!(!work.exists(), "the work directory is removed");
}
