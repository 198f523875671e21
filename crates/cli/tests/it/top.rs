//! `gantry top` against `gantry up --simulated-gpus`: one frame (`--once`) per team token (a
//! member of another team sees neither the job nor its name), and once interactively inside
//! tmux (keys: sort, open a job's log, quit). The tmux test installs nothing itself:
//! `scripts/test.sh` installs Debian's tmux when missing; when it could not, the test says so
//! and skips.

use std::process::Command;
use std::time::Duration;

use crate::harness::{Cluster, GANTRY, command, eventually};

const WAIT: Duration = Duration::from_secs(40);

fn top_once(cluster: &Cluster, token: &str) -> String {
    let out = command(cluster.home.path())
        .env("GANTRY_TOKEN", token)
        .args(["top", "--once", "--size", "160x40", "--server", &cluster.url()])
        .output()
        .expect("run gantry top");
    assert!(out.status.success(), "gantry top --once failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A vision job holding a GPU and printing, and tokens of vision and nlp.
fn busy_cluster() -> (Cluster, String, String, String) {
    let cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    let vision = cluster.gantry(&["token", "create", "--team", "vision", "--user", "vera"]).trim().to_owned();
    let nlp = cluster.gantry(&["token", "create", "--team", "nlp", "--user", "nils"]).trim().to_owned();
    let out = command(cluster.home.path())
        .env("GANTRY_TOKEN", &vision)
        .args(["submit", "--gpus", "1", "--name", "secret-vision-run", "--"])
        .args(["sh", "-c", "echo step 1 of the vision run; sleep 120"])
        .output()
        .expect("submit");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    eventually(WAIT, "the job to run", || {
        cluster.jobs().iter().any(|j| j["state"] == "running").then_some(())
    });
    (cluster, vision, nlp, id)
}

#[test]
fn top_once_shows_a_member_its_teams_job_on_its_gpu_and_another_team_nothing_of_it() {
    let (cluster, vision, nlp, id) = busy_cluster();
    let seen = eventually(WAIT, "the job on a GPU in top", || {
        let text = top_once(&cluster, &vision);
        text.contains(&format!("#{id} secret-vision-run (vision)")).then_some(text)
    });
    assert!(seen.contains("2 GPUs on 1 nodes"), "{seen}");
    assert!(seen.contains("A100"), "{seen}");
    let other = top_once(&cluster, &nlp);
    assert!(other.contains("2 GPUs on 1 nodes"), "nlp sees the GPUs: {other}");
    assert!(
        !other.contains("secret-vision-run") && !other.contains(&format!("#{id}")),
        "nlp sees vision's job:\n{other}"
    );
    assert!(other.contains("0 held by visible jobs"), "{other}");
    let refused =
        command(cluster.home.path()).args(["top", "--once", "--token", "not-a-token"]).output().expect("run");
    assert!(!refused.status.success(), "a bad token must fail");
}

pub(crate) fn tmux_present() -> bool {
    let ok = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI must have tmux (scripts/test.sh installs it)");
        eprintln!("note: skipping the tmux test of gantry top: tmux is not installed (apt-get install tmux)");
    }
    ok
}

/// A tmux server of its own (`-L`), killed when dropped; its session is named `top`.
pub(crate) struct Tmux(pub(crate) String);

impl Tmux {
    pub(crate) fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux").arg("-L").arg(&self.0).args(args).output().expect("run tmux")
    }

    pub(crate) fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    pub(crate) fn wait_for(&self, what: &str, needle: &str) -> String {
        let mut last = String::new();
        let found = eventually_or(WAIT, || {
            last = self.screen();
            last.contains(needle).then(|| last.clone())
        });
        found.unwrap_or_else(|| panic!("timed out waiting for {what} ({needle:?}); the pane shows:\n{last}"))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn eventually_or<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn top_in_tmux_sorts_opens_a_jobs_log_and_quits_on_q() {
    if !tmux_present() {
        return;
    }
    let (cluster, vision, _nlp, id) = busy_cluster();
    let tmux = Tmux(format!("gantry-top-{}", cluster.port));
    let line = format!(
        "env HOME={} GANTRY_TOKEN={vision} {GANTRY} top --interval 1 --server {}",
        cluster.home.path().display(),
        cluster.url()
    );
    let started = tmux.run(&["new-session", "-d", "-s", "top", "-x", "160", "-y", "48", &line]);
    assert!(started.status.success(), "tmux: {}", String::from_utf8_lossy(&started.stderr));
    let screen = tmux.wait_for("the job in top", &format!("#{id} secret-vision-run (vision)"));
    assert!(screen.contains("GPUs (2) · sort utilisation · team all"), "{screen}");
    assert!(screen.contains("mean utilisation"), "{screen}");
    if let Some(dir) = std::env::var_os("GANTRY_TOP_SNAPSHOT") {
        std::fs::write(std::path::Path::new(&dir).join("top.txt"), &screen).expect("write the snapshot");
    }
    tmux.run(&["send-keys", "-t", "top", "s"]);
    tmux.wait_for("the memory order", "sort memory");
    tmux.run(&["send-keys", "-t", "top", "t"]);
    tmux.wait_for("the team filter", "team vision");
    // The only held GPU is the vision job's; with the team filter it is the first row.
    tmux.run(&["send-keys", "-t", "top", "Enter"]);
    tmux.wait_for("the job's output", "step 1 of the vision run");
    tmux.run(&["send-keys", "-t", "top", "Escape"]);
    tmux.wait_for("the GPU table again", "GPUs (1)");
    tmux.run(&["send-keys", "-t", "top", "q"]);
    let gone =
        eventually_or(WAIT, || (!tmux.run(&["has-session", "-t", "top"]).status.success()).then_some(()));
    assert!(gone.is_some(), "q did not end gantry top; the pane shows:\n{}", tmux.screen());
}
