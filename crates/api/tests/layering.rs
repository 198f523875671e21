//! The workspace's dependency rules, read from each crate's manifest: the wire types sit under
//! everything, the scheduling core has no runtime, database or network, and the agent talks to
//! the server through `gantry-api` only.

use std::path::Path;

/// Names in a manifest's `[dependencies]` table (not dev- or build-dependencies).
fn dependencies(krate: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(krate).join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut inside = false;
    let mut names = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside && let Some((name, _)) = line.split_once('=') {
            names.push(name.trim().split('.').next().unwrap_or_default().to_owned());
        }
    }
    names
}

#[test]
fn the_wire_types_depend_on_no_other_gantry_crate_and_no_runtime() {
    for dep in dependencies("api") {
        assert!(!dep.starts_with("gantry"), "gantry-api depends on {dep}");
        assert!(
            !["tokio", "axum", "rusqlite", "reqwest", "hyper"].contains(&dep.as_str()),
            "gantry-api depends on {dep}"
        );
    }
}

#[test]
fn the_core_has_no_async_runtime_network_database_or_ffi() {
    for dep in dependencies("core") {
        let banned =
            ["tokio", "axum", "hyper", "reqwest", "rusqlite", "nvml-wrapper", "libc", "gantry-store"];
        assert!(!banned.contains(&dep.as_str()), "gantry-core depends on {dep}");
    }
}

#[test]
fn the_agent_reaches_the_control_plane_through_the_wire_types_only() {
    let deps = dependencies("agent");
    assert!(deps.iter().any(|d| d == "gantry-api"));
    for banned in ["gantry-server", "gantry-store"] {
        assert!(!deps.iter().any(|d| d == banned), "gantry-agent depends on {banned}");
    }
}

#[test]
fn adapters_depend_on_the_core_never_the_reverse() {
    for dep in dependencies("core") {
        assert!(!dep.starts_with("gantry-") || dep == "gantry-api", "gantry-core depends on {dep}");
    }
}

#[test]
fn nothing_shipped_depends_on_the_fake_nvml_library() {
    for krate in ["cli", "gpu", "agent", "server", "store", "core", "sim", "api", "k8s"] {
        let deps = dependencies(krate);
        assert!(!deps.iter().any(|d| d == "gantry-fake-nvml"), "{krate} depends on gantry-fake-nvml");
    }
}
