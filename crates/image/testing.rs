//! Test support shared by the image crate's tests and the CLI's container tests: the tools
//! (Debian's docker-registry, skopeo, runc/crun, busybox-static), an OCI image layout built here
//! from the static busybox (nothing is downloaded), a loopback registry, and a push.
#![allow(dead_code)] // each test binary uses a part

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gantry_image::Digest;
use gantry_image::oci::media;
use serde_json::json;

pub fn tool(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Whether the host mounts cgroup v1 controllers beside a cgroup2 hierarchy that holds some
/// (crun 1.8 refuses to run there; runc runs).
pub fn hybrid_with_v2_controllers() -> bool {
    std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers").is_ok_and(|c| !c.trim().is_empty())
}

/// The tools, or `None` (skipped) when they are missing and not required.
pub fn tools() -> Option<(PathBuf, PathBuf, PathBuf, PathBuf)> {
    #[allow(unsafe_code)]
    // SAFETY: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let found = (tool("docker-registry"), tool("skopeo"), tool("runc"), tool("busybox"));
    let required = std::env::var_os("GANTRY_REQUIRE_CONTAINER_TESTS").is_some();
    match found {
        (Some(r), Some(s), Some(c), Some(b)) if root => Some((r, s, c, b)),
        _ if required => panic!(
            "GANTRY_REQUIRE_CONTAINER_TESTS is set but root, docker-registry, skopeo, crun or busybox is missing"
        ),
        _ => {
            eprintln!(
                "SKIPPED: needs root, docker-registry, skopeo, crun and busybox (scripts/test.sh installs them)"
            );
            None
        }
    }
}

/// A gzip-compressed layer of `entries` (name, bytes, mode; a `->` target makes a symlink);
/// its compressed bytes and the digest of its uncompressed tar.
fn layer(entries: &[(&str, Vec<u8>, u32, Option<&str>)]) -> (Vec<u8>, Digest) {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, data, mode, target) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(*mode);
        h.set_uid(0);
        h.set_gid(0);
        match target {
            Some(t) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                tar.append_link(&mut h, name, t).expect("link");
            }
            None if name.ends_with('/') => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                tar.append_data(&mut h, name, &[][..]).expect("dir");
            }
            None => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(data.len() as u64);
                tar.append_data(&mut h, name, &data[..]).expect("file");
            }
        }
    }
    let raw = tar.into_inner().expect("tar");
    let diff_id = Digest::of(&raw);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).expect("gzip");
    (gz.finish().expect("gzip"), diff_id)
}

/// Writes an OCI image layout with one image tagged `v1`; its manifest digest.
pub fn layout(dir: &Path, busybox: &Path) -> Digest {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).expect("blobs");
    let put = |bytes: &[u8]| {
        let d = Digest::of(bytes);
        std::fs::write(blobs.join(d.hex()), bytes).expect("blob");
        (d, bytes.len() as u64)
    };
    let bb = std::fs::read(busybox).expect("busybox");
    let mut first =
        vec![("bin/", vec![], 0o755, None), ("bin/busybox", bb, 0o755, None), ("etc/", vec![], 0o755, None)];
    for applet in ["sh", "cat", "echo", "id", "ls", "pwd", "env"] {
        first.push((Box::leak(format!("bin/{applet}").into_boxed_str()), vec![], 0o777, Some("busybox")));
    }
    first.push(("etc/gone", b"removed by the layer above".to_vec(), 0o644, None));
    first.push(("etc/setuid", b"x".to_vec(), 0o4755, None));
    let second = vec![
        ("etc/", vec![], 0o755, None),
        ("etc/marker", b"from layer two\n".to_vec(), 0o644, None),
        ("etc/.wh.gone", vec![], 0o644, None),
    ];
    let (l1, d1) = layer(&first);
    let (l2, d2) = layer(&second);
    let (l1d, l1s) = put(&l1);
    let (l2d, l2s) = put(&l2);
    let config = json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin", "FROM_IMAGE=yes"], "Cmd": ["sh", "-c", "echo default command"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [d1, d2]},
    });
    let (cd, cs) = put(config.to_string().as_bytes());
    let manifest = json!({
        "schemaVersion": 2, "mediaType": media::OCI_MANIFEST,
        "config": {"mediaType": media::OCI_CONFIG, "digest": cd, "size": cs},
        "layers": [
            {"mediaType": media::OCI_LAYER_GZIP, "digest": l1d, "size": l1s},
            {"mediaType": media::OCI_LAYER_GZIP, "digest": l2d, "size": l2s},
        ],
    });
    let (md, ms) = put(manifest.to_string().as_bytes());
    let index = json!({"schemaVersion": 2, "manifests": [
        {"mediaType": media::OCI_MANIFEST, "digest": md, "size": ms,
         "annotations": {"org.opencontainers.image.ref.name": "v1"}}
    ]});
    std::fs::write(dir.join("index.json"), index.to_string()).expect("index");
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("layout");
    md
}

pub struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn start_registry(binary: &Path, dir: &Path) -> (Killed, u16) {
    start_registry_with(binary, dir, None)
}

/// A registry that asks for a user name and password (HTTP basic, an htpasswd file made with
/// Debian's `htpasswd`).
pub fn start_private_registry(binary: &Path, dir: &Path, user: &str, password: &str) -> (Killed, u16) {
    let htpasswd = tool("htpasswd").expect("htpasswd (apache2-utils)");
    let out = Command::new(htpasswd).args(["-Bbn", user, password]).output().expect("htpasswd");
    assert!(out.status.success());
    let file = dir.join("htpasswd");
    std::fs::write(&file, &out.stdout).expect("htpasswd file");
    start_registry_with(binary, dir, Some(&file))
}

fn start_registry_with(binary: &Path, dir: &Path, htpasswd: Option<&Path>) -> (Killed, u16) {
    let port = TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let config = dir.join("registry.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n{}",
            dir.join("storage").display(),
            htpasswd.map_or(String::new(), |f| format!("auth:\n  htpasswd:\n    realm: gantry-test\n    path: {}\n", f.display()))
        ),
    )
    .expect("config");
    let child = Command::new(binary)
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("docker-registry");
    let child = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the registry did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, port)
}

/// Pushes the layout's `v1` to `target` (`host:port/repo:tag`) with skopeo.
pub fn push(skopeo: &Path, layout: &Path, target: &str) {
    push_as(skopeo, layout, target, None);
}

/// The same, logged in as `creds` (`user:password`).
pub fn push_as(skopeo: &Path, layout: &Path, target: &str, creds: Option<&str>) {
    let mut cmd = Command::new(skopeo);
    cmd.args(["copy", "--dest-tls-verify=false", "--preserve-digests"]);
    if let Some(c) = creds {
        cmd.args(["--dest-creds", c]);
    }
    let pushed = cmd
        .arg(format!("oci:{}:v1", layout.display()))
        .arg(format!("docker://{target}"))
        .output()
        .expect("skopeo");
    assert!(pushed.status.success(), "skopeo: {}", String::from_utf8_lossy(&pushed.stderr));
}
