//! Loading the fake libnvidia-ml from a test. Test crates include this file with
//! `#[path = "../../../fake-nvml/testing.rs"] mod fake_nvml;` and list `gantry-fake-nvml` as a
//! dev-dependency, which makes `cargo test` build the library before the test binary.
//!
//! Each [`FakeNvml`] is a private copy of the library with its own scenario beside it: the
//! dynamic loader maps a copy (a different file) separately, so tests running in parallel in
//! one process never share GPUs, clocks or event sets.

#![allow(dead_code)] // reason: each including test crate uses a different part.

use std::path::{Path, PathBuf};

/// File name cargo gives the built library.
pub const BUILT_NAME: &str = "libgantry_fake_nvml.so";

/// The built library: beside the test binary (`target/<profile>/deps`) or one level up.
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory").to_path_buf();
    let candidates: Vec<PathBuf> = [Some(deps.clone()), deps.parent().map(Path::to_path_buf)]
        .into_iter()
        .flatten()
        .map(|d| d.join(BUILT_NAME))
        .collect();
    candidates.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| {
        panic!(
            "the fake NVML library was not built (looked for {}): run `cargo build -p gantry-fake-nvml`, \
             or `cargo test` in a crate that lists gantry-fake-nvml as a dev-dependency",
            candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" and ")
        )
    })
}

/// A copy of the fake library, named `libnvidia-ml.so.1`, with a scenario beside it.
#[derive(Debug)]
pub struct FakeNvml {
    dir: tempfile::TempDir,
}

impl FakeNvml {
    /// Copies the built library into a new temporary directory and writes `scenario` beside it.
    pub fn new(scenario: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::copy(built_library(), dir.path().join("libnvidia-ml.so.1")).expect("copy the fake library");
        std::fs::write(dir.path().join("fake-nvml.toml"), scenario).expect("write the scenario");
        Self { dir }
    }

    /// The library to open.
    pub fn library(&self) -> PathBuf {
        self.dir.path().join("libnvidia-ml.so.1")
    }

    /// The directory holding the library (for `LD_LIBRARY_PATH`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sets the fake's time, in seconds (for scenarios with `clock = "file"`).
    pub fn set_time(&self, secs: f64) {
        std::fs::write(self.dir.path().join("fake-nvml.now"), secs.to_string())
            .expect("write the clock file");
    }
}
