//! The working directory travels with the job (issue 22, point 1): `gantry run` in a directory
//! runs its files in a private copy on the node; an unchanged directory uploads nothing new;
//! unsafe directories are refused by the client and unsafe manifests by the server; another
//! team reads nothing of an upload.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use crate::harness::{Cluster, command, outside_tmp};

/// `gantry ARGS` run in `dir`.
fn gantry_in(cluster: &Cluster, dir: &Path, args: &[&str]) -> Output {
    command(cluster.home.path()).current_dir(dir).args(args).output().expect("run gantry")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_script_of_the_current_directory_runs_there_and_an_unchanged_one_uploads_nothing_new() {
    let cluster = Cluster::start(&[]);
    // As `cd $(mktemp -d)`: under /tmp, which the job does not see (it gets a copy).
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("eval.py"), "print(\"hi\")\n").expect("eval.py");
    let train = dir.path().join("train.sh");
    std::fs::write(&train, "#!/bin/sh\necho trained in $(basename $(pwd))\n").expect("train.sh");
    std::fs::set_permissions(&train, std::fs::Permissions::from_mode(0o755)).expect("chmod");

    let out = gantry_in(&cluster, dir.path(), &["run", "--gpus", "1", "--", "python3", "eval.py"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hi\n");
    let said = text(&out.stderr);
    assert!(said.contains(": 2 files, ") && said.contains("; 57 B new in 2 files"), "{said}");

    let out = gantry_in(&cluster, dir.path(), &["run", "--", "./train.sh"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("trained in "), "{}", text(&out.stdout));
    let said = text(&out.stderr);
    assert!(said.contains("; 0 B new in 0 files"), "an unchanged directory sends nothing: {said}");

    let id = text(&gantry_in(&cluster, dir.path(), &["submit", "--", "true"]).stdout).trim().to_owned();
    let job: Value = serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).expect("json");
    let upload = &job["job"]["upload"];
    assert_eq!((upload["files"].as_u64(), upload["bytes"].as_u64()), (Some(2), Some(57)), "{job}");
    assert!(upload["digest"].as_str().is_some_and(|d| d.starts_with("sha256:")), "{job}");
    let shown = cluster.gantry(&["job", &id]);
    assert!(shown.contains("upload    2 files, 57 B (sha256:"), "{shown}");
}

#[test]
fn no_upload_starts_empty_and_chdir_starts_in_a_path_on_the_node() {
    let cluster = Cluster::start(&[]);
    let dir = tempfile::tempdir_in(outside_tmp()).expect("temp dir");
    std::fs::write(dir.path().join("eval.py"), "print(1)\n").expect("eval.py");
    let out = gantry_in(&cluster, dir.path(), &["run", "--no-upload", "--", "ls", "-A"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "", "an empty private directory");
    let shared = cluster.shared();
    let out =
        gantry_in(&cluster, dir.path(), &["run", "--chdir", &shared.display().to_string(), "--", "pwd"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), shared.display().to_string());
    assert!(!text(&out.stderr).contains("uploaded"), "nothing is uploaded with --chdir");
}

#[test]
fn a_link_out_of_the_directory_and_a_directory_over_the_cap_are_refused_with_a_sentence() {
    let cluster = Cluster::start(&["--no-agent"]);
    let dir = tempfile::tempdir_in(outside_tmp()).expect("temp dir");
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("passwd")).expect("link");
    std::fs::create_dir_all(dir.path().join(".venv/bin")).expect("venv");
    std::os::unix::fs::symlink("/usr/bin/python3", dir.path().join(".venv/bin/python")).expect("link");
    std::os::unix::fs::symlink("../../train.py", dir.path().join(".venv/bin/up")).expect("link");
    std::fs::write(dir.path().join("train.py"), "print(1)\n").expect("file");
    // Links leaving the directory are left out with a warning naming each and .gantryignore;
    // the rest is uploaded and the job submitted.
    let out = gantry_in(&cluster, dir.path(), &["submit", "--", "cat", "passwd"]);
    let said = text(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("`passwd` is a link to `/etc/passwd`, outside the directory: left out"), "{said}");
    assert!(
        said.contains("`.venv/bin/python` is a link to `/usr/bin/python3`") && said.contains(".gantryignore"),
        "{said}"
    );
    assert!(said.contains("uploaded") && !said.contains("`.venv/bin/up`"), "a link inside is kept: {said}");
    assert_eq!(cluster.jobs().len(), 1);
    std::fs::remove_file(dir.path().join("passwd")).expect("rm");
    let big = std::fs::File::create(dir.path().join("data.bin")).expect("create");
    big.set_len(150 << 20).expect("a sparse 150 MiB file");
    let out = gantry_in(&cluster, dir.path(), &["submit", "--", "true"]);
    assert!(!out.status.success());
    let said = text(&out.stderr);
    assert!(
        said.contains("is 150.0 MiB, over the upload cap of 100.0 MiB; declare large files as inputs"),
        "{said}"
    );
    assert_eq!(cluster.jobs().len(), 1, "nothing more was submitted");
}

#[test]
fn the_server_refuses_unsafe_manifests_and_another_team_reads_nothing_of_an_upload() {
    let cluster = Cluster::start(&["--no-agent"]);
    let vision = cluster.gantry(&["token", "create", "--team", "vision"]).trim().to_owned();
    let nlp = cluster.gantry(&["token", "create", "--team", "nlp"]).trim().to_owned();
    let http = cluster.http();
    let url = |path: &str| format!("{}{path}", cluster.url());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let bytes = b"print('secret')\n".to_vec();
    let sha = gantry_api::upload::hex_sha256(&bytes);
    rt.block_on(async {
        let put = http.put(url(&format!("/v1/uploads/blobs/{sha}"))).bearer_auth(&vision);
        assert_eq!(put.body(bytes.clone()).send().await.expect("put").status(), 204);
        let wrong = gantry_api::upload::hex_sha256(b"other");
        let put = http.put(url(&format!("/v1/uploads/blobs/{wrong}"))).bearer_auth(&vision);
        assert_eq!(
            put.body(bytes.clone()).send().await.expect("put").status(),
            422,
            "bytes of another digest"
        );
        for (path, why) in [("../eval.py", "`..`"), ("/etc/cron.d/x", "absolute")] {
            let manifest = json!({"entries": [{"path": path, "sha256": sha, "size": bytes.len()}]});
            let resp =
                http.put(url("/v1/uploads/manifest")).bearer_auth(&vision).json(&manifest).send().await;
            let resp = resp.expect("put");
            assert_eq!(resp.status(), 422, "{path}");
            assert!(resp.text().await.expect("body").contains(why), "{path}");
        }
        let link = json!({"entries": [{"path": "l", "link": "../../etc"}]});
        let resp = http.put(url("/v1/uploads/manifest")).bearer_auth(&vision).json(&link).send().await;
        let resp = resp.expect("put");
        assert_eq!(resp.status(), 422);
        assert!(resp.text().await.expect("body").contains("outside the working directory"));
        let big = json!({"entries": [{"path": "big", "sha256": sha, "size": 200u64 << 20}]});
        let resp = http.put(url("/v1/uploads/manifest")).bearer_auth(&vision).json(&big).send().await;
        let said = resp.expect("put").text().await.expect("body");
        assert!(said.contains("200.0 MiB, over the upload cap"), "{said}");
        let too_big = vec![0u8; (100 << 20) + 1];
        let put = http.put(url(&format!("/v1/uploads/blobs/{sha}"))).bearer_auth(&vision).body(too_big);
        assert_eq!(put.send().await.expect("put").status(), 413, "a body over the cap is cut off");

        let manifest = json!({"entries": [{"path": "eval.py", "sha256": sha, "size": bytes.len()}]});
        let resp = http.put(url("/v1/uploads/manifest")).bearer_auth(&vision).json(&manifest).send().await;
        let upload: Value = resp.expect("put").json().await.expect("upload");
        let digest = upload["digest"].as_str().expect("digest").to_owned();
        let own = http.get(url(&format!("/v1/uploads/manifests/{digest}"))).bearer_auth(&vision).send().await;
        assert_eq!(own.expect("get").status(), 200);
        let other = http.get(url(&format!("/v1/uploads/manifests/{digest}?team=vision"))).bearer_auth(&nlp);
        assert_eq!(other.send().await.expect("get").status(), 404, "another team's token");
        let other = http.get(url(&format!("/v1/uploads/manifests/{digest}"))).bearer_auth(&nlp);
        assert_eq!(other.send().await.expect("get").status(), 404, "its own team holds no such upload");
        let asked = http.post(url("/v1/uploads/missing")).bearer_auth(&nlp).json(&json!({"digests": [sha]}));
        let asked: Value = asked.send().await.expect("post").json().await.expect("json");
        assert_eq!(asked["missing"], json!([sha]), "a digest tells another team nothing");
        let job = json!({"command": ["true"], "upload": upload, "wait_for_capacity": true});
        let resp = http.post(url("/v1/jobs")).bearer_auth(&nlp).json(&job).send().await.expect("post");
        assert_eq!(resp.status(), 422, "another team cannot start a job in the upload");
        let resp = http.post(url("/v1/jobs")).bearer_auth(&vision).json(&job).send().await.expect("post");
        assert_eq!(resp.status(), 201);
        let lied = json!({"command": ["true"], "wait_for_capacity": true,
            "upload": {"digest": digest, "files": 1, "bytes": 1}});
        let resp = http.post(url("/v1/jobs")).bearer_auth(&vision).json(&lied).send().await.expect("post");
        assert_eq!(resp.status(), 422, "the client's word for the size is checked");
        let agent = http.get(url("/v1/agent/jobs/1/upload")).bearer_auth(&vision).send().await.expect("get");
        assert_eq!(agent.status(), 403, "a user token is no node credential");
    });
}

#[test]
fn apply_runs_the_file_in_a_copy_of_its_directory_and_a_changed_directory_changes_the_job() {
    let cluster = Cluster::start(&["--no-agent"]);
    let dir = tempfile::tempdir_in(outside_tmp()).expect("temp dir");
    std::fs::write(dir.path().join("job.yaml"), "name: eval\ncommand: [python3, eval.py]\n")
        .expect("job.yaml");
    std::fs::write(dir.path().join("eval.py"), "print(1)\n").expect("eval.py");
    let out = gantry_in(&cluster, dir.path(), &["apply", "-f", "job.yaml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    let id = said.strip_prefix("job ").and_then(|s| s.strip_suffix(" created\n")).expect(&said).to_owned();
    let out = gantry_in(&cluster, dir.path(), &["apply", "-f", "job.yaml"]);
    assert_eq!(text(&out.stdout), format!("job {id} unchanged\n"), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("0 B new in 0 files"), "{}", text(&out.stderr));
    std::fs::write(dir.path().join("eval.py"), "print(2)\n").expect("eval.py");
    let out = gantry_in(&cluster, dir.path(), &["apply", "-f", "job.yaml"]);
    assert_eq!(text(&out.stdout), format!("job {id} configured\n"), "{}", text(&out.stderr));
    let job: Value = serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).expect("json");
    assert_eq!(job["job"]["upload"]["files"], 2, "{job}");
}
