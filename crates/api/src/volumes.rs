//! Volumes: directories a team's jobs mount, that outlive them (`gantry volume create`,
//! `--volume NAME:/mnt/x[:ro]`).
//!
//! A volume is its team's. It lives either on a shared file system mounted at the same path on
//! every node (`path`, under a root the admin allowed with `--volume-root`), or on one node
//! (`node`: the agent keeps it under its work directory, and jobs that mount it are placed on
//! that node only). A job names the volumes it mounts and where; the agent binds each into the
//! job's own mount namespace, read-only when asked, and refuses to start an attempt whose
//! volume holds more than its `size_bytes`.

use serde::{Deserialize, Serialize};

/// The directories under which a job may mount a volume: conventional mount points, never a
/// directory the node's system needs (`/etc`, `/usr`, `/home`, `/proc`, …).
pub const MOUNT_ROOTS: &[&str] =
    &["/mnt", "/data", "/scratch", "/datasets", "/models", "/workspace", "/volumes"];

/// Most volumes one job mounts.
pub const MAX_MOUNTS: usize = 8;

/// A volume as stored and listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Volume {
    /// Its name, unique in its team.
    pub name: String,
    /// Its team.
    pub team: String,
    /// A directory on a shared file system, the same on every node (`None`: node-local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The node it lives on (`None`: shared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Most bytes it may hold (`None`: no limit but the disk's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// ms since the epoch.
    pub created_at: i64,
}

/// A volume to create (`POST /v1/volumes`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct VolumeRequest {
    /// Its name (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Its team (default: the caller's only team).
    #[serde(default)]
    pub team: Option<String>,
    /// A directory on a shared file system under one of the server's `--volume-root`s.
    #[serde(default)]
    pub path: Option<String>,
    /// The node it lives on (default: the only registered node, when there is one).
    #[serde(default)]
    pub node: Option<String>,
    /// Most bytes it may hold.
    #[serde(default)]
    pub size_bytes: Option<u64>,
}

/// A volume a job mounts, and where (`NAME:/mnt/x[:ro]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    /// The volume, of the job's team.
    pub name: String,
    /// Where the job sees it: an absolute path under one of [`MOUNT_ROOTS`].
    pub path: String,
    /// Mounted read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

impl std::str::FromStr for VolumeMount {
    type Err = String;

    /// `NAME:/mnt/x` or `NAME:/mnt/x:ro` (`rw` is the default and may be written).
    fn from_str(text: &str) -> Result<Self, String> {
        let mut parts = text.splitn(3, ':');
        let (Some(name), Some(path)) = (parts.next(), parts.next()) else {
            return Err(format!("volume `{text}`: write NAME:/PATH or NAME:/PATH:ro"));
        };
        let read_only = match parts.next() {
            None | Some("rw") => false,
            Some("ro") => true,
            Some(other) => return Err(format!("volume `{text}`: `{other}` is not ro or rw")),
        };
        let mount = Self { name: name.to_owned(), path: path.to_owned(), read_only };
        mount.check()?;
        Ok(mount)
    }
}

/// Whether `name` may name a volume: 1 to 64 letters, digits, `-`, `_` or `.`, not `.` or `..`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("volume name `{name}`: use 1 to 64 letters, digits, '-', '_' or '.'"))
    }
}

impl VolumeMount {
    /// Refuses a bad name, or a path that is not absolute, has `.`/`..`/empty parts, or lies
    /// outside [`MOUNT_ROOTS`] (or is one of them itself).
    pub fn check(&self) -> Result<(), String> {
        check_name(&self.name)?;
        let path = &self.path;
        let parts: Vec<&str> = path.strip_prefix('/').map(|p| p.split('/').collect()).unwrap_or_default();
        let plain = path.len() <= 255
            && !parts.is_empty()
            && parts
                .iter()
                .all(|p| !p.is_empty() && *p != "." && *p != ".." && !p.chars().any(char::is_control));
        if !plain {
            return Err(format!("volume {}: `{path}` is not a plain absolute path", self.name));
        }
        let root = format!("/{}", parts[0]);
        if parts.len() < 2 || !MOUNT_ROOTS.contains(&root.as_str()) {
            return Err(format!(
                "volume {}: mount it under one of {} (e.g. /mnt/{}), not at `{path}`",
                self.name,
                MOUNT_ROOTS.join(", "),
                self.name
            ));
        }
        Ok(())
    }
}

/// Refuses more than [`MAX_MOUNTS`] mounts, a volume named twice, or two paths one inside the
/// other.
pub fn check_mounts(mounts: &[VolumeMount]) -> Result<(), String> {
    if mounts.len() > MAX_MOUNTS {
        return Err(format!("volumes: at most {MAX_MOUNTS} per job"));
    }
    for (i, m) in mounts.iter().enumerate() {
        m.check()?;
        for other in &mounts[..i] {
            if other.name == m.name {
                return Err(format!("volumes: {} is mounted twice", m.name));
            }
            let nested = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/"));
            if nested(&m.path, &other.path) || nested(&other.path, &m.path) {
                return Err(format!(
                    "volumes: {} and {} overlap ({} and {})",
                    other.name, m.name, other.path, m.path
                ));
            }
        }
    }
    Ok(())
}

/// Reads mounts written either as `NAME:/PATH[:ro]` or as `{name, path, read_only}` (service
/// and job files take the short form).
pub fn text_or_objects<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<VolumeMount>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Object(VolumeMount),
    }
    let items: Vec<Either> = Vec::deserialize(d)?;
    items
        .into_iter()
        .map(|e| match e {
            Either::Text(t) => t.parse().map_err(serde::de::Error::custom),
            Either::Object(m) => Ok(m),
        })
        .collect()
}

/// A volume as the node that runs a job mounts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AssignedVolume {
    /// The volume.
    pub name: String,
    /// Where the job sees it.
    pub path: String,
    /// Mounted read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// The shared directory it is (`None`: the node's own, under its work directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Most bytes it may hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_is_name_path_and_ro_under_the_mount_roots_only() {
        let m: VolumeMount = "data:/mnt/data:ro".parse().expect("valid");
        assert_eq!((m.name.as_str(), m.path.as_str(), m.read_only), ("data", "/mnt/data", true));
        assert!(!"cache:/scratch/hf".parse::<VolumeMount>().expect("valid").read_only);
        for bad in [
            "data",
            "data:mnt/x",
            "data:/mnt",
            "data:/etc/cron.d",
            "data:/mnt/../etc",
            "data:/mnt/x:rx",
            "..:/mnt/x",
            "a b:/mnt/x",
        ] {
            assert!(bad.parse::<VolumeMount>().is_err(), "{bad}");
        }
        let two = |a: &str, b: &str| check_mounts(&[a.parse().expect("a"), b.parse().expect("b")]);
        assert!(two("a:/mnt/a", "b:/mnt/b").is_ok());
        assert!(two("a:/mnt/a", "a:/mnt/b").is_err(), "a volume twice");
        assert!(two("a:/mnt/a", "b:/mnt/a/b").is_err(), "nested");
    }
}
