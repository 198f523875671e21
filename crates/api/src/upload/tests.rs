use super::*;

const D: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn manifest(entries: Vec<Entry>) -> Manifest {
    Manifest { entries }
}

#[test]
fn a_plain_directory_passes_with_its_files_and_bytes() {
    let m = manifest(vec![
        Entry::file("eval.py", D, 12, false),
        Entry::dir("runs"),
        Entry::file("runs/a.txt", D, 3, false),
        Entry::link("runs/latest", "a.txt"),
        Entry::file("train.sh", D, 20, true),
        Entry::link("up", "runs/../eval.py"),
    ]);
    let upload = m.check(LIMIT_BYTES).expect("safe");
    assert_eq!((upload.files, upload.bytes), (3, 35));
    assert_eq!(upload.digest, m.digest());
    assert!(manifest_hex(&upload.digest).is_some());
}

#[test]
fn paths_that_climb_out_or_are_absolute_are_refused() {
    for bad in ["../etc/passwd", "a/../../b", "/etc/passwd", "a//b", "./a", "a/\u{7}"] {
        let err = manifest(vec![Entry::file(bad, D, 1, false)]).check(LIMIT_BYTES).expect_err(bad);
        assert!(err.contains('`') || err.contains("control"), "{bad}: {err}");
    }
}

#[test]
fn links_pointing_outside_or_through_another_link_are_refused() {
    let cases = [
        vec![Entry::link("l", "/etc")],
        vec![Entry::link("l", "..")],
        vec![Entry::dir("a"), Entry::link("a/l", "../../x")],
        // `x/l` is the root; `x/l/..` would be the root's parent, though it reads as `x`.
        vec![Entry::dir("x"), Entry::link("x/l", ".."), Entry::link("y", "x/l/..")],
    ];
    for entries in cases {
        let err = manifest(entries.clone()).check(LIMIT_BYTES).expect_err("refused");
        assert!(err.contains("outside") || err.contains("another link"), "{entries:?}: {err}");
    }
}

#[test]
fn nothing_is_written_under_a_link_or_a_file() {
    let m = manifest(vec![Entry::link("l", "d"), Entry::file("l/x", D, 1, false)]);
    assert!(m.check(LIMIT_BYTES).expect_err("under a link").contains("not a directory"));
    let m = manifest(vec![Entry::file("f", D, 1, false), Entry::file("f/x", D, 1, false)]);
    assert!(m.check(LIMIT_BYTES).expect_err("under a file").contains("not a directory"));
}

#[test]
fn unsorted_or_repeated_paths_and_bad_digests_are_refused() {
    let twice = manifest(vec![Entry::file("a", D, 1, false), Entry::file("a", D, 1, false)]);
    assert!(twice.check(LIMIT_BYTES).expect_err("twice").contains("sorted"));
    let bad = manifest(vec![Entry::file("a", "ABC", 1, false)]);
    assert!(bad.check(LIMIT_BYTES).expect_err("digest").contains("64 lowercase hex"));
}

#[test]
fn a_directory_over_the_cap_is_refused_with_its_size_and_the_cap() {
    let m = manifest(vec![Entry::file("big", D, 150 << 20, false)]);
    let err = m.check(LIMIT_BYTES).expect_err("over");
    assert!(err.contains("150.0 MiB") && err.contains("100.0 MiB") && err.contains("input"), "{err}");
}

#[test]
fn the_digest_is_the_same_for_the_same_entries() {
    let a = manifest(vec![Entry::file("a", D, 1, false)]);
    assert_eq!(a.digest(), a.clone().digest());
    assert_ne!(a.digest(), manifest(vec![Entry::file("a", D, 1, true)]).digest());
    assert_eq!(human_bytes(512), "512 B");
}
