//! The OCI runtime bundle a container runs from: `config.json` beside a root file system, as
//! `crun`/`runc` read it (runtime spec 1.0).
//!
//! The container is an unprivileged process in its own mount, PID, IPC and UTS namespaces: it
//! runs as the job's user with no capabilities (root, when an admin allows it, gets the
//! runtime's default set, Docker's), with `noNewPrivileges`, over the image's root file system
//! with a private `/tmp` and `/dev/shm` of the sizes the sandbox gives process jobs, and the
//! host paths the job needs (its work directory, inputs) bound in at the same paths. Its
//! network is the namespace it is started in (the job's own, from CNI, or the node's): no
//! network namespace is asked for. Cgroups are not the runtime's business: the shim starts the
//! runtime inside the attempt's cgroup with `--cgroup-manager=disabled`, so the container is
//! held to the same limits as a process job and ends with its cgroup.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// What one container runs.
#[derive(Debug, Clone)]
pub struct BundleSpec {
    /// The root file system (an overlay of the image's layers).
    pub rootfs: PathBuf,
    /// The argv.
    pub argv: Vec<String>,
    /// The whole environment.
    pub env: Vec<(String, String)>,
    /// Where it starts (inside the container).
    pub cwd: String,
    /// Its user and group ids, and supplementary groups.
    pub uid: u32,
    /// Its group id.
    pub gid: u32,
    /// Supplementary groups.
    pub additional_gids: Vec<u32>,
    /// Its host name.
    pub hostname: String,
    /// Host paths bound in.
    pub binds: Vec<Bind>,
    /// Size of `/tmp`, bytes.
    pub tmp_bytes: u64,
    /// Size of `/dev/shm`, bytes.
    pub shm_bytes: u64,
    /// Device nodes to create in the container (GPUs), with their type, major and minor.
    pub devices: Vec<Device>,
    /// The cgroup the runtime puts the container in (`cgroupsPath`; runc manages it), or `None`
    /// (crun with `--cgroup-manager=disabled`: the container stays in the runtime's).
    pub cgroups_path: Option<String>,
}

/// A host path bound into the container.
#[derive(Debug, Clone)]
pub struct Bind {
    /// On the host.
    pub source: PathBuf,
    /// In the container.
    pub destination: String,
    /// Read-only.
    pub readonly: bool,
}

/// A character device made in the container.
#[derive(Debug, Clone)]
pub struct Device {
    /// Its path in the container, e.g. `/dev/nvidia0`.
    pub path: String,
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
}

/// Capabilities a root container keeps (Docker's and runc's default set).
const ROOT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// The bundle's `config.json`.
pub fn config(spec: &BundleSpec) -> Value {
    let caps: Vec<&str> = if spec.uid == 0 { ROOT_CAPS.to_vec() } else { Vec::new() };
    let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", format!("size={}", spec.shm_bytes.max(4096))]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}),
        json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777", format!("size={}", spec.tmp_bytes.max(4096))]}),
    ];
    for b in &spec.binds {
        let mut options = vec!["rbind", "nosuid", "nodev"];
        if b.readonly {
            options.push("ro");
        }
        mounts.push(
            json!({"destination": b.destination, "type": "bind", "source": b.source, "options": options}),
        );
    }
    let devices: Vec<Value> = spec
        .devices
        .iter()
        .map(|d| json!({"path": d.path, "type": "c", "major": d.major, "minor": d.minor, "fileMode": 0o666, "uid": 0, "gid": 0}))
        .collect();
    let device_rules: Vec<Value> = std::iter::once(json!({"allow": false, "access": "rwm"}))
        .chain(spec.devices.iter().map(
            |d| json!({"allow": true, "type": "c", "major": d.major, "minor": d.minor, "access": "rwm"}),
        ))
        .collect();
    let mut linux = json!({
        "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
        "devices": devices,
        "resources": {"devices": device_rules},
        "maskedPaths": [
            "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
            "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"
        ],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    });
    if let Some(path) = &spec.cgroups_path {
        linux["cgroupsPath"] = json!(path);
    }
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": spec.uid, "gid": spec.gid, "additionalGids": spec.additional_gids},
            "args": spec.argv,
            "env": env,
            "cwd": spec.cwd,
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "noNewPrivileges": true,
        },
        "root": {"path": spec.rootfs, "readonly": false},
        "hostname": spec.hostname,
        "mounts": mounts,
        "linux": linux,
    })
}

/// Writes `config.json` for `spec` into `dir` (made if missing, mode 0700).
pub fn write(dir: &Path, spec: &BundleSpec) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let text = serde_json::to_vec_pretty(&config(spec)).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("config.json"), text)
}

/// The runtime's argv for running the bundle in `dir` in the foreground as container `id`:
/// `crun --cgroup-manager=disabled run --bundle DIR ID` (the caller is already in the
/// attempt's cgroup).
pub fn run_argv(runtime: &Path, dir: &Path, id: &str, state_root: &Path) -> Vec<String> {
    let crun = runtime.file_name().is_some_and(|n| n == "crun");
    let mut argv = vec![runtime.display().to_string(), "--root".into(), state_root.display().to_string()];
    if crun {
        argv.push("--cgroup-manager=disabled".into());
    }
    argv.extend(["run".into(), "--bundle".into(), dir.display().to_string(), id.into()]);
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_container_has_no_capabilities_and_a_roots_has_dockers_default_set() {
        let spec = BundleSpec {
            rootfs: "/r".into(),
            argv: vec!["sh".into()],
            env: vec![("A".into(), "1".into())],
            cwd: "/work".into(),
            uid: 1000,
            gid: 1000,
            additional_gids: vec![],
            hostname: "job-1".into(),
            binds: vec![Bind { source: "/data/in".into(), destination: "/in".into(), readonly: true }],
            tmp_bytes: 1 << 20,
            shm_bytes: 2 << 20,
            devices: vec![Device { path: "/dev/nvidia0".into(), major: 195, minor: 0 }],
            cgroups_path: Some("/gantry/n1/job-1-0".into()),
        };
        let c = config(&spec);
        assert_eq!(c["process"]["capabilities"]["effective"], json!([]));
        assert_eq!(c["process"]["noNewPrivileges"], json!(true));
        assert_eq!(c["process"]["env"], json!(["A=1"]));
        let mounts = c["mounts"].as_array().expect("mounts");
        let bind = mounts.iter().find(|m| m["destination"] == "/in").expect("bind");
        assert!(bind["options"].as_array().expect("options").contains(&json!("ro")));
        let shm = mounts.iter().find(|m| m["destination"] == "/dev/shm").expect("shm");
        assert!(shm["options"].as_array().expect("options").contains(&json!("size=2097152")));
        assert_eq!(c["linux"]["resources"]["devices"][0], json!({"allow": false, "access": "rwm"}));
        assert_eq!(c["linux"]["resources"]["devices"][1]["minor"], json!(0));
        assert_eq!(c["linux"]["cgroupsPath"], json!("/gantry/n1/job-1-0"));
        let root = config(&BundleSpec { uid: 0, ..spec });
        assert!(
            root["process"]["capabilities"]["effective"]
                .as_array()
                .expect("caps")
                .contains(&json!("CAP_CHOWN"))
        );
        assert!(
            !root["process"]["capabilities"]["effective"]
                .as_array()
                .expect("caps")
                .contains(&json!("CAP_SYS_ADMIN"))
        );
    }
}
