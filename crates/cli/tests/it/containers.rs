//! Jobs in containers (issue 40), end to end on `gantry up`: an image built here from Debian's
//! static busybox is pushed by skopeo to Debian's docker-registry on loopback (named with
//! `--insecure-registry`), and `gantry run --image` runs a command in it through the node's OCI
//! runtime, as the team's user, its working directory bound in; the job records the digest it
//! ran; a bad reference is refused at submission; an image on the node's loopback that no admin
//! opened is refused by the egress guard.

use std::time::Duration;

use crate::harness::{Cluster, eventually};

#[path = "../../../image/testing.rs"]
mod testing;

#[test]
fn gantry_run_image_runs_the_command_in_the_pulled_image_and_the_job_records_its_digest() {
    let Some((registry_bin, skopeo, _runc, busybox)) = testing::tools() else { return };
    let work = tempfile::tempdir().expect("temp dir");
    let layout = work.path().join("layout");
    let manifest = testing::layout(&layout, &busybox);
    let (_registry, port) = testing::start_registry(&registry_bin, work.path());
    let image = format!("127.0.0.1:{port}/team/busybox:v1");
    testing::push(&skopeo, &layout, &image);
    let registry = format!("127.0.0.1:{port}");
    let cluster = Cluster::start_with_env(&["--insecure-registry", &registry], &[("GANTRY_LOG", "info")]);
    eventually(Duration::from_secs(20), "the local agent to register", || {
        cluster.gantry(&["nodes"]).contains("ready").then_some(())
    });

    let out = cluster.try_gantry(&[
        "run",
        "--image",
        &image,
        "--",
        "sh",
        "-c",
        "cat /etc/marker; echo FROM_IMAGE=$FROM_IMAGE; echo uid=$(id -u); echo job=$GANTRY_JOB_ID; pwd",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("from layer two"), "the image's file system: {stdout}\n{stderr}");
    assert!(stdout.contains("FROM_IMAGE=yes"), "the image's environment: {stdout}");
    assert!(!stdout.contains("uid=0\n"), "the job's user, not root: {stdout}");
    // The pull ran while the job waited, before it held its node: a staging.
    let log = std::fs::read_to_string(cluster.data_dir().join("gantry.log")).unwrap_or_default();
    assert!(log.contains("pulled a waiting job's image"), "the pull was not staged ahead");
    let jobs = cluster.jobs();
    let job = jobs.iter().find(|j| j["image"].is_object()).expect("the job with its image");
    assert_eq!(job["image"]["ref"], image.as_str());
    eventually(Duration::from_secs(10), "the job to record the digest it ran", || {
        let jobs = cluster.jobs();
        let job = jobs.iter().find(|j| j["image"].is_object())?;
        (job["image"]["digest"] == manifest.as_str()).then_some(())
    });

    let id = job["id"].to_string();
    let shown = cluster.gantry(&["describe", "job", &id]);
    assert!(shown.contains(&format!("image     {image}  {manifest}")), "{shown}");

    // The node lists what it holds.
    // (No attempt runs in it once the job has ended: its container went with it.)
    let listed = eventually(Duration::from_secs(10), "the node to report its image, unused", || {
        let text = cluster.gantry(&["images", "-o", "json"]);
        let images: Vec<serde_json::Value> = serde_json::from_str(&text).ok()?;
        images.into_iter().find(|i| i["digest"] == manifest.as_str() && i["in_use"] == 0)
    });
    assert_eq!(listed["ref"], format!("{image}@{manifest}").as_str());
    assert!(listed["size"].as_u64().unwrap_or(0) > 100_000, "busybox's bytes: {listed}");
    assert_eq!(listed["jobs"], serde_json::json!([]), "no job runs in it now");
    let table = cluster.gantry(&["images"]);
    assert!(table.contains("team/busybox:v1") && table.contains("IN USE"), "{table}");

    // A team's volume is bound into the container at its path, read-only when asked, and what
    // the container wrote there a job on the node reads.
    if gantry_agent::runner::sandbox::running_as_root() {
        cluster.gantry(&["volume", "create", "box"]);
        let script = "echo from-the-container > /mnt/box/note && echo ok";
        let wrote = cluster.try_gantry(&[
            "run",
            "--image",
            &image,
            "--volume",
            "box:/mnt/box",
            "--",
            "sh",
            "-c",
            script,
        ]);
        assert!(wrote.status.success(), "{}", String::from_utf8_lossy(&wrote.stderr));
        let read = cluster.try_gantry(&["run", "--volume", "box:/mnt/box:ro", "--", "cat", "/mnt/box/note"]);
        assert_eq!(String::from_utf8_lossy(&read.stdout).trim(), "from-the-container");
        let script = "touch /mnt/box/x 2>/dev/null && echo wrote || echo read-only";
        let ro = cluster.try_gantry(&[
            "run",
            "--image",
            &image,
            "--volume",
            "box:/mnt/box:ro",
            "--",
            "sh",
            "-c",
            script,
        ]);
        assert_eq!(String::from_utf8_lossy(&ro.stdout).trim(), "read-only");
    }

    // A container past its memory limit is reported as such, not as a bare exit status.
    let hog = "x=$(head -c 300000000 /dev/zero | tr '\\0' x); echo survived";
    let oom = cluster.try_gantry(&["run", "--image", &image, "--memory", "64M", "--", "sh", "-c", hog]);
    assert!(!oom.status.success(), "{}", String::from_utf8_lossy(&oom.stdout));
    let jobs = cluster.jobs();
    let killed = jobs.iter().filter_map(|j| j["reason"].as_str()).find(|r| r.contains("out of memory"));
    assert!(killed.is_some_and(|r| r.contains("64 MiB")), "{jobs:?}");

    // Its exit status is the container's.
    let failed = cluster.try_gantry(&["run", "--image", &image, "--", "sh", "-c", "exit 3"]);
    assert_eq!(failed.status.code(), Some(3), "{}", String::from_utf8_lossy(&failed.stderr));

    // --entrypoint replaces the image's; the image's WORKDIR is where a job without an upload
    // starts, --container-workdir where it asks to.
    let echo =
        cluster.gantry(&["run", "--image", &image, "--entrypoint", "/bin/echo", "--", "hello", "there"]);
    assert!(echo.contains("hello there"), "{echo}");
    let here = cluster.gantry(&["run", "--no-upload", "--image", &image, "--", "pwd"]);
    assert_eq!(here.trim(), "/", "the image's WORKDIR");
    let asked = cluster.gantry(&["run", "--image", &image, "--container-workdir", "/etc", "--", "pwd"]);
    assert_eq!(asked.trim(), "/etc");
    let lone = cluster.try_gantry(&["submit", "--entrypoint", "/bin/echo", "--", "x"]);
    assert!(!lone.status.success(), "--entrypoint without an image");

    // A malformed reference is refused at submission, with a sentence naming the flag.
    let bad = cluster.try_gantry(&["submit", "--image", "Not A Ref", "--", "true"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--image"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    // A registry on the node's loopback that no admin named is not reached.
    let hidden = format!("127.0.0.2:{port}/team/busybox:v1");
    let refused = cluster.try_gantry(&["run", "--image", &hidden, "--", "true"]);
    assert!(!refused.status.success());
    let jobs = cluster.jobs();
    let job = jobs.iter().find(|j| j["image"]["ref"] == hidden.as_str()).expect("the refused job");
    let reason = job["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("may not reach the node"), "{reason}");
}

#[test]
fn a_private_registry_is_pulled_from_with_the_teams_secret_and_never_with_another_teams() {
    let Some((registry_bin, skopeo, _runc, busybox)) = testing::tools() else { return };
    if testing::tool("htpasswd").is_none() {
        assert!(
            std::env::var_os("GANTRY_REQUIRE_CONTAINER_TESTS").is_none(),
            "htpasswd (apache2-utils) is missing"
        );
        eprintln!("SKIPPED: needs htpasswd (apache2-utils)");
        return;
    }
    let work = tempfile::tempdir().expect("temp dir");
    let layout = work.path().join("layout");
    testing::layout(&layout, &busybox);
    let (_registry, port) = testing::start_private_registry(&registry_bin, work.path(), "alice", "s3cret");
    let image = format!("127.0.0.1:{port}/vision/private:v1");
    testing::push_as(&skopeo, &layout, &image, Some("alice:s3cret"));
    let cluster = Cluster::start(&["--insecure-registry", &format!("127.0.0.1:{port}")]);
    let vision = cluster.gantry(&["token", "create", "--team", "vision"]).trim().to_owned();
    let nlp = cluster.gantry(&["token", "create", "--team", "nlp"]).trim().to_owned();
    let as_team = |token: &str, args: &[&str]| {
        crate::harness::command(cluster.home.path())
            .env("GANTRY_TOKEN", token)
            .args(args)
            .output()
            .expect("gantry")
    };
    eventually(Duration::from_secs(20), "the local agent to register", || {
        cluster.gantry(&["nodes"]).contains("ready").then_some(())
    });
    let set = as_team(&vision, &["secret", "set", "reg", "username=alice", "password=s3cret"]);
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));

    // Without credentials the registry refuses, and the job says what to do.
    let anonymous = as_team(&vision, &["run", "--image", &image, "--", "true"]);
    assert!(!anonymous.status.success());
    let jobs = cluster.jobs();
    let reason = jobs.iter().find_map(|j| j["reason"].as_str().filter(|r| r.contains("pulling its image")));
    assert!(reason.is_some_and(|r| r.contains("--registry-secret")), "{jobs:?}");

    // With the team's secret it runs.
    let run =
        as_team(&vision, &["run", "--image", &image, "--registry-secret", "reg", "--", "cat", "/etc/marker"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(String::from_utf8_lossy(&run.stdout).contains("from layer two"));

    // `gantry images` shows the team its image, and another team nothing of it.
    let seen = |token: &str| {
        let out = as_team(token, &["images", "-o", "json"]);
        String::from_utf8_lossy(&out.stdout).contains("vision/private")
    };
    eventually(Duration::from_secs(10), "the node to report the image", || seen(&vision).then_some(()));
    assert!(!seen(&nlp), "another team sees nothing of a team's images");

    // Another team cannot name it, and its anonymous pull of the same image is refused though the
    // node holds every layer.
    let other = as_team(&nlp, &["submit", "--image", &image, "--registry-secret", "reg", "--", "true"]);
    assert!(!other.status.success());
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("no secret `reg`"),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    let other = as_team(&nlp, &["run", "--image", &image, "--", "cat", "/etc/marker"]);
    assert!(!other.status.success(), "another team ran a private image it has no login for");
    assert!(!String::from_utf8_lossy(&other.stdout).contains("from layer two"));
}

#[test]
fn a_services_replicas_run_its_image_and_a_new_image_rolls_out_as_a_new_generation() {
    let Some((registry_bin, skopeo, _runc, busybox)) = testing::tools() else { return };
    let work = tempfile::tempdir().expect("temp dir");
    let layout = work.path().join("layout");
    testing::layout(&layout, &busybox);
    let (_registry, port) = testing::start_registry(&registry_bin, work.path());
    let (v1, v2) = (format!("127.0.0.1:{port}/ml/web:v1"), format!("127.0.0.1:{port}/ml/web:v2"));
    testing::push(&skopeo, &layout, &v1);
    testing::push(&skopeo, &layout, &v2);
    let s = crate::services::Serving::start(&["--insecure-registry", &format!("127.0.0.1:{port}")]);
    let file = s.cluster.shared().join("web.yaml");
    let write = |image: &str| {
        let text = format!(
            "name: web\nteam: ml\nport: 8000\nupload: false\nimage: {image}\n\
             command: [sh, -c, \"exec busybox httpd -f -p $PORT -h /etc\"]\n\
             readiness: {{path: /marker, interval_s: 0.2, timeout_s: 1, failure_threshold: 2}}\n"
        );
        std::fs::write(&file, text).expect("service file");
    };
    write(&v1);
    s.apply(&file);
    s.until("web", "a ready replica of the image", 60, |v| crate::services::ready(v) >= 1);
    let (status, body) = s.get("/ml/web/marker", &s.token).expect("through the gateway");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("from layer two"), "served from the image's file system: {body}");
    let jobs = s.cluster.jobs();
    assert!(jobs.iter().any(|j| j["image"]["ref"] == v1.as_str()), "the replica job carries the image");
    let replica = jobs.iter().find(|j| j["image"]["ref"] == v1.as_str()).map(|j| j["id"].clone());
    let held = eventually(Duration::from_secs(10), "the node to list the replica in its image", || {
        let images: Vec<serde_json::Value> =
            serde_json::from_str(&s.cluster.gantry(&["images", "-o", "json"])).ok()?;
        images.into_iter().find(|i| i["jobs"].as_array().is_some_and(|j| !j.is_empty()))
    });
    assert_eq!(held["jobs"][0], replica.expect("replica"), "{held}");
    assert_eq!(held["in_use"], 1);

    write(&v2);
    s.apply(&file);
    s.until("web", "the new image's generation ready and the old one gone", 60, |v| {
        let replicas = v["replica_list"].as_array().cloned().unwrap_or_default();
        replicas.iter().all(|r| r["generation"] == 2) && crate::services::ready(v) >= 1
    });
    let jobs = s.cluster.jobs();
    assert!(jobs.iter().any(|j| j["image"]["ref"] == v2.as_str() && j["state"] == "running"), "{jobs:?}");
}
