//! `gantry db migrate --from DATA_DIR --to postgres://…`: a SQLite cluster with jobs, teams and
//! tokens is stopped, copied into a throwaway PostgreSQL, and `gantry server --db` on it gives
//! the same `jobs`, `usage` and `audit verify` answers, to the same tokens. Bad input is refused
//! with a sentence and writes nothing.

use std::time::Duration;

use crate::harness::{Cluster, command, eventually};
use crate::pg_harness;

fn tables(server: &pg_harness::TempPostgres, url: &str) -> String {
    server
        .psql(url, "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()")
        .expect("count tables")
}

#[test]
fn a_sqlite_cluster_moved_to_postgres_answers_jobs_usage_and_audit_verify_as_before() {
    let Some(server) = pg_harness::shared() else { return };
    let mut cluster = Cluster::start(&["--simulated-gpus", "2xA100-80GB"]);
    let vision =
        cluster.gantry(&["token", "create", "--team", "vision", "--user", "alice"]).trim().to_owned();
    let as_alice = |cluster: &Cluster, args: &[&str]| {
        let out = command(cluster.home.path()).env("GANTRY_TOKEN", &vision).args(args).output().expect("run");
        assert!(out.status.success(), "gantry {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    as_alice(&cluster, &["submit", "--gpus", "1", "--", "sh", "-c", "echo vision"]);
    cluster.gantry(&["submit", "--gpus", "1", "--team", "nlp", "--", "sleep", "1"]);
    cluster.gantry(&["submit", "--gpus", "2", "--team", "nlp", "--", "true"]);
    let held = cluster.gantry(&["submit", "--gpus", "1", "--team", "nlp", "--", "sleep", "600"]);
    cluster.gantry(&["cancel", held.trim()]);
    eventually(Duration::from_secs(60), "the jobs to end", || {
        let jobs = cluster.jobs();
        (jobs.len() == 4
            && jobs.iter().all(|j| ["succeeded", "cancelled"].contains(&j["state"].as_str().unwrap_or(""))))
        .then_some(())
    });
    let answers = |cluster: &Cluster| {
        [
            cluster.gantry(&["jobs", "-o", "json"]),
            cluster.gantry(&["usage", "-o", "json"]),
            cluster.gantry(&["audit", "verify"]),
            as_alice(cluster, &["jobs", "-o", "json"]),
        ]
    };
    let before = answers(&cluster);

    // Refused while the cluster runs: it holds the data directory's lock.
    let url = server.create_database();
    let data = cluster.data_dir().display().to_string();
    let home = cluster.home.path().to_owned();
    let migrate =
        |to: &str| command(&home).args(["db", "migrate", "--from", &data, "--to", to]).output().expect("run");
    let out = migrate(&url);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stop it first"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(tables(server, &url), "0", "nothing written beside a running cluster");

    cluster.terminate();
    let out = migrate(&url);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("copied"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A second run into the now filled database is refused.
    let again = migrate(&url);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("not empty"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    // The same HOME, port and data directory (its CA and the client config), the state in PostgreSQL.
    let port = cluster.port;
    *cluster.args_mut() = ["server", "--listen", &format!("127.0.0.1:{port}"), "--data-dir", &data]
        .into_iter()
        .map(str::to_owned)
        .chain(["--db".to_owned(), url.clone(), "--gateway-listen".into(), "none".into()])
        .collect();
    cluster.restart();
    let after = answers(&cluster);
    assert_eq!(after[0], before[0], "gantry jobs -o json");
    assert_eq!(after[1], before[1], "gantry usage -o json");
    assert_eq!(after[2], before[2], "gantry audit verify");
    assert_eq!(after[3], before[3], "alice's old token still authenticates and sees what it saw");
    // And the moved cluster keeps going: a new job gets the next id.
    let next = as_alice(&cluster, &["submit", "--wait-for-capacity", "--", "true"]);
    assert_eq!(next.trim(), "5", "ids continue after the highest copied one");
}

#[test]
fn db_migrate_refuses_a_missing_data_dir_and_a_url_that_is_not_postgres_with_a_sentence() {
    let home = tempfile::tempdir().expect("home");
    let run = |args: &[&str]| command(home.path()).args(args).output().expect("run gantry");
    let missing = home.path().join("nowhere").display().to_string();
    let out = run(&["db", "migrate", "--from", &missing, "--to", "postgres://gantry@127.0.0.1:1/x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds no SQLite store"), "{err}");
    assert!(!home.path().join("nowhere").exists(), "nothing created");
    let out = run(&["db", "migrate", "--from", &missing, "--to", "mysql://root@db/gantry"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--to must be a PostgreSQL URL"), "{err}");
}
