//! Declared inputs: the data a job reads, staged onto its node while it waits (issue 22).
//!
//! A job names each input `NAME=URL` (`--input`, `inputs:` in a job file). The scheduler picks
//! a node for a pending job that has inputs and tells that node's agent to stage them
//! ([`StageOrder`], in the heartbeat's answer) without allocating its GPUs; the agent copies
//! each source into its node-local cache and reports progress ([`StageReport`], in its
//! heartbeat); once every input is there the scheduler places the job on that node, and the
//! agent starts it with `GANTRY_INPUT_<NAME>` naming a read-only copy. The result of each
//! staging is kept on the job's [`Input`] (`bytes`, `cache_hit`, `staged_s`), which is what
//! `gantry job N -o json` lists. The agent's cache reports its entries ([`CacheEntry`],
//! `gantry cache`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Most inputs one job may declare.
pub const MAX_INPUTS: usize = 16;

/// One declared input, and once it is staged what the staging found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// Its name: the job finds it at `$GANTRY_INPUT_<NAME>` (letters, digits, `_`).
    pub name: String,
    /// Where it comes from: `s3://bucket/prefix`, `https://…` or `file:///shared/path`.
    pub url: String,
    /// Its size once staged, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Whether the node's cache held it already (no byte was copied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_hit: Option<bool>,
    /// How long its staging took, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_s: Option<f64>,
}

impl Eq for Input {}

impl Input {
    /// An input not staged yet.
    pub fn new(name: &str, url: &str) -> Self {
        Self { name: name.to_owned(), url: url.to_owned(), bytes: None, cache_hit: None, staged_s: None }
    }

    /// The environment variable the job finds it in.
    pub fn env_name(&self) -> String {
        format!("GANTRY_INPUT_{}", self.name.to_ascii_uppercase())
    }
}

/// The source an input URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An S3 bucket (any S3-compatible endpoint) and a key prefix (empty: the whole bucket);
    /// a prefix that names one object is that object.
    S3 {
        /// Bucket.
        bucket: String,
        /// Key prefix, without a leading `/`.
        prefix: String,
    },
    /// One file over HTTPS (or HTTP, for a server on loopback in tests).
    Http(String),
    /// A path on storage the nodes mount.
    File(String),
}

impl Source {
    /// Parses an input URL, or says why it is not one.
    pub fn parse(url: &str) -> Result<Self, String> {
        if url.len() > 2048 || url.chars().any(|c| c.is_control() || c == ' ') {
            return Err(format!("`{url}`: at most 2048 characters, no spaces or control characters"));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let bucket_ok = (3..=63).contains(&bucket.len())
                && bucket
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
            if !bucket_ok {
                return Err(format!(
                    "`{url}`: an S3 bucket is 3 to 63 lowercase letters, digits, `-` or `.`"
                ));
            }
            if prefix.split('/').any(|p| p == "..") {
                return Err(format!("`{url}`: a key prefix has no `..` part"));
            }
            return Ok(Self::S3 { bucket: bucket.to_owned(), prefix: prefix.to_owned() });
        }
        if url.starts_with("https://") || url.starts_with("http://") {
            return Ok(Self::Http(url.to_owned()));
        }
        if let Some(path) = url.strip_prefix("file://") {
            crate::workflow::check_chdir(path)
                .map_err(|_| format!("`{url}`: a file URL names an absolute path: file:///shared/data"))?;
            return Ok(Self::File(path.to_owned()));
        }
        Err(format!("`{url}`: an input is s3://bucket/prefix, https://… or file:///path"))
    }
}

/// Parses `NAME=URL` (`--input`).
pub fn parse(text: &str) -> Result<Input, String> {
    let Some((name, url)) = text.split_once('=') else {
        return Err(format!("`{text}`: an input is NAME=URL, e.g. imagenet=s3://datasets/imagenet"));
    };
    let input = Input::new(name, url);
    check(std::slice::from_ref(&input))?;
    Ok(input)
}

/// Checks a job's inputs: at most [`MAX_INPUTS`], names of 1 to 64 letters, digits and `_`
/// not starting with a digit, each once (ignoring case, as the variable is upper case), URLs
/// that parse.
pub fn check(inputs: &[Input]) -> Result<(), String> {
    let declared = inputs.iter().map(|i| (i.name.as_str(), i.url.as_str()));
    check_declared("inputs", MAX_INPUTS, declared, |url| Source::parse(url).map(drop))
}

/// The rules inputs and outputs share (`what` names them in a sentence): at most `max`, names
/// of 1 to 64 letters, digits and `_` not starting with a digit, each once ignoring case (the
/// variable is upper case), each URL as `url` accepts it.
pub(crate) fn check_declared<'a>(
    what: &str,
    max: usize,
    declared: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    url: impl Fn(&str) -> Result<(), String>,
) -> Result<(), String> {
    if declared.len() > max {
        return Err(format!("{what}: at most {max}, not {}", declared.len()));
    }
    let mut seen = std::collections::HashSet::new();
    for (n, u) in declared {
        let ok = (1..=64).contains(&n.len())
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!("{what}: `{n}` is not a name: 1 to 64 letters, digits and `_`"));
        }
        if !seen.insert(n.to_ascii_uppercase()) {
            return Err(format!("{what}: `{n}` is declared twice"));
        }
        url(u).map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}

/// A team secret's keys and values (`gantry secret set NAME KEY=VALUE…`): its `Debug` shows
/// the keys only, so that no log line carries a value.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SecretData(pub BTreeMap<String, String>);

impl std::fmt::Debug for SecretData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// Checks a secret's name (a word) and its keys (`[A-Z_][A-Z0-9_]*`, at most 32 of them, each
/// value at most 4096 bytes).
pub fn check_secret(name: &str, data: &BTreeMap<String, String>) -> Result<(), String> {
    let word = |w: &str| {
        (1..=64).contains(&w.len()) && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if !word(name) {
        return Err(format!("secret `{name}`: a name is 1 to 64 letters, digits, `-` and `_`"));
    }
    if data.is_empty() || data.len() > 32 {
        return Err(format!("secret `{name}`: 1 to 32 KEY=VALUE pairs"));
    }
    for (k, v) in data {
        let key_ok = !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.len() <= 128
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !key_ok || v.len() > 4096 {
            return Err(format!(
                "secret `{name}`: `{k}` must be letters, digits and `_` (not a digit first), its value at most 4096 bytes"
            ));
        }
    }
    Ok(())
}

/// What an agent is told to stage for a pending job (in the heartbeat's answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StageOrder {
    /// The job.
    pub job_id: i64,
    /// Its team: the cache directory it is staged into.
    pub team: String,
    /// The inputs.
    pub inputs: Vec<Input>,
    /// The keys of the team secret the job names (`--input-secret`), for S3 sources:
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
    /// `AWS_ENDPOINT_URL`. Empty: the agent's environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret: BTreeMap<String, String>,
    /// The names of its inputs whose sources an admin marked public ([`is_public`]): they are
    /// cached once per node for every team ([`PUBLIC_SCOPE`]), the others per team.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub public: Vec<String>,
    /// Its container image, pulled into the node's store while it waits (issue 40).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<crate::model::JobImage>,
    /// The values of the team secret its image's registry is logged in to with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_login: Option<crate::types::RegistryCredentials>,
}

/// Longest a source's or an upload's failure may be where people read it (a job's reason, an
/// event, an output's error), in characters: what a source answered enters as its status, and a
/// node (or one forging a node's report) cannot fill a row with a response body.
pub const MAX_REASON: usize = 300;

/// `text` cut to [`MAX_REASON`] characters, ending in `…` when cut.
pub fn reason(text: &str) -> String {
    if text.chars().count() <= MAX_REASON {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_REASON - 1).collect();
    cut.push('…');
    cut
}

/// The cache scope of the sources an admin marked public: one copy per node, read by every
/// team's jobs (not a team's name: a team's name is a word).
pub const PUBLIC_SCOPE: &str = "(public)";

/// Whether `url` is one of the `public` sources or lies under one (`s3://datasets/imagenet`
/// covers `s3://datasets/imagenet/train`, not `s3://datasets/imagenet-private`).
pub fn is_public(url: &str, public: &[String]) -> bool {
    public.iter().any(|p| {
        url.strip_prefix(p.as_str())
            .is_some_and(|rest| rest.is_empty() || p.ends_with('/') || rest.starts_with('/'))
    })
}

/// A source an admin marked public (`gantry cache public add URL`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublicSource {
    /// The source: it and every URL under it.
    pub url: String,
    /// When it was marked, ms since the epoch.
    pub added_at: i64,
}

/// `gantry cache public add|remove URL` (`PUT /v1/cache/public`, admins only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetPublic {
    /// The source (an input URL).
    pub url: String,
    /// Public, or private again.
    pub public: bool,
}

/// How an agent's staging for a job stands (in its heartbeat).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StageReport {
    /// The job.
    pub job_id: i64,
    /// Every input is in the node's cache.
    pub done: bool,
    /// Bytes copied or found so far.
    pub bytes_done: u64,
    /// Bytes of all its inputs, as far as known.
    pub bytes_total: u64,
    /// Copy rate, bytes per second.
    pub rate_bps: u64,
    /// Why the last try failed (the agent tries again later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The inputs with what staging each found (once done).
    #[serde(default)]
    pub inputs: Vec<Input>,
}

impl Eq for StageReport {}

impl StageReport {
    /// What `gantry jobs` shows while it stages: `staging 12.4 of 50.0 GiB, 830 MiB/s`, or the
    /// failure and that it will be tried again.
    pub fn reason(&self, node: &str) -> String {
        if let Some(e) = &self.error {
            return reason(&format!("staging its inputs on {node} failed, retrying: {e}"));
        }
        if self.done {
            return format!("its inputs are staged on {node}");
        }
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        format!(
            "staging {:.1} of {:.1} GiB, {} MiB/s on {node}",
            gib(self.bytes_done),
            gib(self.bytes_total),
            self.rate_bps >> 20
        )
    }
}

/// One dataset in a node's cache (`gantry cache`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CacheEntry {
    /// The node (set by the server).
    #[serde(default)]
    pub node: String,
    /// The team it is cached for.
    pub team: String,
    /// Its source URL.
    pub url: String,
    /// The version it was keyed by (an ETag, or a digest for files).
    pub version: String,
    /// Size, bytes.
    pub bytes: u64,
    /// Last use, ms since the epoch.
    pub last_used_ms: i64,
    /// Jobs that found it cached.
    pub hits: u64,
    /// Jobs using it now (never evicted while any is).
    pub in_use: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_is_a_name_and_one_of_three_kinds_of_url() {
        assert_eq!(
            Source::parse("s3://data-sets/imagenet/train").expect("s3"),
            Source::S3 { bucket: "data-sets".into(), prefix: "imagenet/train".into() }
        );
        assert_eq!(Source::parse("file:///shared/x").expect("file"), Source::File("/shared/x".into()));
        assert!(matches!(Source::parse("https://example.org/a.tar"), Ok(Source::Http(_))));
        assert!(Source::parse("ftp://x/y").is_err());
        assert!(Source::parse("file://relative").is_err());
        assert!(Source::parse("s3://Upper/x").is_err());
        assert!(Source::parse("s3://bucket/../x").is_err());
        let i = parse("imagenet=s3://bucket/p").expect("parses");
        assert_eq!((i.name.as_str(), i.env_name()), ("imagenet", "GANTRY_INPUT_IMAGENET".to_owned()));
        assert!(parse("no-url").is_err());
        assert!(parse("bad-name=s3://bucket/p").is_err());
        let twice = [Input::new("a", "s3://bucket/p"), Input::new("A", "s3://bucket/q")];
        assert!(check(&twice).expect_err("twice").contains("twice"));
    }

    #[test]
    fn a_public_source_covers_the_urls_under_it_only() {
        let public = vec!["s3://datasets/imagenet".to_owned(), "file:///shared/".to_owned()];
        assert!(is_public("s3://datasets/imagenet", &public));
        assert!(is_public("s3://datasets/imagenet/train", &public));
        assert!(!is_public("s3://datasets/imagenet-private", &public));
        assert!(!is_public("s3://datasets", &public));
        assert!(is_public("file:///shared/coco", &public));
        assert!(!is_public("file:///sharedx", &public));
    }

    #[test]
    fn a_staging_reason_shows_progress_and_rate() {
        let r = StageReport {
            job_id: 1,
            done: false,
            bytes_done: 12_400 * (1 << 20) + (1 << 19),
            bytes_total: 50 << 30,
            rate_bps: 830 << 20,
            error: None,
            inputs: vec![],
        };
        assert_eq!(r.reason("n1"), "staging 12.1 of 50.0 GiB, 830 MiB/s on n1");
    }
}
