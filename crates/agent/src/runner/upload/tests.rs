//! The agent trusts the server no more than the server trusts the client: a fake server on
//! loopback sends manifests and files, and only the right ones become a working directory.

use std::os::unix::fs::PermissionsExt;

use axum::Router;
use axum::routing::get;
use gantry_api::upload::{Entry, Upload};

use super::*;

/// Serves `manifest` for job 7 and `body` for every file of it; returns the client.
async fn serve(manifest: Manifest, body: &'static [u8]) -> Client {
    let router = Router::new()
        .route("/v1/agent/jobs/7/upload", get(move || async move { axum::Json(manifest) }))
        .route("/v1/agent/jobs/7/upload/{sha}", get(move || async move { body }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await });
    Client::new(&format!("http://{addr}"), "node-credential").expect("client")
}

fn assignment(manifest: &Manifest) -> Assignment {
    let upload = manifest.check(u64::MAX).expect("a safe manifest");
    Assignment {
        job_id: 7,
        attempt: 1,
        command: vec!["true".into()],
        gpu_uuids: Vec::new(),
        gpu_memory_mib: 0,
        gpu_compute_pct: 0,
        team: "t".into(),
        user: None,
        memory_mib: 0,
        cpu_milli: 0,
        pids_limit: None,
        env: Default::default(),
        log_limit_bytes: 0,
        time_limit_s: None,
        array: None,
        workdir: None,
        gang: None,
        elastic: false,
        upload: Some(upload),
        chdir: None,
        port: None,
        inputs: Vec::new(),
        outputs: Vec::new(),
        launch: Default::default(),
        image: None,
        volumes: Vec::new(),
    }
}

fn script_manifest() -> Manifest {
    let sha = upload::hex_sha256(b"echo ok\n");
    Manifest { entries: vec![Entry::file("bin/run.sh", sha, 8, true), Entry::link("run", "bin/run.sh")] }
}

#[tokio::test]
async fn the_upload_is_written_with_its_modes_and_links() {
    let manifest = script_manifest();
    let client = serve(manifest.clone(), b"echo ok\n").await;
    let dir = tempfile::tempdir().expect("temp");
    let staging = dir.path().join("7-1.upload");
    assert_eq!(fetch(&client, &assignment(&manifest), &staging).await.expect("fetched"), 8);
    let mode = std::fs::metadata(staging.join("bin/run.sh")).expect("written").permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(std::fs::read(staging.join("run")).expect("through the link"), b"echo ok\n");
}

#[tokio::test]
async fn a_file_of_other_bytes_than_the_manifest_says_leaves_nothing_behind() {
    let manifest = script_manifest();
    let client = serve(manifest.clone(), b"rm -rf /\n").await;
    let dir = tempfile::tempdir().expect("temp");
    let staging = dir.path().join("7-1.upload");
    let err = fetch(&client, &assignment(&manifest), &staging).await.expect_err("other bytes");
    assert!(err.to_string().contains("other bytes than the upload holds"), "{err}");
    assert!(!staging.exists(), "no partial directory");
}

#[tokio::test]
async fn a_manifest_other_than_the_assignments_or_one_leading_outside_is_refused() {
    let manifest = script_manifest();
    let mut a = assignment(&manifest);
    a.upload = Some(Upload { digest: format!("sha256:{}", "0".repeat(64)), files: 1, bytes: 8 });
    let client = serve(manifest, b"echo ok\n").await;
    let dir = tempfile::tempdir().expect("temp");
    let err = fetch(&client, &a, &dir.path().join("s")).await.expect_err("another manifest");
    assert!(err.to_string().contains("the server sent manifest"), "{err}");
    let outside = Manifest { entries: vec![Entry::link("etc", "../../etc")] };
    let client = serve(outside.clone(), b"").await;
    let mut a = assignment(&script_manifest());
    a.upload = Some(Upload { digest: outside.digest(), files: 0, bytes: 0 });
    let err = fetch(&client, &a, &dir.path().join("s")).await.expect_err("outside");
    assert!(err.to_string().contains("outside the working directory"), "{err}");
    assert!(!dir.path().join("s").exists());
}
