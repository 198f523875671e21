//! One Unix user per team: a job of one team against a running job of another, the same team
//! twice, an explicit `--job-user`, and a team user that cannot be made. All need root.

use std::collections::BTreeMap;

use gantry_store::{JobState, NewJob, Store, SubmitRequest};

use crate::runner::{Harness, Setup, start_with, until};
use crate::sandbox::{finished, log, marker, needs_root, sleepers};

fn submit_as(store: &dyn Store, team: &str, command: &str, env: &[(&str, &str)]) -> i64 {
    let job = NewJob {
        team: team.into(),
        name: "team-user".into(),
        spec: SubmitRequest {
            command: vec!["sh".into(), "-c".into(), command.into()],
            env: env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            ..NewJob::default().spec
        },
        submitted_at: gantry_server::now_ms(),
        ..NewJob::default()
    };
    store.submit(&job).expect("submit").0
}

/// What a job of `team` can do to the job whose pid and directory are in `shared`: one line
/// each, and its user first.
async fn probe(h: &Harness, team: &str) -> Vec<String> {
    let script = format!(
        "id -un; pid=$(cat {s}/a-pid); dir=$(cat {s}/a-dir); \
         if grep -qz alpha-secret /proc/$pid/environ; then echo environ-read; else echo environ-denied; fi; \
         if cat /proc/$pid/maps >/dev/null; then echo maps-read; else echo maps-denied; fi; \
         if kill -0 $pid 2>/dev/null; then echo signalled; else kill -0 $pid 2>&1 | tr '\\n' ' '; echo; fi; \
         if cat $dir/private >/dev/null || ls $dir >/dev/null; then echo dir-read; else echo dir-denied; fi",
        s = h.shared.display()
    );
    let id = submit_as(&*h.store, team, &script, &[]);
    assert_eq!(finished(h, id).await.state, JobState::Succeeded, "{}", log(h, id, "stderr"));
    log(h, id, "stdout").lines().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_another_team_cannot_read_the_environment_signal_or_enter_a_running_job() {
    if needs_root("a_job_of_another_team_cannot_read_the_environment_signal_or_enter_a_running_job") {
        return;
    }
    let h = start_with(Setup::default()).await;
    let m = marker(3001);
    let s = h.shared.display();
    let victim = format!(
        "umask 022; echo private > private; id -un > {s}/a-user; pwd > {s}/a-dir; echo $$ > {s}/a-pid.tmp; \
         mv {s}/a-pid.tmp {s}/a-pid; exec sleep {m}"
    );
    let a = submit_as(&*h.store, "alpha", &victim, &[("SECRET", "alpha-secret")]);
    until("the victim's pid", || h.shared.join("a-pid").exists().then_some(())).await;

    let other = probe(&h, "bravo").await;
    assert_eq!(other[0], "gantry-t-bravo", "{other:?}");
    assert_eq!(other[1..3], ["environ-denied", "maps-denied"], "{other:?}");
    assert!(other[3].contains("Operation not permitted"), "kill -0 fails with EPERM: {other:?}");
    assert_eq!(other[4], "dir-denied", "{other:?}");
    assert_eq!(sleepers(&m).len(), 1, "the victim still runs");

    // The same probe from the victim's own team succeeds: it is the user that keeps them apart.
    let same = probe(&h, "alpha").await;
    let victim_user = std::fs::read_to_string(h.shared.join("a-user")).expect("user");
    assert_eq!((same[0].as_str(), victim_user.trim()), ("gantry-t-alpha", "gantry-t-alpha"));
    assert_eq!(same[1..], ["environ-read", "maps-read", "signalled", "dir-read"], "{same:?}");
    h.store.cancel(a, gantry_server::now_ms()).expect("cancel");
    assert_eq!(finished(&h, a).await.state, JobState::Cancelled);
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_job_user_wins_over_the_teams_own_user() {
    if needs_root("an_explicit_job_user_wins_over_the_teams_own_user") {
        return;
    }
    let job_users = BTreeMap::from([("mapped".to_owned(), "nobody".to_owned())]);
    let h = start_with(Setup { job_users, ..Setup::default() }).await;
    let mapped = submit_as(&*h.store, "mapped", "id -un", &[]);
    let own = submit_as(&*h.store, "Unmapped Team", "id -un", &[]);
    for id in [mapped, own] {
        assert_eq!(finished(&h, id).await.state, JobState::Succeeded, "{}", log(&h, id, "stderr"));
    }
    assert_eq!(log(&h, mapped, "stdout"), "nobody\n");
    let user = gantry_agent::runner::team_user::name("Unmapped Team");
    assert!(user.starts_with("gantry-t-unmapped-te--"), "{user}");
    assert_eq!(log(&h, own, "stdout"), format!("{user}\n"));
    let _ = h.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_user_that_cannot_be_made_fails_the_job_with_the_reason() {
    if needs_root("a_team_user_that_cannot_be_made_fails_the_job_with_the_reason") {
        return;
    }
    // A group of the user's name makes `useradd --user-group` refuse.
    let user = "gantry-t-clash";
    if std::process::Command::new("id").arg(user).output().expect("id").status.success() {
        eprintln!("note: {user} exists here; the test cannot provoke a failure");
        return;
    }
    let _ = std::process::Command::new("groupadd").args(["--system", user]).status();
    let h = start_with(Setup::default()).await;
    let id = submit_as(&*h.store, "clash", "echo ran", &[]);
    let job = finished(&h, id).await;
    let _ = std::process::Command::new("groupdel").arg(user).status();
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    let reason = job.reason.unwrap_or_default();
    assert!(reason.contains("cannot create the job user gantry-t-clash"), "{reason}");
    assert_eq!(log(&h, id, "stdout"), "", "the job never ran");
    let _ = h.stop.send(true);
}

#[test]
fn a_team_user_made_by_an_agent_for_another_team_is_refused() {
    use gantry_agent::runner::{team_user, users};
    if needs_root("a_team_user_made_by_an_agent_for_another_team_is_refused") {
        return;
    }
    // As if another team's name had hashed to this team's user name.
    let (team, user) = ("hashclash", "gantry-t-hashclash");
    let foreign = format!("{}{}", team_user::COMMENT_PREFIX, "0".repeat(64));
    let made = std::process::Command::new("useradd")
        .args(["--system", "--no-create-home", "--user-group", "--comment", &foreign, user])
        .output()
        .expect("useradd");
    let result = users::resolve_or_create_for_team(team);
    if made.status.success() {
        let _ = std::process::Command::new("userdel").arg(user).status();
    }
    let err = result.expect_err("made for another team");
    assert!(err.to_string().contains("made for another team"), "{err}");
}
