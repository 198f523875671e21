//! The conflist runner against fake plugins: one shell script installed under several names,
//! which records its environment, its stdin and the order of calls next to itself.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::*;

const FAKE: &str = r#"#!/bin/sh
dir=$(dirname "$0"); name=$(basename "$0")
echo "$name $CNI_COMMAND" >> "$dir/order"
cat > "$dir/$name-$CNI_COMMAND.json"
env > "$dir/$name-$CNI_COMMAND.env"
[ "$name" = hang ] && exec sleep 30
if [ "$name" = fail ]; then
  printf '{"cniVersion":"1.0.0","code":11,"msg":"no addresses left","details":"range full"}'
  exit 1
fi
[ "$CNI_COMMAND" = ADD ] && printf '{"cniVersion":"1.0.0","from":"%s"}' "$name"
exit 0
"#;

/// A directory holding the fake plugin as each of `names`.
fn plugins(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    for name in names {
        let path = dir.path().join(name);
        std::fs::write(&path, FAKE).expect("write plugin");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    dir
}

fn list(types: &[&str]) -> Conflist {
    let plugins: Vec<Value> = types
        .iter()
        .map(|t| match *t {
            "b" => json!({"type": t, "capabilities": {"portMappings": true}, "own": 2}),
            _ => json!({"type": t, "own": 1}),
        })
        .collect();
    Conflist::parse(&json!({"cniVersion": "1.0.0", "name": "net", "plugins": plugins})).expect("conflist")
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default()
}

fn stdin_of(dir: &Path, call: &str) -> Value {
    serde_json::from_str(&read(dir, &format!("{call}.json"))).expect("the plugin got JSON")
}

fn attach<'a>(runtime: &'a Map<String, Value>) -> Attachment<'a> {
    Attachment { container_id: "gantry-7-1", netns: Path::new("/run/x/7-1"), ifname: "eth0", runtime }
}

fn runtime() -> Map<String, Value> {
    let mut runtime = Map::new();
    runtime.insert(
        "portMappings".into(),
        json!([{"hostPort": 29500, "containerPort": 29500, "protocol": "tcp"}]),
    );
    runtime.insert("bandwidth".into(), json!({"ingressRate": 1}));
    runtime
}

#[test]
fn add_runs_each_plugin_in_order_with_the_previous_result_and_only_the_capabilities_it_declares() {
    let bin = plugins(&["a", "b"]);
    let runtime = runtime();
    let result = list(&["a", "b"]).add(&[bin.path().to_path_buf()], &attach(&runtime)).expect("add");
    assert_eq!(result, json!({"cniVersion": "1.0.0", "from": "b"}), "the last plugin's result");
    assert_eq!(read(bin.path(), "order"), "a ADD\nb ADD\n");
    let a = stdin_of(bin.path(), "a-ADD");
    assert_eq!(a, json!({"type": "a", "own": 1, "name": "net", "cniVersion": "1.0.0"}));
    let b = stdin_of(bin.path(), "b-ADD");
    assert_eq!(b["prevResult"], json!({"cniVersion": "1.0.0", "from": "a"}));
    assert_eq!(b["runtimeConfig"], json!({"portMappings": runtime["portMappings"]}));
    assert_eq!((b["name"].as_str(), b["own"].as_i64()), (Some("net"), Some(2)));
    let env = read(bin.path(), "a-ADD.env");
    for line in [
        "CNI_COMMAND=ADD",
        "CNI_CONTAINERID=gantry-7-1",
        "CNI_NETNS=/run/x/7-1",
        "CNI_IFNAME=eth0",
        &format!("CNI_PATH={}", bin.path().display()),
    ] {
        assert!(env.lines().any(|l| l == line), "{line} missing from:\n{env}");
    }
}

#[test]
fn add_stops_at_the_first_failing_plugin_and_says_its_msg() {
    let bin = plugins(&["a", "fail", "b"]);
    let runtime = Map::new();
    let err =
        list(&["a", "fail", "b"]).add(&[bin.path().to_path_buf()], &attach(&runtime)).expect_err("fails");
    assert_eq!(err.to_string(), "the CNI plugin fail failed (ADD): no addresses left: range full");
    assert_eq!(read(bin.path(), "order"), "a ADD\nfail ADD\n", "b never ran");
}

#[test]
fn del_runs_in_reverse_with_the_cached_result_and_goes_on_past_a_failure() {
    let bin = plugins(&["a", "fail", "b"]);
    let runtime = runtime();
    let cached = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.2.3/24"}]});
    let err = list(&["a", "fail", "b"])
        .del(&[bin.path().to_path_buf()], &attach(&runtime), Some(&cached))
        .expect_err("fail's error is returned");
    assert!(err.to_string().contains("no addresses left"), "{err}");
    assert_eq!(read(bin.path(), "order"), "b DEL\nfail DEL\na DEL\n");
    for call in ["a-DEL", "b-DEL"] {
        assert_eq!(stdin_of(bin.path(), call)["prevResult"], cached, "{call}");
    }
    assert!(read(bin.path(), "a-DEL.env").lines().any(|l| l == "CNI_COMMAND=DEL"));
}

#[test]
fn a_plugin_that_hangs_is_killed_and_its_step_fails() {
    let bin = plugins(&["a", "hang"]);
    let runtime = Map::new();
    let list = list(&["a", "hang"]).with_timeout(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    let err = list.add(&[bin.path().to_path_buf()], &attach(&runtime)).expect_err("times out");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "killed, not waited for");
    assert!(err.to_string().contains("hang failed (ADD): it did not finish within 300ms"), "{err}");
}

#[test]
fn a_plugin_in_no_directory_is_named_with_the_directories() {
    let bin = plugins(&["a"]);
    let runtime = Map::new();
    let dirs = [PathBuf::from("/nonexistent"), bin.path().to_path_buf()];
    let err = list(&["a", "b"]).add(&dirs, &attach(&runtime)).expect_err("b is missing");
    assert!(matches!(&err, CniError::Missing { plugin, .. } if plugin == "b"), "{err}");
    assert!(err.to_string().contains("/nonexistent:"), "{err}");
}

#[test]
fn a_conflist_without_a_name_version_or_plain_plugin_types_is_refused() {
    let cases = [
        (json!({"cniVersion": "1.0.0", "plugins": [{"type": "a"}]}), "name"),
        (json!({"name": "n", "plugins": [{"type": "a"}]}), "cniVersion"),
        (json!({"name": "n", "cniVersion": "1.0.0", "plugins": []}), "empty"),
        (json!({"name": "n", "cniVersion": "1.0.0", "plugins": [{"type": "../../bin/sh"}]}), "plain"),
        (json!({"name": "n", "cniVersion": "1.0.0", "plugins": [7]}), "object"),
    ];
    for (value, why) in cases {
        let err = Conflist::parse(&value).expect_err("refused");
        assert!(err.contains(why), "{value}: {err}");
    }
    let file = tempfile::NamedTempFile::new().expect("file");
    std::fs::write(file.path(), "{").expect("write");
    let err = Conflist::load(file.path()).expect_err("not JSON");
    assert!(err.to_string().contains("not JSON"), "{err}");
}
