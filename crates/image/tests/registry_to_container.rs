//! An image from a real registry to a running container, with real parts: an OCI layout built
//! here from Debian's static busybox (nothing is downloaded), pushed by `skopeo` to Debian's
//! `docker-registry` on loopback, pulled by [`Registry`] into an [`ImageStore`], mounted as an
//! overlay and run by `crun` as an unprivileged user. Root only; with
//! `GANTRY_REQUIRE_CONTAINER_TESTS=1` (set by `scripts/test.sh` once the tools are installed) a
//! missing tool fails the test instead of skipping it.

use std::path::Path;
use std::process::Command;

use gantry_image::Reference;
use gantry_image::bundle::{self, BundleSpec};
use gantry_image::registry::{Registry, RegistryConfig};
use gantry_image::store::ImageStore;

#[path = "../testing.rs"]
mod testing;
use testing::{hybrid_with_v2_controllers, layout, push, start_registry, tool, tools};

#[test]
fn an_image_pushed_to_a_registry_is_pulled_verified_unpacked_and_run_as_an_unprivileged_container() {
    let Some((registry_bin, skopeo, runc, busybox)) = tools() else { return };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let work = tempfile::tempdir().expect("temp dir");
    let oci = work.path().join("layout");
    let manifest = layout(&oci, &busybox);
    let (_registry, port) = start_registry(&registry_bin, work.path());
    let target = format!("127.0.0.1:{port}/team/busybox:v1");
    push(&skopeo, &oci, &target);

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
        cgroups_path: None,
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
