//! `gantry extender`: the benchmark mode prints its figures; a bad node list exits non-zero with a sentence.

use crate::gantry;

#[test]
fn extender_bench_prints_p99_and_the_ratio_against_best_fit() {
    let out = gantry(&["extender", "--bench-nodes", "50"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("on 50 nodes") && stdout.contains("p99 ratio"), "{stdout}");
}

#[test]
fn extender_with_a_malformed_node_list_exits_non_zero_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nodes.json");
    std::fs::write(&path, "[{\"name\": 1}]").expect("write fixture");
    let out = gantry(&["extender", "--listen", "127.0.0.1:0", "--nodes", &path.display().to_string()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a JSON list of nodes"));
}
