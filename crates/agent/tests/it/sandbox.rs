//! The job sandbox against a real agent: users, directories, environment, cgroups and capped
//! logs. Most of it needs root (job users and cgroups); those tests say so and pass as no-ops
//! when run as another user.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gantry_agent::runner::sandbox::running_as_root;
use gantry_agent::runner::{BackendChoice, Gpus};
use gantry_store::{GpuRange, JobRequest, JobState, NewJob, Store, SubmitRequest};

use crate::runner::{Harness, Setup, job, start_with, submit, until};

/// Whether the test must be skipped because it needs root.
pub fn needs_root(test: &str) -> bool {
    if running_as_root() {
        return false;
    }
    eprintln!("note: {test} needs root (job users, cgroups) and was skipped");
    true
}

fn submit_request(store: &dyn Store, command: &str, request: JobRequest) -> i64 {
    let job = NewJob {
        team: "t".into(),
        name: "sandboxed".into(),
        spec: SubmitRequest {
            command: vec!["sh".into(), "-c".into(), command.into()],
            gpus: GpuRange { min: request.gpus, max: request.gpus_max },
            gpu_memory_mib: request.gpu_memory_mib,
            gpu_compute_pct: request.gpu_compute_pct,
            cpu_milli: request.cpu_milli,
            memory_mib: request.memory_mib,
            ..NewJob::default().spec
        },
        submitted_at: gantry_server::now_ms(),
        ..NewJob::default()
    };
    store.submit(&job).expect("submit").0
}

pub fn log(h: &Harness, id: i64, stream: &str) -> String {
    let bytes = std::fs::read(h.dir.path().join("logs").join(id.to_string()).join("1").join(stream))
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub async fn finished(h: &Harness, id: i64) -> gantry_store::Job {
    until("the job to end", || Some(job(&*h.store, id)).filter(|j| j.state.is_terminal())).await
}

/// A `sleep` argument no other test uses, to find a job's processes in `/proc`.
pub fn marker(n: u32) -> String {
    format!("{n}.{}", std::process::id() % 100_000)
}

/// Pids of live processes running `sleep <marker>`.
pub fn sleepers(marker: &str) -> Vec<u32> {
    let wanted = format!("sleep\0{marker}\0");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.ends_with(wanted.as_bytes()))
        })
        .collect()
}

/// The job's cgroup directories, from its `/proc/self/cgroup` as printed in its output.
pub fn cgroup_dirs(printed: &str) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    // (mount point, file system type, super options) of each mount.
    let mounts: Vec<(PathBuf, &str, &str)> = mountinfo
        .lines()
        .filter_map(|l| {
            let (head, tail) = l.split_once(" - ")?;
            let mut tail = tail.split_whitespace();
            let fstype = tail.next()?;
            Some((PathBuf::from(head.split_whitespace().nth(4)?), fstype, tail.nth(1).unwrap_or_default()))
        })
        .collect();
    let root = |controllers: &str| {
        let first = controllers.split(',').next().unwrap_or_default();
        mounts.iter().find_map(|(point, fstype, options)| {
            let found = match controllers {
                "" => *fstype == "cgroup2",
                _ => *fstype == "cgroup" && options.split(',').any(|o| o == first),
            };
            found.then(|| point.clone())
        })
    };
    printed
        .lines()
        .filter(|l| l.contains("/gantry/"))
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            Some(root(controllers)?.join(path.trim_start_matches('/')))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_as_its_teams_own_user_in_a_private_directory_with_only_allow_listed_variables() {
    if needs_root("a_job_runs_as_its_teams_own_user_in_a_private_directory_with_only_allow_listed_variables")
    {
        return;
    }
    let h = start_with(Setup::default()).await;
    let script = "id -un; id -G; pwd; stat -c '%a %U' .; grep NoNewPrivs /proc/self/status; \
                  ls /proc/self/fd | tr '\\n' ' '; echo; env";
    let id = submit(&*h.store, script, 1);
    assert_eq!(finished(&h, id).await.state, JobState::Succeeded, "{}", log(&h, id, "stderr"));
    let out = log(&h, id, "stdout");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "gantry-t-t", "{out}");
    let gid = std::process::Command::new("id").args(["-g", "gantry-t-t"]).output().expect("id").stdout;
    assert_eq!(lines[1], String::from_utf8_lossy(&gid).trim(), "only the job user's own group");
    let workdir = h
        .work_root()
        .join(std::fs::read_to_string(h.dir.path().join("agent/sandbox-scope")).expect("scope").trim());
    assert_eq!(lines[2], workdir.join(format!("{id}-1")).display().to_string());
    assert_eq!(lines[3], "700 gantry-t-t");
    assert_eq!(lines[4].split_whitespace().collect::<Vec<_>>(), ["NoNewPrivs:", "1"]);
    let fds: BTreeSet<&str> = lines[5].split_whitespace().collect();
    assert!(fds.is_subset(&["0", "1", "2", "3"].into()), "the job inherits only its stdio: {fds:?}");
    let env: Vec<&str> = lines[6..].to_vec();
    let home = h.work_root().join("homes/t/t");
    assert!(env.contains(&format!("HOME={}", home.display()).as_str()), "the user's persistent home: {out}");
    assert!(env.contains(&"USER=gantry-t-t"), "{out}");
    assert!(env.contains(&format!("GANTRY_JOB_ID={id}").as_str()), "{out}");
    for forbidden in ["GANTRY_TOKEN=", "GANTRY_JOIN_TOKEN=", "CARGO", "RUST"] {
        assert!(!env.iter().any(|v| v.starts_with(forbidden)), "{forbidden} leaked: {out}");
    }
    assert!(!out.contains(h.token()), "the agent's token leaked");
    assert!(!Path::new(lines[2]).exists(), "the work directory is removed after the attempt");
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_read_the_agents_files_or_another_jobs_output() {
    if needs_root("a_job_cannot_read_the_agents_files_or_another_jobs_output") {
        return;
    }
    let h = start_with(Setup::default()).await;
    // A secret protected by its mode alone, in a directory everyone may enter.
    let probe = h.outside.path().join("probe");
    std::fs::create_dir(&probe).expect("probe dir");
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(probe.join("secret"), "probe-secret").expect("secret");
    std::fs::set_permissions(probe.join("secret"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let first = submit(&*h.store, "echo first-jobs-secret", 0);
    finished(&h, first).await;
    assert_eq!(log(&h, first, "stdout"), "first-jobs-secret\n");
    let data = h.dir.path();
    let script = format!(
        "cat {probe}/secret; cat {data}/store/*; cat {data}/agent/sandbox-scope; cat {data}/logs/{first}/stdout; \
         ls {data}; echo done",
        probe = probe.display(),
        data = data.display()
    );
    let second = submit(&*h.store, &script, 0);

    finished(&h, second).await;
    assert_eq!(log(&h, second, "stdout"), "done\n", "the job read nothing");
    let errors = log(&h, second, "stderr");
    assert!(errors.contains("Permission denied"), "{errors}");
    assert!(!errors.contains("probe-secret") && !errors.contains("first-jobs-secret"), "{errors}");
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_job_ends_its_daemons_and_removes_its_cgroup() {
    if needs_root("cancelling_a_job_ends_its_daemons_and_removes_its_cgroup") {
        return;
    }
    let h = start_with(Setup::default()).await;
    let m = marker(1001);
    let script = format!("cat /proc/self/cgroup; setsid sleep {m} & (sleep {m} &); sleep {m}");
    let id = submit(&*h.store, &script, 1);
    until("three sleeps, two of them daemons", || (sleepers(&m).len() == 3).then_some(())).await;
    // The output reaches its file through the agent's copy thread a moment after it is written.
    let groups = until("the job's cgroup in its log", || {
        Some(cgroup_dirs(&log(&h, id, "stdout"))).filter(|g| !g.is_empty())
    })
    .await;
    assert!(
        !groups.is_empty() && groups.iter().all(|g| g.exists()),
        "the job runs in its own cgroup: {groups:?}"
    );
    h.store.cancel(id, gantry_server::now_ms()).expect("cancel");
    assert_eq!(finished(&h, id).await.state, JobState::Cancelled);
    assert_eq!(sleepers(&m), Vec::<u32>::new(), "no process of the job survives its cancellation");
    assert!(groups.iter().all(|g| !g.exists()), "the cgroup is removed: {groups:?}");
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_exits_leaving_daemons_behind_has_them_ended() {
    if needs_root("a_job_that_exits_leaving_daemons_behind_has_them_ended") {
        return;
    }
    let h = start_with(Setup::default()).await;
    let m = marker(1002);
    let script =
        format!("cat /proc/self/cgroup; setsid sleep {m} & (sleep {m} &); sleep 0.5; echo main-done");
    let id = submit(&*h.store, &script, 1);
    assert_eq!(finished(&h, id).await.state, JobState::Succeeded);
    let out = log(&h, id, "stdout");
    assert!(out.ends_with("main-done\n"), "{out}");
    assert_eq!(sleepers(&m), Vec::<u32>::new(), "the daemons ended with the job");
    let groups = cgroup_dirs(&out);
    assert!(!groups.is_empty() && groups.iter().all(|g| !g.exists()), "the cgroup is removed: {groups:?}");
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_memory_and_cpu_requests_are_its_cgroups_limits() {
    if needs_root("a_jobs_memory_and_cpu_requests_are_its_cgroups_limits") {
        return;
    }
    let h = start_with(Setup::default()).await;
    let request = JobRequest { memory_mib: 300, cpu_milli: 1500, ..JobRequest::default() };
    let id = submit_request(&*h.store, "cat /proc/self/cgroup; sleep 30", request);
    let groups =
        until("the job's cgroup", || Some(cgroup_dirs(&log(&h, id, "stdout"))).filter(|g| !g.is_empty()))
            .await;
    let read = |file: &str| groups.iter().find_map(|g| std::fs::read_to_string(g.join(file)).ok());
    match (read("memory.max"), read("memory.limit_in_bytes")) {
        (Some(v2), _) => assert_eq!(v2.trim(), (300u64 << 20).to_string()),
        (None, Some(v1)) => assert_eq!(v1.trim(), (300u64 << 20).to_string()),
        (None, None) => panic!("no memory limit file in {groups:?}"),
    }
    match (read("cpu.max"), read("cpu.cfs_quota_us")) {
        (Some(v2), _) => assert_eq!(v2.trim(), "150000 100000"),
        (None, Some(v1)) => assert_eq!(v1.trim(), "150000"),
        (None, None) => panic!("no CPU limit file in {groups:?}"),
    }
    assert_eq!(read("pids.max").as_deref().map(str::trim), Some("4096"), "the default pids.max");
    h.store.cancel(id, gantry_server::now_ms()).expect("cancel");
    finished(&h, id).await;
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_over_its_memory_request_is_killed_and_told_why() {
    if needs_root("a_job_over_its_memory_request_is_killed_and_told_why") {
        return;
    }
    if std::fs::read_to_string("/proc/swaps").is_ok_and(|s| s.lines().count() > 1) {
        eprintln!("note: swap is on, so a memory limit swaps instead of killing; skipped");
        return;
    }
    let h = start_with(Setup::default()).await;
    let request = JobRequest { memory_mib: 32, ..JobRequest::default() };
    // `tail` keeps the whole last line, which /dev/zero never ends, in memory.
    let id = submit_request(&*h.store, "head -c 268435456 /dev/zero | tail -n 1 > /dev/null", request);
    let ended = finished(&h, id).await;
    assert_eq!(ended.state, JobState::Failed);
    let reason = ended.reason.unwrap_or_default();
    assert!(reason.contains("out of memory") && reason.contains("32 MiB"), "{reason}");
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_writing_fast_keeps_at_most_its_log_limit_on_disk_and_the_agent_keeps_heartbeating() {
    let h = start_with(Setup { log_limit_bytes: 1 << 20, ..Setup::default() }).await;
    let id = submit(&*h.store, "yes 0123456789abcdef | head -c 209715200; echo end-of-output", 0);
    let started = Instant::now();
    let mut worst = 0;
    while !job(&*h.store, id).state.is_terminal() {
        assert!(started.elapsed() < Duration::from_secs(120), "the job did not end");
        if let Some(node) = h.store.nodes().expect("nodes").into_iter().find(|n| n.id == "n1") {
            worst = worst.max(gantry_server::now_ms() - node.last_heartbeat);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(worst < 3000, "a heartbeat was {worst} ms late while the job wrote");
    assert_eq!(job(&*h.store, id).state, JobState::Succeeded);
    let dir = h.dir.path().join("logs").join(id.to_string()).join("1");
    let on_disk: u64 = ["stdout", "stdout.1"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.size())
        .sum();
    assert!(on_disk <= 1 << 20, "{on_disk} bytes on disk");
    let (mut at, mut tail) = (0, Vec::new());
    loop {
        let chunk = gantry_server::job_logs::read(&dir, "stdout", at, 1 << 20).expect("read");
        if chunk.bytes.is_empty() {
            break;
        }
        at = chunk.offset + chunk.bytes.len() as u64;
        tail.extend(chunk.bytes);
    }
    assert_eq!(at, 209_715_200 + 14, "positions count everything written");
    assert!(tail.len() as u64 <= 1 << 20 && tail.ends_with(b"end-of-output\n"));
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_ends_the_jobs_and_cgroups_whose_supervisor_died_while_it_was_away() {
    if needs_root("a_restarted_agent_ends_the_jobs_and_cgroups_whose_supervisor_died_while_it_was_away") {
        return;
    }
    let mut h = start_with(Setup::default()).await;
    let m = marker(1003);
    let again = h.shared.join("again");
    let script = format!(
        "if [ -e {again} ]; then exec sleep 30; fi; touch {again}; cat /proc/self/cgroup; pwd; setsid sleep {m} & sleep {m}",
        again = again.display()
    );
    let id = submit(&*h.store, &script, 1);
    until("the job and its daemon", || (sleepers(&m).len() == 2).then_some(())).await;
    // The output reaches its file through the agent's copy thread a moment after it is written.
    let out = until("the job's cgroups and directory in its log", || {
        let out = log(&h, id, "stdout");
        out.lines().last().is_some_and(|l| l.starts_with('/') && Path::new(l).exists()).then_some(out)
    })
    .await;
    let groups = cgroup_dirs(&out);
    let workdir = PathBuf::from(out.lines().last().unwrap_or_default());
    // The agent dies without stopping its jobs, and so does the job's shim: nothing supervises
    // the job's processes any more (a restarted agent adopts only jobs whose shim lives).
    h.agent.abort();
    let _ = (&mut h.agent).await;
    let record = std::fs::read(h.dir.path().join(format!("agent/attempts/{id}-1.json"))).expect("record");
    let record: serde_json::Value = serde_json::from_slice(&record).expect("record json");
    let shim = record["shim_pid"].as_i64().expect("shim pid");
    let _ = std::process::Command::new("kill").args(["-KILL", &shim.to_string()]).status();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sleepers(&m).len(), 2, "the jobs outlived their agent and shim");
    let gpus = Gpus::open(&BackendChoice::Simulated("1xA100-80GB".into()), 3).expect("fleet");
    let restarted = h.start_agent(gpus);
    until("the previous run's processes to end", || sleepers(&m).is_empty().then_some(())).await;
    // The cgroups go right after their last process (rmdir waits for the kernel to let go).
    until("the previous run's cgroups to be removed", || groups.iter().all(|g| !g.exists()).then_some(()))
        .await;
    until("the previous run's work directory to be removed", || (!workdir.exists()).then_some(())).await;
    let _ = h.stop.send(true);
    let _ = restarted.await;
}

fn submit_in(store: &dyn Store, command: &str, workdir: &str) -> i64 {
    let job = NewJob {
        team: "t".into(),
        name: "workdir".into(),
        spec: SubmitRequest {
            command: vec!["sh".into(), "-c".into(), command.into()],
            workdir: Some(workdir.into()),
            ..NewJob::default().spec
        },
        submitted_at: gantry_server::now_ms(),
        ..NewJob::default()
    };
    store.submit(&job).expect("submit").0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_starts_in_its_workdir_inside_its_own_directory_and_a_workdir_climbing_out_is_refused() {
    if needs_root(
        "a_job_starts_in_its_workdir_inside_its_own_directory_and_a_workdir_climbing_out_is_refused",
    ) {
        return;
    }
    let h = start_with(Setup::default()).await;
    let id = submit_in(&*h.store, "pwd; stat -c '%a %U' . ..; cd ../.. && pwd", "out/run");
    assert_eq!(finished(&h, id).await.state, JobState::Succeeded, "{}", log(&h, id, "stderr"));
    let out = log(&h, id, "stdout");
    let lines: Vec<&str> = out.lines().collect();
    let home = Path::new(lines[3]);
    assert_eq!(Path::new(lines[0]), home.join("out/run"), "{out}");
    assert_eq!((lines[1], lines[2]), ("700 gantry-t-t", "700 gantry-t-t"), "{out}");
    // A workdir that slipped past the server (written straight to the store) is refused by the
    // agent too: the job never starts anywhere else.
    let escape = submit_in(&*h.store, "touch /tmp/escaped-$GANTRY_JOB_ID", "../..");
    let job = finished(&h, escape).await;
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    assert!(job.reason.as_deref().unwrap_or_default().contains("workdir"), "{job:?}");
    assert!(!Path::new(&format!("/tmp/escaped-{escape}")).exists());
    let _ = h.stop.send(true);
}
