//! An image from a real registry to a running container, with real parts: an OCI layout built
//! here from Debian's static busybox (nothing is downloaded), pushed by `skopeo` to Debian's
//! `docker-registry` on loopback, pulled by [`Registry`] into an [`ImageStore`], mounted as an
//! overlay and run by `crun` as an unprivileged user. Root only; with
//! `GANTRY_REQUIRE_CONTAINER_TESTS=1` (set by `scripts/test.sh` once the tools are installed) a
//! missing tool fails the test instead of skipping it.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gantry_image::bundle::{self, BundleSpec};
use gantry_image::oci::media;
use gantry_image::registry::{Registry, RegistryConfig};
use gantry_image::store::ImageStore;
use gantry_image::{Digest, Reference};
use serde_json::json;

fn tool(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Whether the host mounts cgroup v1 controllers beside a cgroup2 hierarchy that holds some
/// (crun 1.8 refuses to run there; runc runs).
fn hybrid_with_v2_controllers() -> bool {
    std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers").is_ok_and(|c| !c.trim().is_empty())
}

/// The tools, or `None` (skipped) when they are missing and not required.
fn tools() -> Option<(PathBuf, PathBuf, PathBuf, PathBuf)> {
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
fn layout(dir: &Path, busybox: &Path) -> Digest {
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

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_registry(binary: &Path, dir: &Path) -> (Killed, u16) {
    let port = TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let config = dir.join("registry.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.join("storage").display()
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

#[test]
fn an_image_pushed_to_a_registry_is_pulled_verified_unpacked_and_run_as_an_unprivileged_container() {
    let Some((registry_bin, skopeo, runc, busybox)) = tools() else { return };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let work = tempfile::tempdir().expect("temp dir");
    let oci = work.path().join("layout");
    let manifest = layout(&oci, &busybox);
    let (_registry, port) = start_registry(&registry_bin, work.path());
    let target = format!("127.0.0.1:{port}/team/busybox:v1");
    let pushed = Command::new(&skopeo)
        .args(["copy", "--dest-tls-verify=false", "--preserve-digests"])
        .arg(format!("oci:{}:v1", oci.display()))
        .arg(format!("docker://{target}"))
        .output()
        .expect("skopeo");
    assert!(pushed.status.success(), "skopeo: {}", String::from_utf8_lossy(&pushed.stderr));

    let config = RegistryConfig { insecure: vec![format!("127.0.0.1:{port}")], ..RegistryConfig::default() };
    let registry = Registry::new(reqwest::Client::builder(), config).expect("client");
    let store = ImageStore::open(&work.path().join("store")).expect("store");
    let reference = Reference::parse(&target).expect("reference");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let image = rt.block_on(registry.pull(&reference, None, &store)).expect("pull");
    assert_eq!(image.digest, manifest, "the digest the layout has, resolved from the tag");
    assert_eq!(image.reference, format!("{target}@{manifest}"));
    assert_eq!(store.image(&manifest).map(|i| i.layers.len()), Some(2));
    // A tag that does not exist, and a digest the registry does not hold, say so.
    let missing = Reference::parse(&format!("127.0.0.1:{port}/team/busybox:v9")).expect("reference");
    let err = rt.block_on(registry.pull(&missing, None, &store)).expect_err("no such tag");
    assert!(err.to_string().contains("no such image"), "{err}");

    let mut runtimes = vec![runc];
    match tool("crun") {
        Some(_) if hybrid_with_v2_controllers() => {
            eprintln!(
                "crun not run: this host's cgroup2 hierarchy holds controllers beside v1 (crun 1.8 refuses)"
            );
        }
        Some(crun) => runtimes.push(crun),
        None => eprintln!("crun not installed: runc only"),
    }
    for runtime in runtimes {
        run_container(&store, &image, work.path(), &runtime);
    }
}

/// Runs the image with `runtime` and checks what the container saw.
fn run_container(store: &ImageStore, image: &gantry_image::store::Image, work: &Path, runtime: &Path) {
    let name = runtime.file_name().expect("name").to_string_lossy().into_owned();
    let attempt = work.join("attempt");
    let rootfs = store.mount_rootfs(image, &attempt).expect("overlay");
    let workdir = work.join("workdir");
    std::fs::create_dir_all(&workdir).expect("workdir");
    std::fs::write(workdir.join("input.txt"), "from the job's work directory\n").expect("input");
    let command: Vec<String> = [
        "sh",
        "-c",
        "cat /etc/marker; echo FROM_IMAGE=$FROM_IMAGE JOB=$JOB; id -u; ls /etc; cat input.txt; pwd; \
         ls -l /etc/setuid; echo x > /etc/written && echo wrote-rootfs",
    ]
    .map(String::from)
    .to_vec();
    let mut env = image.config.env();
    env.push(("JOB".into(), "7".into()));
    let spec = BundleSpec {
        rootfs: rootfs.path.clone(),
        argv: image.config.argv(&command, None),
        env,
        cwd: workdir.display().to_string(),
        uid: 65534,
        gid: 65534,
        additional_gids: vec![],
        hostname: "job-7".into(),
        binds: vec![bundle::Bind {
            source: workdir.clone(),
            destination: workdir.display().to_string(),
            readonly: true,
        }],
        tmp_bytes: 16 << 20,
        shm_bytes: 16 << 20,
        devices: vec![],
    };
    let dir = attempt.join("bundle");
    bundle::write(&dir, &spec).expect("bundle");
    let argv = bundle::run_argv(runtime, &dir, &format!("gantry-test-{name}"), &work.join("crun"));
    let out = Command::new(&argv[0]).args(&argv[1..]).output().expect("crun");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    rootfs.remove();
    eprintln!("{name}:\n{stdout}{stderr}");
    assert!(stdout.contains("from layer two"), "{stdout}{stderr}");
    assert!(stdout.contains("FROM_IMAGE=yes JOB=7"), "the image's and the job's environment: {stdout}");
    assert!(stdout.lines().any(|l| l == "65534"), "runs as the job's user: {stdout}");
    assert!(!stdout.contains("gone"), "the upper layer's whiteout hides the file: {stdout}");
    assert!(stdout.contains("from the job's work directory"), "the work directory is bound in: {stdout}");
    assert!(stdout.contains("-rwxr-xr-x"), "setuid dropped: {stdout}");
    assert!(!stdout.contains("wrote-rootfs"), "an unprivileged user cannot write the image's /etc: {stdout}");
    assert!(!attempt.exists(), "the attempt's upper layer is gone");
}
