//! `gantry run` and Ctrl-C, as `srun` has it (issue 38, point 6), in a real terminal (tmux):
//! the first Ctrl-C cancels the job and waits for its end, saying so, and the GPU is free at
//! once; a second within a second leaves it running and says how to cancel it; `--detach`
//! leaves it running on the first.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, GANTRY, eventually};
use crate::top::{Tmux, tmux_present};

fn state(cluster: &Cluster, id: &str) -> String {
    cluster
        .jobs()
        .into_iter()
        .find(|j| j["id"].as_i64().is_some_and(|n| n.to_string() == id))
        .map(|j| j["state"].to_string())
        .unwrap_or_default()
}

/// `gantry run ARGS -- sh -c 'echo started $GANTRY_JOB_ID; sleep 600'` in a tmux pane, then the
/// exit status; the job's id once it runs.
fn run_in_tmux(cluster: &Cluster, tmux: &Tmux, extra: &str) -> String {
    let line = format!(
        "env HOME={} {GANTRY} run --gpus 1 {extra} -- sh -c 'echo started $GANTRY_JOB_ID; sleep 600'; echo EXIT=$?; sleep 600",
        cluster.home.path().display()
    );
    let started = tmux.run(&["new-session", "-d", "-s", "top", "-x", "160", "-y", "40", &line]);
    assert!(started.status.success(), "tmux: {}", String::from_utf8_lossy(&started.stderr));
    let screen = tmux.wait_for("the job's first line", "started ");
    let id =
        screen.split("started ").nth(1).and_then(|r| r.split_whitespace().next()).expect("an id").to_owned();
    eventually(Duration::from_secs(20), "the job to run", || {
        (state(cluster, &id) == "\"running\"").then_some(())
    });
    id
}

#[test]
fn the_first_ctrl_c_of_gantry_run_cancels_the_job_and_frees_its_gpu() {
    if !tmux_present() {
        return;
    }
    let cluster = Cluster::start(&[]);
    let tmux = Tmux(format!("gantry-run-{}", cluster.port));
    let id = run_in_tmux(&cluster, &tmux, "");
    let pressed = Instant::now();
    tmux.run(&["send-keys", "-t", "top", "C-c"]);
    tmux.wait_for("the cancellation said", &format!("cancelling job {id}"));
    eventually(Duration::from_secs(20), "the job cancelled", || {
        (state(&cluster, &id) == "\"cancelled\"").then_some(())
    });
    let freed = eventually(Duration::from_secs(20), "its GPU free", || {
        let gpus = cluster.gantry(&["gpus", "-o", "json"]);
        let held = gpus.split("\"job_id\"").skip(1).any(|rest| {
            rest.trim_start_matches([':', ' ']).split(|c: char| !c.is_ascii_digit()).next()
                == Some(id.as_str())
        });
        (!held).then_some(pressed.elapsed())
    });
    eprintln!("Ctrl-C to a free GPU: {:.2} s", freed.as_secs_f64());
    let screen = tmux.wait_for("the exit status", "EXIT=130");
    assert!(screen.contains(&format!("cancelling job {id}")), "{screen}");
}

#[test]
fn a_second_ctrl_c_within_a_second_or_detach_leaves_the_job_running_and_says_how_to_cancel_it() {
    if !tmux_present() {
        return;
    }
    let cluster = Cluster::start(&[]);
    let tmux = Tmux(format!("gantry-detach-{}", cluster.port));
    let id = run_in_tmux(&cluster, &tmux, "");
    tmux.run(&["send-keys", "-t", "top", "C-c"]);
    tmux.wait_for("the cancellation offered", &format!("cancelling job {id}"));
    tmux.run(&["send-keys", "-t", "top", "C-c"]);
    tmux.wait_for("the detach said", &format!("job {id} keeps running: gantry cancel {id}"));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(state(&cluster, &id), "\"running\"", "left running");
    drop(tmux);

    let tmux = Tmux(format!("gantry-detach2-{}", cluster.port));
    let second = run_in_tmux(&cluster, &tmux, "--detach");
    tmux.run(&["send-keys", "-t", "top", "C-c"]);
    tmux.wait_for("the detach said", &format!("job {second} keeps running: gantry cancel {second}"));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(state(&cluster, &second), "\"running\"", "--detach leaves it running");
}
