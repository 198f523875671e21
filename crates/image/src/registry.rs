//! A registry client for the OCI distribution API: what `docker pull` does, in the parts a node
//! needs. Manifests are asked for with every media type this crate reads; an index is followed
//! to its `linux/amd64` manifest; every manifest fetched by digest, every configuration and
//! every layer is checked against its digest as it streams to the store. Authentication is the
//! registry token flow (a `401` with `WWW-Authenticate: Bearer realm=…,service=…,scope=…` is
//! answered by asking the realm for a pull token, with the credentials when there are some) or
//! HTTP basic. Transient failures (5xx, resets) are retried with back-off; a blob cut off part
//! way resumes with a `Range` request; a pull that receives nothing for
//! [`RegistryConfig::stall_timeout`] fails with a sentence instead of a fixed overall cap.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, RANGE, WWW_AUTHENTICATE};

use crate::digest::Digest;
use crate::oci::{Descriptor, Fetched, ImageConfig, Manifest, media};
use crate::reference::Reference;
use crate::store::{Image, ImageStore, StoreError};

/// Why a pull failed: each a sentence a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The registry refused or does not have it.
    #[error("{0}")]
    Registry(String),
    /// What the registry sent is not what it should be.
    #[error("{0}")]
    Invalid(String),
    /// Nothing arrived for the stall timeout.
    #[error("the pull of {what} received nothing for {secs} s (--pull-stall-timeout)")]
    Stalled {
        /// What was being fetched.
        what: String,
        /// The timeout.
        secs: u64,
    },
    /// The node's store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A user name and password (or token) for a registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password or access token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("username", &self.username).finish_non_exhaustive()
    }
}

/// How the node reaches registries.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// Registries (`host:port`) spoken to over plain HTTP (`--insecure-registry`); TLS for
    /// every other.
    pub insecure: Vec<String>,
    /// A pull that receives nothing for this long fails.
    pub stall_timeout: Duration,
    /// Attempts per request on transient failures.
    pub attempts: u32,
    /// Largest manifest or configuration accepted, bytes.
    pub max_document: usize,
    /// Checks a URL the registry sends the client to on its own (a token service's realm)
    /// before it is asked: the agent's egress rules.
    pub check_url: Option<UrlCheck>,
}

/// Whether a URL may be dialled: `Err` with the sentence why not.
pub type UrlCheckFn = dyn Fn(&reqwest::Url) -> Result<(), String> + Send + Sync;

/// A check of a URL a registry named (see [`RegistryConfig::check_url`]).
#[derive(Clone)]
pub struct UrlCheck(pub std::sync::Arc<UrlCheckFn>);

impl std::fmt::Debug for UrlCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UrlCheck")
    }
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            insecure: Vec::new(),
            stall_timeout: Duration::from_secs(120),
            attempts: 5,
            max_document: 4 << 20,
            check_url: None,
        }
    }
}

/// A registry client (one per node: it keeps pull tokens per repository).
#[derive(Debug)]
pub struct Registry {
    http: reqwest::Client,
    config: RegistryConfig,
    /// Pull tokens by registry, repository and whose credentials got them: a token one team's
    /// credentials earned is never sent for another team's pull.
    tokens: Mutex<HashMap<(String, String, Digest), String>>,
}

/// A manifest resolved from a reference: its digest and content.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The manifest's digest (of its bytes): what a job records and runs.
    pub digest: Digest,
    /// The manifest.
    pub manifest: Manifest,
}

impl Registry {
    /// A client built from `http` (the caller decides the TLS roots, which addresses may be
    /// dialled and which redirects are followed: the agent passes its egress-guarded builder).
    pub fn new(http: reqwest::ClientBuilder, config: RegistryConfig) -> Result<Self, PullError> {
        // The redirect policy is the caller's: the agent's checks every target against its
        // egress rules (registries send blob downloads to a CDN or object store by redirect).
        let http = http
            .build()
            .map_err(|e| PullError::Registry(format!("cannot build the registry client: {e}")))?;
        Ok(Self { http, config, tokens: Mutex::default() })
    }

    fn base(&self, r: &Reference) -> String {
        let scheme = if self.config.insecure.iter().any(|h| h == &r.registry) { "http" } else { "https" };
        format!("{scheme}://{}/v2/{}", r.api_host(), r.repository)
    }

    /// Resolves `r` to its `linux/amd64` manifest and that manifest's digest.
    pub async fn resolve(&self, r: &Reference, creds: Option<&Credentials>) -> Result<Resolved, PullError> {
        let (bytes, content_type) = self.document(r, creds, &r.manifest_ref(), r.digest.as_ref()).await?;
        let digest = Digest::of(&bytes);
        match Fetched::parse(content_type.as_deref(), &bytes)
            .map_err(|e| PullError::Invalid(format!("{r}: {e}")))?
        {
            Fetched::Manifest(manifest) => Ok(Resolved { digest, manifest }),
            Fetched::Index(index) => {
                let entry = index.linux_amd64().map_err(|e| PullError::Invalid(format!("{r}: {e}")))?.clone();
                let (bytes, content_type) =
                    self.document(r, creds, entry.digest.as_str(), Some(&entry.digest)).await?;
                match Fetched::parse(content_type.as_deref(), &bytes)
                    .map_err(|e| PullError::Invalid(format!("{r}: {e}")))?
                {
                    Fetched::Manifest(manifest) => Ok(Resolved { digest: entry.digest, manifest }),
                    Fetched::Index(_) => Err(PullError::Invalid(format!("{r}: an index inside an index"))),
                }
            }
        }
    }

    /// Pulls `r` into `store` (what it holds already is not fetched again) and records it.
    pub async fn pull(
        &self,
        r: &Reference,
        creds: Option<&Credentials>,
        store: &ImageStore,
    ) -> Result<Image, PullError> {
        let resolved = self.resolve(r, creds).await?;
        self.pull_resolved(r, creds, resolved, store).await
    }

    /// Pulls what [`Self::resolve`] found (the caller may make room between the two).
    pub async fn pull_resolved(
        &self,
        r: &Reference,
        creds: Option<&Credentials>,
        resolved: Resolved,
        store: &ImageStore,
    ) -> Result<Image, PullError> {
        if let Some(image) = store.image(&resolved.digest) {
            store.touch(&resolved.digest);
            return Ok(image);
        }
        let config_desc = &resolved.manifest.config;
        if !store.has_blob(&config_desc.digest) {
            self.blob(r, creds, config_desc, store).await?;
        }
        let config_bytes = store.read_blob(&config_desc.digest)?;
        let config: ImageConfig = serde_json::from_slice(&config_bytes)
            .map_err(|e| PullError::Invalid(format!("{r}: the image configuration is malformed: {e}")))?;
        if !config.os.is_empty() && config.os != "linux" {
            return Err(PullError::Invalid(format!("{r} is an image for {}, not linux", config.os)));
        }
        for layer in &resolved.manifest.layers {
            crate::unpack::Compression::of(&layer.media_type)
                .map_err(|e| PullError::Invalid(format!("{r}: {e}")))?;
            if !store.layer_dir(&layer.digest).is_dir() && !store.has_blob(&layer.digest) {
                self.blob(r, creds, layer, store).await?;
            }
            let (store2, layer2) = (store.clone(), layer.clone());
            tokio::task::spawn_blocking(move || store2.unpack_layer(&layer2))
                .await
                .map_err(|e| PullError::Invalid(format!("unpacking a layer stopped: {e}")))??;
        }
        let image = Image {
            reference: r.pinned(resolved.digest.clone()).to_string(),
            digest: resolved.digest,
            config,
            layers: resolved.manifest.layers,
            config_blob: Some(config_desc.digest.clone()),
            teams: Vec::new(),
        };
        store.record(&image)?;
        Ok(image)
    }

    /// A manifest's bytes and media type; checked against `digest` when one is expected.
    async fn document(
        &self,
        r: &Reference,
        creds: Option<&Credentials>,
        reference: &str,
        digest: Option<&Digest>,
    ) -> Result<(Vec<u8>, Option<String>), PullError> {
        let url = format!("{}/manifests/{reference}", self.base(r));
        let resp = self.get(r, creds, &url, None, media::ACCEPT).await?;
        let content_type = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut body = Vec::new();
        let mut resp = resp;
        while let Some(chunk) = self.next(&mut resp, &url).await? {
            body.extend_from_slice(&chunk);
            if body.len() > self.config.max_document {
                return Err(PullError::Invalid(format!(
                    "{r}: the manifest is larger than {} bytes",
                    self.config.max_document
                )));
            }
        }
        if let Some(d) = digest
            && Digest::of(&body) != *d
        {
            return Err(PullError::Invalid(format!("{r}: the manifest does not hash to {d}")));
        }
        Ok((body, content_type))
    }

    /// Streams the blob `desc` into the store, verified; resumes a cut-off transfer.
    async fn blob(
        &self,
        r: &Reference,
        creds: Option<&Credentials>,
        desc: &Descriptor,
        store: &ImageStore,
    ) -> Result<(), PullError> {
        let url = format!("{}/blobs/{}", self.base(r), desc.digest);
        let mut writer = store.blob_writer(&desc.digest, desc.size)?;
        let mut tries = 0;
        loop {
            tries += 1;
            let from = writer.written();
            let range = (from > 0).then(|| format!("bytes={from}-"));
            let resp = self.get(r, creds, &url, range.as_deref(), "*/*").await?;
            if from > 0 && resp.status() != StatusCode::PARTIAL_CONTENT {
                writer.restart()?; // the whole blob again
            }
            let mut resp = resp;
            let cut = loop {
                match self.next(&mut resp, &url).await {
                    Ok(Some(chunk)) => writer.write(&chunk)?,
                    Ok(None) => break None,
                    Err(PullError::Registry(why)) => break Some(why),
                    Err(e) => return Err(e),
                }
            };
            match cut {
                None if writer.written() == desc.size => break,
                None => {
                    if tries >= self.config.attempts {
                        return Err(PullError::Registry(format!(
                            "{r}: blob {} ended after {} of {} bytes",
                            desc.digest,
                            writer.written(),
                            desc.size
                        )));
                    }
                }
                Some(why) if tries >= self.config.attempts => return Err(PullError::Registry(why)),
                Some(why) => tracing::info!(blob = %desc.digest, %why, "resuming a cut-off blob"),
            }
            tokio::time::sleep(backoff(tries)).await;
        }
        let done = tokio::task::spawn_blocking(move || writer.finish())
            .await
            .map_err(|e| PullError::Invalid(format!("writing a blob stopped: {e}")))?;
        Ok(done?)
    }

    /// The next chunk of a body, within the stall timeout.
    async fn next(&self, resp: &mut reqwest::Response, url: &str) -> Result<Option<bytes::Bytes>, PullError> {
        match tokio::time::timeout(self.config.stall_timeout, resp.chunk()).await {
            Err(_) => {
                Err(PullError::Stalled { what: url.to_owned(), secs: self.config.stall_timeout.as_secs() })
            }
            Ok(Ok(chunk)) => Ok(chunk),
            Ok(Err(e)) => Err(PullError::Registry(format!("reading {url}: {e}"))),
        }
    }

    /// GET with authentication and retries on transient failures; a successful answer.
    async fn get(
        &self,
        r: &Reference,
        creds: Option<&Credentials>,
        url: &str,
        range: Option<&str>,
        accept: &str,
    ) -> Result<reqwest::Response, PullError> {
        let who = creds.map_or_else(
            || Digest::of(b"anonymous"),
            |c| Digest::of(format!("{}\0{}", c.username, c.password).as_bytes()),
        );
        let key = (r.registry.clone(), r.repository.clone(), who);
        let mut tries = 0;
        let mut authenticated = false;
        loop {
            tries += 1;
            let mut req = self.http.get(url).header(ACCEPT, accept);
            if let Some(range) = range {
                req = req.header(RANGE, range);
            }
            let token =
                self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).cloned();
            if let Some(auth) = token {
                req = req.header(AUTHORIZATION, auth);
            }
            let sent = tokio::time::timeout(self.config.stall_timeout, req.send()).await;
            let resp = match sent {
                Err(_) => {
                    return Err(PullError::Stalled {
                        what: url.to_owned(),
                        secs: self.config.stall_timeout.as_secs(),
                    });
                }
                Ok(Err(e)) if tries < self.config.attempts => {
                    tracing::info!(%url, error = %e, "retrying a registry request");
                    tokio::time::sleep(backoff(tries)).await;
                    continue;
                }
                Ok(Err(e)) => return Err(PullError::Registry(format!("cannot reach {}: {e}", r.registry))),
                Ok(Ok(resp)) => resp,
            };
            let status = resp.status();
            if status == StatusCode::UNAUTHORIZED && !authenticated {
                authenticated = true;
                let challenge =
                    resp.headers().get(WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).map(str::to_owned);
                let auth = self.authenticate(r, creds, challenge.as_deref()).await?;
                self.tokens
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(key.clone(), auth);
                continue;
            }
            if status.is_server_error() && tries < self.config.attempts {
                tokio::time::sleep(backoff(tries)).await;
                continue;
            }
            if status.is_success() {
                return Ok(resp);
            }
            return Err(PullError::Registry(match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => format!(
                    "{} refused access to {} ({status}): give the team's registry credentials (--registry-secret)",
                    r.registry, r.repository
                ),
                StatusCode::NOT_FOUND => format!("{r}: no such image on {} ({status})", r.registry),
                _ => format!("{} answered {status} for {url}", r.registry),
            }));
        }
    }

    /// The `Authorization` value a challenge asks for.
    async fn authenticate(
        &self,
        r: &Reference,
        creds: Option<&Credentials>,
        challenge: Option<&str>,
    ) -> Result<String, PullError> {
        let challenge = challenge.unwrap_or("");
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            let c = creds.ok_or_else(|| {
                PullError::Registry(format!(
                    "{} asks for a user name and password: give the team's registry credentials (--registry-secret)",
                    r.registry
                ))
            })?;
            return Ok(basic(c));
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(PullError::Registry(format!(
                "{} asks for authentication Gantry does not speak: {challenge}",
                r.registry
            )));
        }
        let params = challenge_params(params);
        let realm = params
            .get("realm")
            .ok_or_else(|| PullError::Registry(format!("{}'s token challenge names no realm", r.registry)))?;
        let scope =
            params.get("scope").cloned().unwrap_or_else(|| format!("repository:{}:pull", r.repository));
        let mut query: Vec<(&str, &str)> = vec![("scope", &scope)];
        if let Some(service) = params.get("service") {
            query.push(("service", service));
        }
        let url = reqwest::Url::parse_with_params(realm, &query).map_err(|e| {
            PullError::Registry(format!("{}'s token realm `{realm}` is not a URL: {e}", r.registry))
        })?;
        // A realm elsewhere than the registry itself is a place the registry sends the node to.
        let same_host = url.host_str().zip(url.port_or_known_default()).is_some_and(|(h, p)| {
            format!("{h}:{p}") == r.registry || (h == r.registry && url.port().is_none())
        });
        if let Some(check) = self.config.check_url.as_ref().filter(|_| !same_host) {
            (check.0)(&url).map_err(|e| PullError::Registry(format!("{}'s token realm: {e}", r.registry)))?;
        }
        let mut req = self.http.get(url);
        if let Some(c) = creds {
            req = req.header(AUTHORIZATION, basic(c));
        }
        let resp = req
            .send()
            .await
            .map_err(|e| PullError::Registry(format!("cannot reach {}'s token service: {e}", r.registry)))?;
        if !resp.status().is_success() {
            return Err(PullError::Registry(format!(
                "{}'s token service refused ({}): check the team's registry credentials",
                r.registry,
                resp.status()
            )));
        }
        let body: serde_json::Value = resp.json().await.map_err(|e| {
            PullError::Invalid(format!("{}'s token service answered no JSON: {e}", r.registry))
        })?;
        let token =
            body.get("token").or_else(|| body.get("access_token")).and_then(|t| t.as_str()).ok_or_else(
                || PullError::Invalid(format!("{}'s token service answered no token", r.registry)),
            )?;
        Ok(format!("Bearer {token}"))
    }
}

fn basic(c: &Credentials) -> String {
    use base64::Engine as _;
    let pair = format!("{}:{}", c.username, c.password);
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
}

/// `realm="…",service="…",scope="…"` as a map.
fn challenge_params(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else { break };
        let key = key.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.split_once('"') {
                Some((v, a)) => (v.to_owned(), a),
                None => (quoted.to_owned(), ""),
            }
        } else {
            match after.split_once(',') {
                Some((v, a)) => (v.trim().to_owned(), a),
                None => (after.trim().to_owned(), ""),
            }
        };
        out.insert(key, value);
        rest = after.trim_start_matches([',', ' ']);
    }
    out
}

fn backoff(tries: u32) -> Duration {
    Duration::from_millis(200u64 << tries.min(6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_is_read_with_its_quoted_parameters() {
        let p = challenge_params(
            r#"realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/ubuntu:pull""#,
        );
        assert_eq!(p["realm"], "https://auth.docker.io/token");
        assert_eq!(p["service"], "registry.docker.io");
        assert_eq!(p["scope"], "repository:library/ubuntu:pull");
    }
}
