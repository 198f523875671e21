//! Image references as `docker pull` reads them: `[host[:port]/]repo[/more][:tag][@sha256:…]`.
//! A first component with a `.` or a `:`, or `localhost`, is a registry host; otherwise the
//! image is on Docker Hub (`docker.io`), and a one-component name is in `library/`
//! (`ubuntu` is `docker.io/library/ubuntu:latest`).

use std::fmt;

use crate::digest::Digest;

/// Docker Hub's registry name and the host its API answers on.
pub const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The registry host, with its port if any (`docker.io` for Docker Hub).
    pub registry: String,
    /// The repository path, e.g. `library/ubuntu` or `team/trainer`.
    pub repository: String,
    /// The tag (`latest` when neither a tag nor a digest is given).
    pub tag: Option<String>,
    /// The digest, when the reference pins one.
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parses a reference; a malformed one gets a sentence saying what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("image `{text}`: {why}");
        if text.is_empty() || text.len() > 512 {
            return Err(bad("must be 1 to 512 characters"));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("has a space or a control character"));
        }
        let (rest, digest) = match text.split_once('@') {
            Some((rest, d)) => (rest, Some(Digest::parse(d).map_err(|e| bad(&e))?)),
            None => (text, None),
        };
        // A tag is after the last `:` that follows the last `/` (a port's `:` comes before it).
        let slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[slash..].rfind(':') {
            Some(i) => (&rest[..slash + i], Some(rest[slash + i + 1..].to_owned())),
            None => (rest, None),
        };
        if let Some(tag) = &tag {
            let ok = !tag.is_empty()
                && tag.len() <= 128
                && tag.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                && tag.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
            if !ok {
                return Err(bad("a tag is letters, digits, `_`, `.` and `-`, at most 128"));
            }
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, path)) if first.contains('.') || first.contains(':') || first == "localhost" => {
                (first.to_owned(), path.to_owned())
            }
            Some(_) => (DOCKER_HUB.to_owned(), name.to_owned()),
            None => (DOCKER_HUB.to_owned(), format!("library/{name}")),
        };
        let registry = if registry == "index.docker.io" { DOCKER_HUB.to_owned() } else { registry };
        if !registry.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c)) {
            return Err(bad("the registry is not a host name or address with an optional port"));
        }
        for part in repository.split('/') {
            if !component(part) {
                return Err(bad(
                    "each part of the repository is lowercase letters and digits, separated by `.`, `_`, `__` or `-`",
                ));
            }
        }
        let tag = if tag.is_none() && digest.is_none() { Some("latest".to_owned()) } else { tag };
        Ok(Self { registry, repository, tag, digest })
    }

    /// The host the registry's API answers on (Docker Hub's differs from its name).
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB { DOCKER_HUB_API } else { &self.registry }
    }

    /// What the manifest is asked by: the digest when pinned, else the tag.
    pub fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".into(),
        }
    }

    /// The same image pinned to `digest` (what every attempt of a job runs).
    pub fn pinned(&self, digest: Digest) -> Self {
        Self { digest: Some(digest), ..self.clone() }
    }
}

/// A repository path component: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn component(part: &str) -> bool {
    let bytes = part.as_bytes();
    if bytes.is_empty()
        || !bytes[0].is_ascii_alphanumeric()
        || !bytes[bytes.len() - 1].is_ascii_alphanumeric()
    {
        return false;
    }
    let mut sep = String::new();
    for &b in bytes {
        if b.is_ascii_lowercase() || b.is_ascii_digit() {
            if !(sep.is_empty() || sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-'))
            {
                return false;
            }
            sep.clear();
        } else if b == b'.' || b == b'_' || b == b'-' {
            sep.push(b as char);
        } else {
            return false;
        }
    }
    true
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_resolve_as_docker_reads_them() {
        let cases = [
            ("ubuntu", "docker.io/library/ubuntu:latest", "registry-1.docker.io"),
            (
                "pytorch/pytorch:2.3.0-cuda12.1",
                "docker.io/pytorch/pytorch:2.3.0-cuda12.1",
                "registry-1.docker.io",
            ),
            ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io"),
            ("127.0.0.1:5000/team/busybox:v1", "127.0.0.1:5000/team/busybox:v1", "127.0.0.1:5000"),
            ("localhost/x", "localhost/x:latest", "localhost"),
            ("index.docker.io/library/debian:12", "docker.io/library/debian:12", "registry-1.docker.io"),
        ];
        for (text, canonical, host) in cases {
            let r = Reference::parse(text).expect(text);
            assert_eq!(r.to_string(), canonical, "{text}");
            assert_eq!(r.api_host(), host, "{text}");
        }
        let d = "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        let pinned = Reference::parse(&format!("quay.io/a/b@{d}")).expect("pinned");
        assert_eq!(pinned.tag, None);
        assert_eq!(pinned.manifest_ref(), d);
        let both = Reference::parse(&format!("quay.io/a/b:v2@{d}")).expect("both");
        assert_eq!(both.manifest_ref(), d, "the digest wins");
    }

    #[test]
    fn malformed_references_are_refused_with_a_sentence() {
        for bad in [
            "",
            "Ubuntu",
            "ubuntu:",
            "ubuntu:-x",
            "a//b",
            "a/../b",
            "registry.io/a b",
            "x@sha256:abc",
            "registry.io/a/b@md5:00",
            "reg$.io/a",
        ] {
            let err = Reference::parse(bad).expect_err(bad);
            assert!(err.starts_with("image `"), "{err}");
        }
    }
}
