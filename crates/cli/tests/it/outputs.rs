//! Declared outputs uploaded when an attempt ends (issue 22, stage-out), end to end against
//! moto's S3 on loopback: a job's two files, one in a subdirectory, are in the bucket with
//! their bytes once it succeeds; a job cancelled while it runs has what it had written
//! uploaded; a link in the output directory to `/etc/passwd` is not uploaded and is counted.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{Cluster, eventually};
use crate::moto::{Moto, create_bucket, moto, objects};

fn job(cluster: &Cluster, id: &str) -> Value {
    serde_json::from_str(&cluster.gantry(&["job", id, "-o", "json"])).expect("job json")
}

/// The job once it has ended and its first output's upload has too (uploaded or failed): the
/// two are reported apart, the exit (which releases the GPUs) not waiting for the upload.
fn stage_out(cluster: &Cluster, id: &str) -> Value {
    eventually(Duration::from_secs(120), "the job ends and its outputs are uploaded", || {
        let j = job(cluster, id);
        let state = j["job"]["state"].as_str().unwrap_or_default();
        let upload = j["job"]["outputs"][0]["state"].as_str().unwrap_or_default();
        let ended = ["succeeded", "failed", "cancelled"].contains(&state);
        (ended && ["uploaded", "failed"].contains(&upload)).then_some(j)
    })
}

/// A cluster whose team `default` holds the secret `s3` for moto, and the bucket `results`.
fn cluster(moto: &Moto) -> Cluster {
    create_bucket(moto, "results");
    // moto listens on the node's loopback, which jobs' sources reach only when an admin opens it.
    let cluster = Cluster::start(&["--allow-source-net", "127.0.0.1"]);
    let endpoint = format!("AWS_ENDPOINT_URL={}", moto.url);
    let set = ["secret", "set", "s3", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test"];
    cluster.gantry(&[&set[..], &["AWS_REGION=us-east-1", &endpoint, "--team", "default"]].concat());
    cluster
}

fn submit(cluster: &Cluster, prefix: &str, script: &str) -> String {
    let output = format!("model=s3://results/{prefix}");
    let args =
        ["submit", "--no-upload", "--output", &output, "--output-secret", "s3", "--", "sh", "-c", script];
    cluster.gantry(&args).trim().to_owned()
}

#[test]
fn a_finished_jobs_files_are_uploaded_and_a_link_in_its_output_is_skipped() {
    let Some(moto) = moto() else { return };
    let cluster = cluster(&moto);
    let write = "cd \"$GANTRY_OUTPUT_MODEL\" && printf alpha > a && mkdir sub && printf bravo! > sub/b \
                 && ls -ld . | cut -c1-10";
    let two = submit(&cluster, "run-1", write);
    let link = "cd \"$GANTRY_OUTPUT_MODEL\" && ln -s /etc/passwd passwd && printf x > x";
    let linked = submit(&cluster, "run-2", link);

    let done = stage_out(&cluster, &two);
    assert_eq!(done["job"]["state"], "succeeded", "{done}");
    let o = &done["job"]["outputs"][0];
    assert_eq!(o["state"], "uploaded", "{done}");
    assert_eq!(
        (o["files"].as_u64(), o["bytes"].as_u64(), o["skipped"].as_u64()),
        (Some(2), Some(11), Some(0)),
        "{done}"
    );
    assert!(o["uploaded_s"].as_f64().is_some() && o["attempt"].as_u64().is_some(), "{done}");
    let got = objects(&moto, "results", "run-1/");
    let want: Vec<(&str, &str)> = vec![("run-1/a", "alpha"), ("run-1/sub/b", "bravo!")];
    assert_eq!(got.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>(), want);
    assert_eq!(cluster.gantry(&["logs", &two]).trim(), "drwx------", "the directory is the job's alone");
    let text = cluster.gantry(&["job", &two]);
    assert!(text.contains("output    model → s3://results/run-1: uploaded 2 files, 11 bytes"), "{text}");

    let done = stage_out(&cluster, &linked);
    let o = &done["job"]["outputs"][0];
    assert_eq!(
        (o["state"].as_str(), o["files"].as_u64(), o["skipped"].as_u64()),
        (Some("uploaded"), Some(1), Some(1)),
        "{done}"
    );
    let got = objects(&moto, "results", "run-2/");
    assert_eq!(got.keys().collect::<Vec<_>>(), ["run-2/x"], "the link is not uploaded: {got:?}");
    // Nothing is left on the node.
    let work = cluster.outside.path().join("work");
    let left: Vec<String> = leftovers(&work);
    assert!(left.is_empty(), "output directories are removed: {left:?}");
}

#[test]
fn a_job_cancelled_while_it_runs_has_what_it_wrote_uploaded() {
    let Some(moto) = moto() else { return };
    let cluster = cluster(&moto);
    let id = submit(
        &cluster,
        "cut",
        "printf partial > \"$GANTRY_OUTPUT_MODEL/checkpoint\" && echo written && sleep 300",
    );
    eventually(Duration::from_secs(60), "the job has written its file", || {
        cluster.gantry(&["logs", &id]).contains("written").then_some(())
    });
    cluster.gantry(&["cancel", &id]);
    let done = stage_out(&cluster, &id);
    assert_eq!(done["job"]["state"], "cancelled", "{done}");
    let o = &done["job"]["outputs"][0];
    assert_eq!((o["state"].as_str(), o["files"].as_u64()), (Some("uploaded"), Some(1)), "{done}");
    let got = objects(&moto, "results", "cut/");
    assert_eq!(got.get("cut/checkpoint").map(String::as_str), Some("partial"), "{got:?}");
}

/// Paths under the work root that are output directories (`<job>-<attempt>.out`).
fn leftovers(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.display().to_string().ends_with(".out") {
            out.push(p.display().to_string());
        }
        if p.is_dir() && !p.is_symlink() {
            out.extend(leftovers(&p));
        }
    }
    out
}
