use super::*;
use gantry_api::upload::Entry;

fn uploads() -> (tempfile::TempDir, Uploads) {
    let dir = tempfile::tempdir().expect("temp dir");
    let uploads = Uploads::new(dir.path().join("uploads"), upload::LIMIT_BYTES);
    (dir, uploads)
}

fn one_file(bytes: &[u8]) -> (String, Manifest) {
    let sha = upload::hex_sha256(bytes);
    let manifest = Manifest { entries: vec![Entry::file("eval.py", sha.clone(), bytes.len() as u64, false)] };
    (sha, manifest)
}

#[test]
fn a_blob_is_kept_only_under_the_digest_of_its_bytes() {
    let (_dir, u) = uploads();
    let (sha, _) = one_file(b"print('hi')\n");
    let other = upload::hex_sha256(b"something else");
    let err = u.put_blob("vision", &other, b"print('hi')\n").expect_err("wrong digest");
    assert!(err.to_string().contains("not"), "{err}");
    assert_eq!(u.missing("vision", std::slice::from_ref(&sha)).expect("asks"), std::slice::from_ref(&sha));
    u.put_blob("vision", &sha, b"print('hi')\n").expect("kept");
    assert!(u.missing("vision", std::slice::from_ref(&sha)).expect("asks").is_empty());
}

#[test]
fn another_team_holds_nothing_of_what_one_team_uploaded() {
    let (_dir, u) = uploads();
    let (sha, manifest) = one_file(b"secret");
    u.put_blob("vision", &sha, b"secret").expect("kept");
    let summary = u.put_manifest("vision", &manifest).expect("kept");
    assert_eq!(u.missing("nlp", std::slice::from_ref(&sha)).expect("asks"), std::slice::from_ref(&sha));
    assert!(matches!(u.manifest("nlp", &summary.digest), Err(UploadError::NotFound(_))));
    assert!(matches!(u.blob("nlp", &sha), Err(UploadError::NotFound(_))));
    assert!(matches!(u.confirm("nlp", &summary), Err(UploadError::NotFound(_))));
    u.confirm("vision", &summary).expect("the team's own");
    assert!(u.names("vision", &summary.digest, &sha).expect("read"), "the manifest names its file");
    assert!(!u.names("vision", &summary.digest, &upload::hex_sha256(b"other")).expect("cached"));
    assert!(matches!(u.names("nlp", &summary.digest, &sha), Err(UploadError::NotFound(_))));
}

#[test]
fn a_manifest_is_refused_when_a_file_is_missing_or_of_another_size_or_the_paths_climb_out() {
    let (_dir, u) = uploads();
    let (sha, mut manifest) = one_file(b"abc");
    let err = u.put_manifest("vision", &manifest).expect_err("not uploaded");
    assert!(err.to_string().contains("was not uploaded"), "{err}");
    u.put_blob("vision", &sha, b"abc").expect("kept");
    manifest.entries[0].size = 2;
    assert!(u.put_manifest("vision", &manifest).expect_err("size").to_string().contains("bytes"));
    manifest.entries[0].size = 3;
    manifest.entries[0].path = "../eval.py".into();
    assert!(u.put_manifest("vision", &manifest).expect_err("climbs").to_string().contains(".."));
    let summary = Upload { digest: manifest.digest(), files: 1, bytes: 3 };
    assert!(matches!(u.confirm("vision", &summary), Err(UploadError::NotFound(_))));
}

#[test]
fn team_names_that_could_leave_the_uploads_directory_are_refused() {
    let (_dir, u) = uploads();
    for team in ["..", ".", "", "a/b", ".hidden"] {
        assert!(u.missing(team, &[]).is_err(), "{team}");
    }
}

#[test]
fn the_sweep_deletes_old_uploads_no_job_refers_to_and_keeps_the_rest() {
    let (dir, u) = uploads();
    let store = gantry_store::SqliteStore::open(dir.path()).expect("store");
    let (kept_sha, kept) = one_file(b"kept");
    let (old_sha, old) = one_file(b"old");
    for (sha, bytes) in [(&kept_sha, &b"kept"[..]), (&old_sha, &b"old"[..])] {
        u.put_blob("vision", sha, bytes).expect("kept");
    }
    let kept_summary = u.put_manifest("vision", &kept).expect("kept");
    let old_summary = u.put_manifest("vision", &old).expect("kept");
    let spec = gantry_store::SubmitRequest {
        command: vec!["true".into()],
        upload: Some(kept_summary.clone()),
        ..Default::default()
    };
    let job = gantry_store::NewJob { spec, team: "vision".into(), name: "j".into(), ..Default::default() };
    store.submit(&job).expect("submitted");
    // reason: the sweep compares file mtimes, the file system's wall clock.
    #[allow(clippy::disallowed_methods)]
    let long_ago = SystemTime::now() - 2 * GRACE;
    for path in walk(&dir.path().join("uploads")) {
        std::fs::File::options()
            .append(true)
            .open(&path)
            .and_then(|f| f.set_modified(long_ago))
            .expect("age");
    }
    assert_eq!(u.sweep(&store, 0, Duration::from_secs(60)), 2, "the old manifest and its file");
    u.confirm("vision", &kept_summary).expect("still there");
    assert!(u.blob("vision", &kept_sha).is_ok());
    assert!(matches!(u.manifest("vision", &old_summary.digest), Err(UploadError::NotFound(_))));
    assert!(u.blob("vision", &old_sha).is_err());
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

#[test]
fn a_teams_uploads_stay_within_its_quota_and_the_same_file_again_takes_no_room() {
    let dir = tempfile::tempdir().expect("temp dir");
    let u = Uploads::new(dir.path().join("uploads"), upload::LIMIT_BYTES).with_team_quota(100);
    let (a, b) = (vec![b'a'; 60], vec![b'b'; 60]);
    u.put_blob("vision", &upload::hex_sha256(&a), &a).expect("within the quota");
    u.put_blob("vision", &upload::hex_sha256(&a), &a).expect("the same file again");
    let err = u.put_blob("vision", &upload::hex_sha256(&b), &b).expect_err("past the quota");
    assert!(matches!(err, UploadError::QuotaFull(_)), "{err}");
    assert!(err.to_string().contains("team vision's uploads hold 60 B of its 100 B"), "{err}");
    // Another team has its own.
    u.put_blob("nlp", &upload::hex_sha256(&b), &b).expect("another team's quota");
    // Counted again from the disk by a new server.
    let again = Uploads::new(dir.path().join("uploads"), upload::LIMIT_BYTES).with_team_quota(100);
    assert!(matches!(again.put_blob("vision", &upload::hex_sha256(&b), &b), Err(UploadError::QuotaFull(_))));
}

#[test]
fn uploads_in_progress_hold_room_of_the_quota_and_a_blob_past_the_cap_is_cut_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let u = Uploads::new(dir.path().join("uploads"), 80).with_team_quota(100);
    let (a, b) = (vec![b'a'; 60], vec![b'b'; 60]);
    let first = u.blob_writer("vision", &upload::hex_sha256(&a), Some(60)).expect("room");
    let err =
        u.blob_writer("vision", &upload::hex_sha256(&b), Some(60)).expect_err("the first holds 60 of 100");
    assert!(matches!(err, UploadError::QuotaFull(_)), "{err}");
    let err =
        u.blob_writer("vision", &upload::hex_sha256(&b), None).expect_err("an undeclared one takes the cap");
    assert!(matches!(err, UploadError::QuotaFull(_)), "{err}");
    drop(first); // a client that went away gives its room back and leaves no file
    assert!(walk(&dir.path().join("uploads")).is_empty(), "{:?}", walk(dir.path()));
    let mut second = u.blob_writer("vision", &upload::hex_sha256(&b), Some(60)).expect("room again");
    second.write(&b).expect("write");
    u.finish_blob(second).expect("kept");
    let err = u.blob_writer("nlp", &upload::hex_sha256(&a), Some(81)).expect_err("declared past the cap");
    assert!(matches!(err, UploadError::TooLarge(_)), "{err}");
    let mut undeclared = u.blob_writer("nlp", &upload::hex_sha256(&a), None).expect("undeclared");
    undeclared.write(&[0; 80]).expect("up to the cap");
    assert!(matches!(undeclared.write(&[0]), Err(UploadError::TooLarge(_))), "one byte past the cap");
}
