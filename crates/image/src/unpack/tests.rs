use super::*;

/// A tar entry, with its name written raw (so that hostile names can be built).
struct E<'a> {
    name: &'a str,
    kind: tar::EntryType,
    mode: u32,
    link: Option<&'a str>,
    data: &'a [u8],
}

fn file<'a>(name: &'a str, data: &'a [u8]) -> E<'a> {
    E { name, kind: tar::EntryType::Regular, mode: 0o644, link: None, data }
}

fn dir(name: &str) -> E<'_> {
    E { name, kind: tar::EntryType::Directory, mode: 0o755, link: None, data: b"" }
}

fn link<'a>(name: &'a str, kind: tar::EntryType, target: &'a str) -> E<'a> {
    E { name, kind, mode: 0o777, link: Some(target), data: b"" }
}

fn archive(entries: &[E<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let mut h = tar::Header::new_old();
        let raw = h.as_old_mut();
        raw.name[..e.name.len()].copy_from_slice(e.name.as_bytes());
        if let Some(l) = e.link {
            raw.linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
        h.set_entry_type(e.kind);
        h.set_mode(e.mode);
        h.set_size(e.data.len() as u64);
        h.set_uid(0);
        h.set_gid(0);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(e.data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

fn unpack_into(entries: &[E<'_>]) -> (tempfile::TempDir, Result<Unpacked, UnpackError>) {
    let dest = tempfile::tempdir().expect("temp dir");
    let bytes = archive(entries);
    let result = unpack(&bytes[..], Compression::None, dest.path(), Limits::default());
    (dest, result)
}

#[test]
fn files_directories_and_links_land_inside_with_setuid_dropped_and_devices_skipped() {
    let (dest, done) = unpack_into(&[
        dir("./bin/"),
        E { mode: 0o4755, ..file("bin/busybox", b"#!binary") },
        link("bin/sh", tar::EntryType::Symlink, "/bin/busybox"),
        link("bin/ash", tar::EntryType::Link, "bin/busybox"),
        file("/etc/motd", b"hello"),
        E { name: "dev/null", kind: tar::EntryType::Char, mode: 0o666, link: None, data: b"" },
    ]);
    let done = done.expect("unpacked");
    assert_eq!(done, Unpacked { entries: 5, bytes: 13, skipped: 1 });
    let root = dest.path();
    let busybox = fs::metadata(root.join("bin/busybox")).expect("busybox");
    assert_eq!(busybox.permissions().mode() & 0o7777, 0o755, "setuid dropped");
    assert_eq!(fs::read_link(root.join("bin/sh")).expect("link"), Path::new("/bin/busybox"));
    assert_eq!(fs::read(root.join("bin/ash")).expect("hard link"), b"#!binary");
    assert_eq!(fs::read(root.join("etc/motd")).expect("absolute name, inside"), b"hello");
    assert!(!root.join("dev/null").exists(), "device nodes are not made");
}

#[test]
fn names_that_leave_the_directory_or_go_through_a_link_are_refused_and_nothing_lands_outside() {
    let outside = tempfile::tempdir().expect("outside");
    let target = outside.path().display().to_string();
    let cases: Vec<(&str, Vec<E<'_>>)> = vec![
        ("dot-dot", vec![file("../escaped", b"x")]),
        ("dot-dot inside", vec![file("a/../../escaped", b"x")]),
        ("through a symlink", vec![link("a", tar::EntryType::Symlink, &target), file("a/escaped", b"x")]),
        (
            "a directory through a symlink",
            vec![link("a", tar::EntryType::Symlink, &target), dir("a/sub/"), file("a/sub/escaped", b"x")],
        ),
        ("hard link out", vec![link("passwd", tar::EntryType::Link, "../../../../etc/passwd")]),
        ("hard link to a missing file", vec![link("passwd", tar::EntryType::Link, "/etc/passwd")]),
        (
            "hard link through a symlink",
            vec![
                link("a", tar::EntryType::Symlink, "/etc"),
                link("passwd", tar::EntryType::Link, "a/passwd"),
            ],
        ),
        ("whiteout climbing out", vec![file(".wh...", b"")]),
    ];
    for (what, entries) in cases {
        let (_dest, result) = unpack_into(&entries);
        let err = result.expect_err(what);
        assert!(matches!(err, UnpackError::Refused(_)), "{what}: {err}");
        assert!(fs::read_dir(outside.path()).expect("outside").next().is_none(), "{what}: wrote outside");
    }
}

#[test]
fn a_layer_past_its_caps_is_refused() {
    let bytes = archive(&[file("a", &[0; 3000]), file("b", &[0; 3000])]);
    let dest = tempfile::tempdir().expect("temp dir");
    let err = unpack(&bytes[..], Compression::None, dest.path(), Limits { max_bytes: 5000, max_entries: 10 })
        .expect_err("bytes");
    assert!(err.to_string().contains("more than 5000 bytes"), "{err}");
    let dest = tempfile::tempdir().expect("temp dir");
    let err =
        unpack(&bytes[..], Compression::None, dest.path(), Limits { max_bytes: 1 << 20, max_entries: 1 })
            .expect_err("entries");
    assert!(err.to_string().contains("more than 1 entries"), "{err}");
}

#[test]
fn zstd_layers_of_one_frame_or_several_unpack() {
    let tar = archive(&[file("hello.txt", b"hi"), file("big.bin", &[3u8; 300_000])]);
    let one = ruzstd::encoding::compress_to_vec(&tar[..], ruzstd::encoding::CompressionLevel::Fastest);
    let (half, rest) = tar.split_at(tar.len() / 2);
    let mut two = ruzstd::encoding::compress_to_vec(half, ruzstd::encoding::CompressionLevel::Fastest);
    two.extend(ruzstd::encoding::compress_to_vec(rest, ruzstd::encoding::CompressionLevel::Uncompressed));
    let mut cases = vec![("one frame", one), ("two frames", two)];
    // The reference implementation's own output, where its command is installed.
    if let Ok(mut child) = std::process::Command::new("zstd")
        .args(["-q", "-c", "-3"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        let input = tar.clone();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().expect("zstd");
        writer.join().expect("writer").expect("write");
        cases.push(("the zstd command's", out.stdout));
    }
    for (what, bytes) in cases {
        let dest = tempfile::tempdir().expect("temp dir");
        let compression = Compression::of(crate::oci::media::OCI_LAYER_ZSTD).expect("zstd");
        let done = unpack(&bytes[..], compression, dest.path(), Limits::default()).expect(what);
        assert_eq!(done.bytes, 300_002, "{what}");
        assert_eq!(fs::read(dest.path().join("hello.txt")).expect("file"), b"hi", "{what}");
    }
    let dest = tempfile::tempdir().expect("temp dir");
    let err =
        unpack(&b"not zstd at all"[..], Compression::Zstd, dest.path(), Limits::default()).expect_err("junk");
    assert!(err.to_string().contains("not zstd"), "{err}");
}

#[test]
fn gzip_layers_unpack() {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&archive(&[file("hello.txt", b"hi")])).expect("gzip");
    let bytes = gz.finish().expect("gzip");
    let dest = tempfile::tempdir().expect("temp dir");
    let compression = Compression::of(crate::oci::media::OCI_LAYER_GZIP).expect("gzip");
    unpack(&bytes[..], compression, dest.path(), Limits::default()).expect("unpacked");
    assert_eq!(fs::read(dest.path().join("hello.txt")).expect("file"), b"hi");
    let err = Compression::of("application/vnd.oci.image.layer.v1.tar+lz4").expect_err("lz4");
    assert!(err.to_string().contains("not supported"), "{err}");
}

#[test]
fn whiteouts_become_overlayfs_whiteouts() {
    if !is_root() {
        eprintln!("SKIPPED: whiteouts are character devices, which only root makes");
        return;
    }
    let (dest, done) =
        unpack_into(&[dir("etc/"), file("etc/.wh.gone", b""), dir("opt/"), file("opt/.wh..wh..opq", b"")]);
    done.expect("unpacked");
    let gone = fs::symlink_metadata(dest.path().join("etc/gone")).expect("whiteout");
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(&gone.file_type()));
    assert_eq!(std::os::unix::fs::MetadataExt::rdev(&gone), 0);
    let mut value = [0u8; 4];
    let c = cstring(&dest.path().join("opt")).expect("path");
    // SAFETY: valid strings and a writable buffer of the given length.
    #[allow(unsafe_code)]
    let n = unsafe {
        libc::getxattr(c.as_ptr(), c"trusted.overlay.opaque".as_ptr(), value.as_mut_ptr().cast(), value.len())
    };
    assert_eq!(n, 1, "opaque attribute: {}", io::Error::last_os_error());
    assert_eq!(value[0], b'y');
}
