//! The safe walk of an output directory: links are never followed, other users' files and
//! other kinds of entry are skipped and counted, and an output over its cap is refused whole.

use std::os::unix::fs::PermissionsExt;

use super::*;

/// A directory of "the job's user" with `a`, `sub/b`, a link to `/etc/passwd` and a link to a
/// directory outside; as root also a file and a directory owned by another user (root). The
/// uid whose files count.
fn output_dir(root: &Path) -> u32 {
    let dir = root.join("out");
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("a"), b"alpha").expect("a");
    std::fs::write(dir.join("sub/b"), b"bravo!").expect("b");
    std::os::unix::fs::symlink("/etc/passwd", dir.join("passwd")).expect("link");
    std::os::unix::fs::symlink("/etc", dir.join("etc")).expect("dir link");
    if !super::super::sandbox::running_as_root() {
        return std::fs::metadata(&dir).expect("meta").uid();
    }
    let nobody = 65534;
    std::fs::write(dir.join("roots"), b"root's").expect("root's file");
    std::fs::create_dir(dir.join("rootdir")).expect("root's dir");
    std::fs::write(dir.join("rootdir/c"), b"c").expect("c");
    for p in ["", "a", "sub", "sub/b"] {
        std::os::unix::fs::chown(dir.join(p), Some(nobody), Some(nobody)).expect("chown");
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    nobody
}

/// What a walk handed on: each file's relative path and bytes.
type Seen = Vec<(String, Vec<u8>)>;

fn collect(dir: &Path, uid: u32, caps: Caps) -> Result<(Tally, Seen), String> {
    let mut seen = Vec::new();
    let tally = walk(dir, uid, caps, &mut |rel, mut file, _| {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| e.to_string())?;
        seen.push((rel, bytes));
        Ok(())
    })?;
    Ok((tally, seen))
}

#[test]
fn the_walk_skips_links_and_other_users_files_and_counts_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let uid = output_dir(tmp.path());
    let (tally, seen) = collect(&tmp.path().join("out"), uid, Caps::default()).expect("walk");
    assert_eq!(seen, [("a".to_owned(), b"alpha".to_vec()), ("sub/b".to_owned(), b"bravo!".to_vec())]);
    let others = if super::super::sandbox::running_as_root() { 2 } else { 0 };
    assert_eq!(
        tally,
        Tally { files: 2, bytes: 11, skipped: 2 + others },
        "two links, and as root root's file and dir"
    );
}

#[test]
fn an_output_over_its_cap_is_refused_with_the_figure_before_anything_is_handed_on() {
    let tmp = tempfile::tempdir().expect("tmp");
    let uid = output_dir(tmp.path());
    let dir = tmp.path().join("out");
    let err = collect(&dir, uid, Caps { bytes: 10, files: 100 }).expect_err("over 10 bytes");
    assert!(err.contains("more than 10 bytes"), "{err}");
    let err = collect(&dir, uid, Caps { bytes: 1 << 30, files: 1 }).expect_err("over 1 file");
    assert!(err.contains("more than 1 files"), "{err}");
    assert_eq!(human_bytes(MAX_BYTES), "10 GiB");
}

#[test]
fn a_directory_replaced_by_a_link_is_not_walked() {
    let tmp = tempfile::tempdir().expect("tmp");
    let uid = output_dir(tmp.path());
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink("/etc", &link).expect("link");
    let err = walk(&link, uid, Caps::default(), &mut |_, _, _| Ok(())).expect_err("a link");
    assert!(err.contains("opening"), "{err}");
}

#[tokio::test]
async fn a_refused_output_uploads_nothing_and_says_why() {
    let tmp = tempfile::tempdir().expect("tmp");
    let uid = output_dir(tmp.path());
    let o = Output::new("model", "s3://bucket/p");
    let caps = Caps { bytes: 4, files: 100 };
    let secret = keys(&[]);
    let done =
        upload_one(&o, &tmp.path().join("out"), uid, &secret, &egress(&[]), caps, Duration::ZERO).await;
    assert_eq!(done.state, OutputState::Failed);
    let error = done.error.unwrap_or_default();
    assert!(error.contains("more than 4 bytes") && error.contains("nothing was uploaded"), "{error}");
}

/// A team secret with S3 keys and `extra`.
fn keys(extra: &[(&str, &str)]) -> super::super::sources::Secret {
    [("AWS_ACCESS_KEY_ID", "k"), ("AWS_SECRET_ACCESS_KEY", "s"), ("AWS_REGION", "us-east-1")]
        .iter()
        .chain(extra)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Where uploads may go: the networks `allowed` (CIDR) and the internet.
fn egress(allowed: &[&str]) -> Arc<super::super::egress::Egress> {
    let nets: Vec<String> = allowed.iter().map(|s| (*s).to_owned()).collect();
    Arc::new(super::super::egress::Egress::new(&nets, &[]).expect("nets"))
}

#[tokio::test]
async fn an_output_without_the_teams_keys_or_to_the_nodes_loopback_uploads_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let uid = output_dir(tmp.path());
    let (url, puts) = failing_s3();
    let o = Output::new("model", "s3://bucket/p");
    let out = tmp.path().join("out");
    // A secret holding only the endpoint (and region): the node's keys are never taken instead.
    let only_endpoint: super::super::sources::Secret =
        [("AWS_ENDPOINT_URL".to_owned(), url.clone()), ("AWS_REGION".to_owned(), "us-east-1".to_owned())]
            .into();
    let done =
        upload_one(&o, &out, uid, &only_endpoint, &egress(&["127.0.0.0/8"]), Caps::default(), Duration::ZERO)
            .await;
    let error = done.error.unwrap_or_default();
    assert!(error.contains("AWS_ACCESS_KEY_ID") && error.contains("nothing was uploaded"), "{error}");
    // Keys, to an endpoint on the node's loopback that no admin opened.
    let secret = keys(&[("AWS_ENDPOINT_URL", url.as_str())]);
    let done = upload_one(&o, &out, uid, &secret, &egress(&[]), Caps::default(), Duration::ZERO).await;
    let error = done.error.unwrap_or_default();
    assert!(error.contains("loopback") && error.contains("--allow-source-net"), "{error}");
    assert!(error.chars().count() <= 300, "{error}");
    assert_eq!(puts.load(std::sync::atomic::Ordering::Relaxed), 0, "no request reached the endpoint");
}

/// An S3 endpoint that answers every request 500; counts the PUTs.
fn failing_s3() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let puts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&puts);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(stream);
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            if first.starts_with("PUT") {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let mut stream = reader.into_inner();
            let _ = stream.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    (url, puts)
}

#[tokio::test]
async fn a_failing_upload_is_tried_six_times_then_recorded_failed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let uid = output_dir(tmp.path());
    let (url, puts) = failing_s3();
    let secret = keys(&[("AWS_ENDPOINT_URL", url.as_str())]);
    let o = Output::new("model", "s3://bucket/p");
    let done = upload_one(
        &o,
        &tmp.path().join("out"),
        uid,
        &secret,
        &egress(&["127.0.0.1"]),
        Caps::default(),
        Duration::ZERO,
    )
    .await;
    assert_eq!(done.state, OutputState::Failed);
    let error = done.error.unwrap_or_default();
    assert!(error.contains("uploading `a` to s3://bucket/p/a") && error.contains("tried 6 times"), "{error}");
    let n = puts.load(std::sync::atomic::Ordering::Relaxed);
    assert!(n >= TRIES as usize, "each of the {TRIES} tries reached the endpoint: {n} PUTs");
    assert_eq!(done.files, None, "nothing recorded as uploaded");
}
