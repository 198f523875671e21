//! What one job can see of another and of the node, and the limits it cannot leave: private
//! `/tmp`, `/dev/shm` and `/proc`, umask 077, the devices cgroup, `pids.max` and the node's
//! default memory. All need root (job users, cgroups, mount namespaces) and pass as no-ops
//! without it.

use std::os::unix::fs::PermissionsExt;

use gantry_agent::runner::sandbox::{DefaultLimit, JobDefaults, NodeReserve};
use gantry_agent::runner::{self, BackendChoice, Gpus};
use gantry_store::{JobState, NewJob, Store, SubmitRequest};

use crate::runner::{Harness, Setup, job, start_with, submit, until};
use crate::sandbox::{cgroup_dirs, finished, log, marker, needs_root, sleepers};

fn submit_as(store: &dyn Store, team: &str, command: &str) -> i64 {
    let job = NewJob {
        team: team.into(),
        name: "isolation".into(),
        spec: SubmitRequest {
            command: vec!["sh".into(), "-c".into(), command.into()],
            ..NewJob::default().spec
        },
        submitted_at: gantry_server::now_ms(),
        ..NewJob::default()
    };
    store.submit(&job).expect("submit").0
}

/// Starts team alpha's job, which leaves a world-readable secret in its `/tmp` and `/dev/shm`
/// and runs a shell with the secret on its command line; returns its job id and that pid.
async fn alpha_with_secrets(h: &Harness, m: &str) -> (i64, String) {
    let s = h.shared.display();
    let script = format!(
        "echo alpha-secret > /tmp/gantry-probe-{m}; echo alpha-secret > /dev/shm/gantry-probe-{m}; \
         chmod 644 /tmp/gantry-probe-{m} /dev/shm/gantry-probe-{m}; \
         sh -c 'sleep {m}; : alpha-secret' & echo $! > {s}/a-pid.tmp; chmod 644 {s}/a-pid.tmp; mv {s}/a-pid.tmp {s}/a-pid; wait"
    );
    let a = submit_as(&*h.store, "alpha", &script);
    until("alpha's pid", || h.shared.join("a-pid").exists().then_some(())).await;
    let pid = std::fs::read_to_string(h.shared.join("a-pid")).expect("pid").trim().to_owned();
    (a, pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_another_team_cannot_read_the_first_teams_tmp_shared_memory_or_command_line() {
    if needs_root("a_job_of_another_team_cannot_read_the_first_teams_tmp_shared_memory_or_command_line") {
        return;
    }
    let h = start_with(Setup::default()).await;
    let m = marker(4001);
    let (a, pid) = alpha_with_secrets(&h, &m).await;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(cmdline.starts_with(b"sh\0-c\0"), "alpha's shell runs, its secret on its command line");
    let probe = format!(
        "cat /tmp/gantry-probe-{m} /dev/shm/gantry-probe-{m} /proc/{pid}/cmdline; ls -A /tmp; ls -A /dev/shm; \
         ls /proc | grep -c '^[0-9]'; echo done"
    );
    let b = submit_as(&*h.store, "bravo", &probe);
    assert_eq!(finished(&h, b).await.state, JobState::Succeeded, "{}", log(&h, b, "stderr"));
    let (out, err) = (log(&h, b, "stdout"), log(&h, b, "stderr"));
    assert!(!out.contains("alpha-secret") && !err.contains("alpha-secret"), "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    // Empty /tmp and /dev/shm; in /proc only its own shell, `ls` and `grep`.
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].parse::<u32>().is_ok_and(|n| n <= 3), "bravo sees only its own processes: {out}");
    assert_eq!(err.matches("No such file or directory").count(), 3, "{err}");
    // A job of the same team runs as the same user and sees alpha's processes (documented).
    let same = submit_as(
        &*h.store,
        "alpha",
        &format!("tr '\\0' ' ' < /proc/{pid}/cmdline; cat /tmp/gantry-probe-{m}"),
    );
    finished(&h, same).await;
    assert!(
        log(&h, same, "stdout").starts_with(&format!("sh -c sleep {m}; : alpha-secret")),
        "{}",
        log(&h, same, "stdout")
    );
    assert!(
        log(&h, same, "stderr").contains("No such file"),
        "each job has its own /tmp, the same team's too"
    );
    assert!(
        !std::path::Path::new(&format!("/tmp/gantry-probe-{m}")).exists(),
        "the node's /tmp is untouched"
    );
    h.store.cancel(a, gantry_server::now_ms()).expect("cancel");
    finished(&h, a).await;
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_job_creates_is_its_users_alone_and_its_tmp_is_a_capped_tmpfs() {
    if needs_root("what_a_job_creates_is_its_users_alone_and_its_tmp_is_a_capped_tmpfs") {
        return;
    }
    let h = start_with(Setup::default()).await;
    let script = "touch f /tmp/f; mkdir d /tmp/d; stat -c '%a' f d /tmp/f /tmp/d /tmp /dev/shm; \
                  stat -f -c '%T %b %S' /tmp; grep -c hidepid= /proc/self/mountinfo";
    let id = submit(&*h.store, script, 0);
    assert_eq!(finished(&h, id).await.state, JobState::Succeeded, "{}", log(&h, id, "stderr"));
    let out = log(&h, id, "stdout");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..6], ["600", "700", "600", "700", "1777", "1777"], "{out}");
    let fs: Vec<&str> = lines[6].split_whitespace().collect();
    assert_eq!(fs[0], "tmpfs", "{out}");
    let bytes = fs[1].parse::<u64>().expect("blocks") * fs[2].parse::<u64>().expect("block size");
    assert_eq!(bytes, 1 << 30, "the default cap of /tmp: {out}");
    assert_eq!(lines[7], "1", "/proc is mounted with hidepid: {out}");
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_work_directory_under_tmp_is_still_the_jobs_inside_its_private_tmp() {
    if needs_root("a_work_directory_under_tmp_is_still_the_jobs_inside_its_private_tmp") {
        return;
    }
    let under_tmp = tempfile::tempdir_in("/tmp").expect("dir");
    std::fs::set_permissions(under_tmp.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let work_dir = Some(under_tmp.path().join("work"));
    let h = start_with(Setup { work_dir, ..Setup::default() }).await;
    let script = "pwd; echo kept > result; cat result; cd .. && ls; ls -A /tmp | wc -l";
    let id = submit_in_dir(&*h.store, script, "out");
    assert_eq!(finished(&h, id).await.state, JobState::Succeeded, "{}", log(&h, id, "stderr"));
    let out = log(&h, id, "stdout");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with(&under_tmp.path().display().to_string()) && lines[0].ends_with("/out"),
        "{out}"
    );
    assert_eq!(lines[1..4], ["kept", "out", "1"], "its directory is back, alone in its /tmp: {out}");
    let _ = h.stop.send(true);
}

fn submit_in_dir(store: &dyn Store, command: &str, workdir: &str) -> i64 {
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
async fn a_fork_loop_stops_at_pids_max_and_the_agent_still_runs_the_next_job() {
    if needs_root("a_fork_loop_stops_at_pids_max_and_the_agent_still_runs_the_next_job") {
        return;
    }
    let defaults = JobDefaults { pids_max: 40, ..JobDefaults::default() };
    let h = start_with(Setup { defaults, ..Setup::default() }).await;
    let m = marker(4002);
    let bomb = format!("i=0; while [ $i -lt 200 ]; do sleep {m} & i=$((i+1)); done; echo all-forked");
    let id = submit(&*h.store, &bomb, 0);
    let mut most = 0;
    while !job(&*h.store, id).state.is_terminal() {
        most = most.max(sleepers(&m).len());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let ended = job(&*h.store, id);
    assert_eq!(ended.state, JobState::Failed, "{ended:?}");
    assert!(!log(&h, id, "stdout").contains("all-forked"), "{}", log(&h, id, "stdout"));
    assert!(log(&h, id, "stderr").contains("fork"), "{}", log(&h, id, "stderr"));
    assert!(most < 40, "at most pids.max processes at once: {most}");
    assert!(sleepers(&m).is_empty(), "the rest of the attempt is ended");
    let next = submit(&*h.store, "echo still-working", 0);
    assert_eq!(finished(&h, next).await.state, JobState::Succeeded);
    assert_eq!(log(&h, next, "stdout"), "still-working\n");
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_pids_limit_set_on_the_server_is_its_jobs_pids_max() {
    if needs_root("a_teams_pids_limit_set_on_the_server_is_its_jobs_pids_max") {
        return;
    }
    let h = start_with(Setup::default()).await;
    let team =
        gantry_store::Team { name: "t".into(), gpu_quota: None, pids_limit: Some(77), ..Default::default() };
    h.store.set_team(&team).expect("team");
    let id = submit(&*h.store, "cat /proc/self/cgroup; sleep 30", 0);
    let groups =
        until("the job's cgroup", || Some(cgroup_dirs(&log(&h, id, "stdout"))).filter(|g| !g.is_empty()))
            .await;
    let pids_max = groups.iter().find_map(|g| std::fs::read_to_string(g.join("pids.max")).ok());
    assert_eq!(pids_max.as_deref().map(str::trim), Some("77"), "{groups:?}");
    h.store.cancel(id, gantry_server::now_ms()).expect("cancel");
    finished(&h, id).await;
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_advertises_its_capacity_less_the_reserve_and_holds_all_jobs_below_it() {
    if needs_root("the_node_advertises_its_capacity_less_the_reserve_and_holds_all_jobs_below_it") {
        return;
    }
    let reserve = NodeReserve { memory_mib: 1024, cpu_milli: 500 };
    let h = start_with(Setup { reserve, ..Setup::default() }).await;
    let (cpu, memory) = (runner::node_cpu_milli(), runner::node_memory_mib());
    let node = until("the node", || h.store.nodes().expect("nodes").into_iter().find(|n| n.id == "n1")).await;
    assert_eq!((node.cpu_milli, node.memory_mib), (cpu - 500, memory - 1024));
    let id = submit(&*h.store, "cat /proc/self/cgroup", 0);
    assert_eq!(finished(&h, id).await.state, JobState::Succeeded);
    // The parent of the job's group, `gantry/<scope>`, holds every job of the agent.
    let groups = cgroup_dirs(&log(&h, id, "stdout"));
    let parent =
        |file: &str| groups.iter().find_map(|g| std::fs::read_to_string(g.parent()?.join(file)).ok());
    let limit =
        parent("memory.max").or_else(|| parent("memory.limit_in_bytes")).expect("a memory limit file");
    assert_eq!(limit.trim(), ((memory - 1024) << 20).to_string());
    let quota = parent("cpu.cfs_quota_us").or_else(|| parent("cpu.max")).expect("a CPU limit file");
    assert!(quota.starts_with(&((cpu - 500) * 100).to_string()), "{quota}");
    // And all of them together to three quarters of the node's process ids.
    let pids = parent("pids.max").expect("a pids limit file");
    assert_eq!(pids.trim(), gantry_agent::runner::sandbox::jobs_pids_max().to_string());
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_asks_for_no_memory_is_held_to_the_nodes_default() {
    if needs_root("a_job_that_asks_for_no_memory_is_held_to_the_nodes_default") {
        return;
    }
    if std::fs::read_to_string("/proc/swaps").is_ok_and(|s| s.lines().count() > 1) {
        eprintln!("note: swap is on, so a memory limit swaps instead of killing; skipped");
        return;
    }
    let defaults = JobDefaults { memory: DefaultLimit::Fixed(48), ..JobDefaults::default() };
    let h = start_with(Setup { defaults, ..Setup::default() }).await;
    // `tail` keeps the whole last line, which /dev/zero never ends, in memory.
    let id = submit(&*h.store, "head -c 268435456 /dev/zero | tail -n 1 > /dev/null", 0);
    let ended = finished(&h, id).await;
    assert_eq!(ended.state, JobState::Failed, "{ended:?}");
    let reason = ended.reason.unwrap_or_default();
    assert!(reason.contains("out of memory") && reason.contains("48 MiB"), "{reason}");
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_can_open_its_own_gpus_device_node_but_not_another_gpus() {
    if needs_root("a_job_can_open_its_own_gpus_device_node_but_not_another_gpus") {
        return;
    }
    let fleet = "2xA100-80GB";
    let h = start_with(Setup { fleet, ..Setup::default() }).await;
    // Device nodes with NVIDIA's major, on the target directory's file system (which allows
    // them, unlike a nodev mount); there is no driver behind them.
    let dev = h.shared.join("dev");
    std::fs::create_dir(&dev).expect("dev dir");
    std::fs::set_permissions(&dev, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for minor in 0..2 {
        let node = dev.join(format!("nvidia{minor}"));
        let made =
            std::process::Command::new("mknod").arg(&node).args(["c", "195", &minor.to_string()]).status();
        assert!(made.is_ok_and(|s| s.success()), "mknod {}", node.display());
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    }
    let d = dev.display();
    let script = format!("for n in 0 1; do cat {d}/nvidia$n 2>&1 | sed \"s/^/$n /\"; done");
    let id = submit(&*h.store, &script, 1);
    assert_eq!(finished(&h, id).await.state, JobState::Succeeded, "{}", log(&h, id, "stderr"));
    let granted = job(&*h.store, id).gpu_uuids;
    let minors = Gpus::open(&BackendChoice::Simulated(fleet.into()), 3).expect("fleet").minors();
    let mine = minors[&granted[0]];
    let out = log(&h, id, "stdout");
    for line in out.lines() {
        let (minor, error) = line.split_once(' ').expect("minor and error");
        if minor.parse::<u32>().expect("minor") == mine {
            assert!(!error.contains("Operation not permitted"), "its own GPU is not refused: {out}");
            assert!(error.contains("No such device"), "no driver behind it: {out}");
        } else {
            assert!(error.contains("Operation not permitted"), "another GPU is refused: {out}");
        }
    }
    assert_eq!(out.lines().count(), 2, "{out}");
    let _ = h.stop.send(true);
}

#[test]
fn a_bpf_device_program_on_a_v2_group_lets_its_gpu_open_and_refuses_another() {
    use gantry_agent::runner::bpf_devices;
    use gantry_agent::runner::devices::{Rule, allowed};
    if needs_root("a_bpf_device_program_on_a_v2_group_lets_its_gpu_open_and_refuses_another") {
        return;
    }
    // The cgroup v2 hierarchy, unified or (as on hybrid hosts) beside the v1 ones.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let Some(root) = mountinfo.lines().find_map(|l| {
        let (head, tail) = l.split_once(" - ")?;
        let point = head.split_whitespace().nth(4)?;
        tail.starts_with("cgroup2 ").then(|| std::path::PathBuf::from(point))
    }) else {
        eprintln!("note: no cgroup2 hierarchy is mounted; skipped");
        return;
    };
    bpf_devices::supported().expect("a root agent on this kernel loads device programs");
    let group = root.join(format!("gantry-bpf-test-{}", std::process::id()));
    std::fs::create_dir(&group).expect("group");
    let dev = crate::runner::tempdir();
    for minor in 0..2 {
        let node = dev.path().join(format!("nvidia{minor}"));
        let made =
            std::process::Command::new("mknod").arg(&node).args(["c", "195", &minor.to_string()]).status();
        assert!(made.is_ok_and(|s| s.success()), "mknod {}", node.display());
    }
    let rules: Vec<Rule> = allowed(&[0], "");
    bpf_devices::attach(&group, &rules).expect("attached");
    let script = format!(
        "echo $$ > {g}/cgroup.procs; for n in 0 1; do cat {d}/nvidia$n 2>&1 | sed \"s/^/$n /\"; done; \
         head -c 1 /dev/zero | wc -c; for d in null full random urandom tty; do [ -c /dev/$d ] && sh -c \": </dev/$d\" 2>&1 | grep -q 'not permitted' && echo $d-refused; done; echo end",
        g = group.display(),
        d = dev.path().display()
    );
    let out = std::process::Command::new("sh").args(["-c", &script]).output().expect("sh");
    let _ = std::fs::remove_dir(&group);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("0 ") && lines[0].contains("No such device"), "its own GPU: {text}");
    assert!(
        lines[1].starts_with("1 ") && lines[1].contains("Operation not permitted"),
        "another GPU: {text}"
    );
    assert_eq!(lines[2..], ["1", "end"], "/dev/zero and the other basics are allowed: {text}");
}
