//! The parts of the OCI image spec (and Docker's schema 2, its ancestor) an agent reads:
//! indexes, manifests, descriptors and the image configuration. Unknown fields are ignored, as
//! the spec asks of readers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;

/// Media types.
pub mod media {
    /// An OCI image index.
    pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
    /// An OCI image manifest.
    pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
    /// Docker's manifest list (an index).
    pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
    /// Docker's schema 2 manifest.
    pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
    /// An OCI image configuration.
    pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
    /// Docker's image configuration.
    pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
    /// An uncompressed OCI layer.
    pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
    /// A gzip-compressed OCI layer.
    pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
    /// A zstd-compressed OCI layer.
    pub const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
    /// Docker's (gzip-compressed) layer.
    pub const DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
    /// What a client accepts when it asks for a manifest.
    pub const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";
}

/// A pointer to content: its type, digest and size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The content's media type.
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    /// For an index entry: the platform it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

/// An operating system and architecture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    /// E.g. `amd64`.
    pub architecture: String,
    /// E.g. `linux`.
    pub os: String,
    /// E.g. `v8` for arm64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// An image index (or Docker manifest list): one manifest per platform.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// Always 2.
    pub schema_version: u32,
    /// The index's own media type (optional in OCI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The manifests.
    pub manifests: Vec<Descriptor>,
}

/// An image manifest: the configuration and the layers, bottom first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// The manifest's own media type (optional in OCI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The image configuration.
    pub config: Descriptor,
    /// The layers, bottom first.
    pub layers: Vec<Descriptor>,
}

/// What a manifest request answered: an index or a manifest.
#[derive(Debug, Clone)]
pub enum Fetched {
    /// An index: pick a platform's manifest from it.
    Index(Index),
    /// An image manifest.
    Manifest(Manifest),
}

impl Fetched {
    /// Reads a manifest request's body by its media type (the header's, else the body's own
    /// `mediaType`, else by shape: an index has `manifests`).
    pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Self, String> {
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| format!("the manifest is not JSON: {e}"))?;
        let declared = value.get("mediaType").and_then(|m| m.as_str()).map(str::to_owned);
        let kind = content_type
            .map(|c| c.split(';').next().unwrap_or("").trim().to_owned())
            .filter(|c| c.starts_with("application/vnd."))
            .or(declared);
        let is_index = match kind.as_deref() {
            Some(media::OCI_INDEX | media::DOCKER_LIST) => true,
            Some(media::OCI_MANIFEST | media::DOCKER_MANIFEST) => false,
            Some(other) => return Err(format!("a manifest of type {other} is not supported")),
            None => value.get("manifests").is_some(),
        };
        if value.get("schemaVersion").and_then(serde_json::Value::as_u64) != Some(2) {
            return Err("only schema version 2 manifests are supported".into());
        }
        if is_index {
            Ok(Self::Index(
                serde_json::from_value(value).map_err(|e| format!("the index is malformed: {e}"))?,
            ))
        } else {
            Ok(Self::Manifest(
                serde_json::from_value(value).map_err(|e| format!("the manifest is malformed: {e}"))?,
            ))
        }
    }
}

impl Index {
    /// The manifest for `linux/amd64` (the platform Gantry's nodes run), else a sentence
    /// naming the platforms the index has.
    pub fn linux_amd64(&self) -> Result<&Descriptor, String> {
        self.manifests
            .iter()
            .find(|d| d.platform.as_ref().is_some_and(|p| p.os == "linux" && p.architecture == "amd64"))
            .ok_or_else(|| {
                let have: Vec<String> = self
                    .manifests
                    .iter()
                    .filter_map(|d| d.platform.as_ref().map(|p| format!("{}/{}", p.os, p.architecture)))
                    .collect();
                format!("the image has no linux/amd64 variant (it has: {})", have.join(", "))
            })
    }
}

/// An image configuration: what a container runs by default, and the layers' uncompressed
/// digests.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ImageConfig {
    /// E.g. `amd64`.
    #[serde(default)]
    pub architecture: String,
    /// E.g. `linux`.
    #[serde(default)]
    pub os: String,
    /// The defaults of a container.
    #[serde(default)]
    pub config: Option<RunConfig>,
    /// The layers' uncompressed digests.
    #[serde(default)]
    pub rootfs: Option<RootFs>,
}

/// The defaults of a container: entrypoint, command, environment, directory, user.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    /// `NAME=value` pairs.
    #[serde(default)]
    pub env: Option<Vec<String>>,
    /// The executable and its first arguments.
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    /// The default arguments (replaced by a job's command).
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    /// The directory to start in.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// `user[:group]` by name or number.
    #[serde(default)]
    pub user: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
}

/// The layers' uncompressed digests, bottom first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RootFs {
    /// Always `layers`.
    #[serde(rename = "type")]
    pub kind: String,
    /// One per layer.
    pub diff_ids: Vec<Digest>,
}

impl ImageConfig {
    /// The argv a container runs: the image's entrypoint, then `command` if the job gave one,
    /// else the image's `Cmd` (as `docker run IMAGE COMMAND` does); `entrypoint` replaces the
    /// image's when given.
    pub fn argv(&self, command: &[String], entrypoint: Option<&[String]>) -> Vec<String> {
        let run = self.config.clone().unwrap_or_default();
        let mut argv: Vec<String> = match entrypoint {
            Some(e) => e.to_vec(),
            None => run.entrypoint.unwrap_or_default(),
        };
        if command.is_empty() {
            if entrypoint.is_none() {
                argv.extend(run.cmd.unwrap_or_default());
            }
        } else {
            argv.extend(command.iter().cloned());
        }
        argv
    }

    /// The image's environment as pairs (a malformed entry, without `=`, is dropped).
    pub fn env(&self) -> Vec<(String, String)> {
        let run = self.config.as_ref().and_then(|c| c.env.as_ref());
        run.into_iter()
            .flatten()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_picks_linux_amd64_and_says_what_it_has_otherwise() {
        let d = Digest::of(b"m");
        let body = serde_json::json!({"schemaVersion": 2, "manifests": [
            {"mediaType": media::OCI_MANIFEST, "digest": d, "size": 10, "platform": {"architecture": "arm64", "os": "linux"}},
            {"mediaType": media::OCI_MANIFEST, "digest": d, "size": 11, "platform": {"architecture": "amd64", "os": "linux"}}
        ]});
        let Fetched::Index(index) = Fetched::parse(None, body.to_string().as_bytes()).expect("index") else {
            panic!("not an index")
        };
        assert_eq!(index.linux_amd64().expect("amd64").size, 11);
        let arm_only = Index { manifests: vec![index.manifests[0].clone()], ..index };
        assert!(arm_only.linux_amd64().expect_err("none").contains("linux/arm64"));
        let schema1 = serde_json::json!({"schemaVersion": 1, "fsLayers": []});
        assert!(Fetched::parse(None, schema1.to_string().as_bytes()).is_err());
    }

    #[test]
    fn a_command_replaces_cmd_and_keeps_the_entrypoint_as_docker_run_does() {
        let config = ImageConfig {
            config: Some(RunConfig {
                entrypoint: Some(vec!["/entry.sh".into()]),
                cmd: Some(vec!["serve".into()]),
                env: Some(vec!["PATH=/bin".into(), "broken".into()]),
                ..RunConfig::default()
            }),
            ..ImageConfig::default()
        };
        assert_eq!(config.argv(&[], None), ["/entry.sh", "serve"]);
        assert_eq!(config.argv(&["train".into()], None), ["/entry.sh", "train"]);
        assert_eq!(
            config.argv(&["x".into()], Some(&["/bin/sh".into(), "-c".into()])),
            ["/bin/sh", "-c", "x"]
        );
        assert_eq!(
            config.argv(&[], Some(&["/bin/true".into()])),
            ["/bin/true"],
            "a new entrypoint drops Cmd"
        );
        assert_eq!(config.env(), [("PATH".to_owned(), "/bin".to_owned())]);
    }
}
