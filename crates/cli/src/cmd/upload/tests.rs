use std::os::unix::fs::PermissionsExt;

use super::*;

fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, text).expect("write");
    path
}

fn paths(p: &Packed) -> Vec<&str> {
    p.manifest.entries.iter().map(|e| e.path.as_str()).collect()
}

#[test]
fn ignored_files_git_and_data_directories_and_the_config_stay_home() {
    let dir = tempfile::tempdir().expect("temp");
    let root = dir.path();
    write(root, "eval.py", "print('hi')\n");
    write(root, ".gitignore", "*.ckpt\n");
    write(root, ".gantryignore", "data/\n");
    write(root, "model.ckpt", "weights");
    write(root, "data/big.bin", "lots");
    write(root, ".git/config", "[core]");
    write(root, "gantry-data/gantry.db", "store");
    write(root, "gantry-data/agent/credential", "secret");
    let config = write(root, ".config/gantry/config.toml", "token = 'x'");
    let packed = pack(root, &[config], upload::LIMIT_BYTES).expect("packs");
    assert_eq!(paths(&packed), [".config", ".config/gantry", ".gantryignore", ".gitignore", "eval.py"]);
}

#[test]
fn the_executable_bit_and_links_inside_travel_and_a_link_outside_is_refused() {
    let dir = tempfile::tempdir().expect("temp");
    let root = dir.path();
    let script = write(root, "train.sh", "#!/bin/sh\necho ok\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::symlink("train.sh", root.join("run.sh")).expect("link");
    let packed = pack(root, &[], upload::LIMIT_BYTES).expect("packs");
    let train = packed.manifest.entries.iter().find(|e| e.path == "train.sh").expect("train.sh");
    assert!(train.executable);
    let link = packed.manifest.entries.iter().find(|e| e.path == "run.sh").expect("run.sh");
    assert_eq!(link.link.as_deref(), Some("train.sh"));
    // A link leaving the directory (absolute, or climbing above it) is left out, not refused.
    std::os::unix::fs::symlink("/etc/passwd", root.join("passwd")).expect("link");
    std::fs::create_dir(root.join("sub")).expect("dir");
    std::os::unix::fs::symlink("../../x", root.join("sub/up")).expect("link");
    std::os::unix::fs::symlink("../train.sh", root.join("sub/back")).expect("link");
    let packed = pack(root, &[], upload::LIMIT_BYTES).expect("packs without them");
    let paths: Vec<&str> = packed.manifest.entries.iter().map(|e| e.path.as_str()).collect();
    assert!(!paths.contains(&"passwd") && !paths.contains(&"sub/up"), "{paths:?}");
    assert!(paths.contains(&"sub/back") && paths.contains(&"run.sh"), "{paths:?}");
}

#[test]
fn a_link_leaves_the_directory_when_absolute_or_climbing_above_it() {
    assert!(super::leaves("a", "/etc/passwd"));
    assert!(super::leaves("a", "../x"));
    assert!(super::leaves("d/a", "../../x"));
    assert!(super::leaves("d/a", "x/../../../y"));
    assert!(!super::leaves("d/a", "../x"));
    assert!(!super::leaves("a", "b/c"));
    assert!(!super::leaves("d/e/a", "../../f"));
}

#[test]
fn a_directory_over_the_cap_is_refused_before_it_is_read_with_its_size() {
    let dir = tempfile::tempdir().expect("temp");
    let big = std::fs::File::create(dir.path().join("big.bin")).expect("create");
    big.set_len(150 << 20).expect("sparse 150 MiB");
    let err = pack(dir.path(), &[], upload::LIMIT_BYTES).expect_err("over the cap");
    let text = err.to_string();
    assert!(text.contains("150.0 MiB") && text.contains("100.0 MiB") && text.contains("--input"), "{text}");
}
