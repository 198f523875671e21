//! Reading a declared input's source: its version and size first, then its bytes.
//!
//! Three kinds ([`Source`]): an S3 prefix on any S3-compatible endpoint (through
//! `object_store`'s S3 client: signing, listing and retries are its, not ours), one file over
//! HTTP(S), and a path on storage the nodes mount. [`list`] says what the source holds now:
//! its objects with their sizes, and a version that changes when they do (the ETags of an S3
//! listing, an HTTP ETag, the SHA-256 of a file tree's bytes) — the cache's key. [`copy`]
//! writes them under a temporary path, never more bytes per object than [`list`] declared (a
//! source that sends more is stopped there, and the copy fails), counting each byte into a
//! progress counter.
//!
//! S3 credentials and endpoint come from the job's team secret alone (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`); a secret
//! without keys (or none) makes unsigned requests, as to a public bucket. The node's own
//! credentials (the agent's environment, as the AWS SDKs read it, or its instance role) sign
//! only for a source an admin marked public, for a job that names no keys of its own
//! ([`Access::node_credentials`]): a member's endpoint, region or bucket never receives them.
//! Every HTTP(S) source and every endpoint a team chose connects only where [`Egress`] allows
//! (never the node, its metadata service or its private networks, unless an admin opened them).
//! What a source answered enters an error as its status, never its body, and an error is at
//! most [`MAX_REASON`] characters.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use gantry_api::inputs::Source;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::{ObjectStore, ObjectStoreExt, RetryConfig};
use sha2::{Digest, Sha256};

use super::egress::{Egress, S3Connector};

/// One object of a source: where it goes below the copy, its size and where to read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Relative path below the copy (empty: the copy is this one file).
    pub rel: String,
    /// Declared size, bytes.
    pub size: u64,
    /// The S3 key, URL or file path to read.
    pub from: String,
}

/// What a source holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Changes when the content does: the cache's key with the URL.
    pub version: String,
    /// Its objects.
    pub objects: Vec<Object>,
}

impl Listing {
    /// Declared bytes in all.
    pub fn bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.size).sum()
    }
}

/// The team secret's values (empty: none).
pub type Secret = BTreeMap<String, String>;

pub use gantry_api::inputs::{MAX_REASON, reason};

/// With what, and where, a source is read or written.
#[derive(Debug, Clone, Copy)]
pub struct Access<'a> {
    /// The team secret the job names (its S3 keys, region and endpoint).
    pub secret: &'a Secret,
    /// The source is one an admin marked public: with no keys in `secret`, the node's own
    /// credentials sign (and the node's endpoint serves).
    pub public: bool,
    /// Where a team's sources may connect.
    pub egress: &'a Arc<Egress>,
}

impl Access<'_> {
    /// Whether the node's credentials sign: a public source, and no keys of the team's.
    pub fn node_credentials(&self) -> bool {
        self.public && !has_keys(self.secret)
    }
}

/// Whether a secret holds S3 keys (an access key id and its secret).
pub fn has_keys(secret: &Secret) -> bool {
    let set = |k: &str| secret.get(k).is_some_and(|v| !v.is_empty());
    set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY")
}

/// Most objects one input may hold.
const MAX_OBJECTS: usize = 1_000_000;

/// What `url`'s source holds now (an error of at most [`MAX_REASON`] characters).
pub async fn list(url: &str, access: Access<'_>) -> Result<Listing, String> {
    list_any(url, access).await.map_err(|e| reason(&e))
}

async fn list_any(url: &str, access: Access<'_>) -> Result<Listing, String> {
    match Source::parse(url)? {
        Source::S3 { bucket, prefix } => list_s3(&s3(&bucket, access)?, &prefix).await,
        Source::Http(u) => list_http(&u, access.egress).await,
        Source::File(path) => {
            let path = PathBuf::from(path);
            tokio::task::spawn_blocking(move || list_files(&path)).await.map_err(|e| e.to_string())?
        }
    }
}

/// Copies `listing`'s objects of `url` to `to` (made new: a file for a one-object listing with
/// an empty `rel`, else a directory), adding each byte to `done` (an error of at most
/// [`MAX_REASON`] characters).
pub async fn copy(
    url: &str,
    access: Access<'_>,
    listing: &Listing,
    to: &Path,
    done: &AtomicU64,
) -> Result<(), String> {
    copy_any(url, access, listing, to, done).await.map_err(|e| reason(&e))
}

async fn copy_any(
    url: &str,
    access: Access<'_>,
    listing: &Listing,
    to: &Path,
    done: &AtomicU64,
) -> Result<(), String> {
    let source = Source::parse(url)?;
    let store = match &source {
        Source::S3 { bucket, .. } => Some(s3(bucket, access)?),
        _ => None,
    };
    let single = listing.objects.len() == 1 && listing.objects[0].rel.is_empty();
    if !single {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(to)
            .map_err(|e| format!("creating {}: {e}", to.display()))?;
    }
    for o in &listing.objects {
        let path = if single { to.to_owned() } else { below(to, &o.rel)? };
        let mut file = new_file(&path)?;
        let mut sink = Capped { file: &mut file, left: o.size, done, path: &path, rel: &o.rel };
        match (&source, &store) {
            (Source::S3 { .. }, Some(store)) => {
                let got =
                    store.get(&object_store::path::Path::from(o.from.as_str())).await.map_err(s3_error)?;
                let mut stream = got.into_stream();
                while let Some(chunk) = stream.next().await {
                    sink.write(&chunk.map_err(s3_error)?)?;
                }
            }
            (Source::Http(_), _) => {
                let mut resp = http_get(&o.from, access.egress, false).await?;
                while let Some(chunk) = resp.chunk().await.map_err(|e| http_error(&e))? {
                    sink.write(&chunk)?;
                }
            }
            _ => {
                let from = PathBuf::from(&o.from);
                let mut input = open_public(&from)?;
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    let n = std::io::Read::read(&mut input, &mut buf)
                        .map_err(|e| format!("reading {}: {e}", from.display()))?;
                    if n == 0 {
                        break;
                    }
                    sink.write(&buf[..n])?;
                }
            }
        }
        if sink.left != 0 {
            return Err(format!("`{}` ended {} bytes short of its declared {}", o.rel, sink.left, o.size));
        }
        file.sync_all().map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// A file being written that takes at most its declared size.
struct Capped<'a> {
    file: &'a mut std::fs::File,
    left: u64,
    done: &'a AtomicU64,
    path: &'a Path,
    rel: &'a str,
}

impl Capped<'_> {
    fn write(&mut self, chunk: &[u8]) -> Result<(), String> {
        let n = chunk.len() as u64;
        if n > self.left {
            return Err(format!(
                "the source sent more than the declared size of `{}`; stopped at it",
                if self.rel.is_empty() { "the object" } else { self.rel }
            ));
        }
        self.file.write_all(chunk).map_err(|e| format!("writing {}: {e}", self.path.display()))?;
        self.left -= n;
        self.done.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }
}

fn new_file(path: &Path) -> Result<std::fs::File, String> {
    if let Some(parent) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("creating {}: {e}", path.display()))
}

/// `rel` below `root`, refused when it is absolute or climbs (an S3 key may be anything).
fn below(root: &Path, rel: &str) -> Result<PathBuf, String> {
    let p = Path::new(rel);
    let normal = p.components().all(|c| matches!(c, Component::Normal(_)));
    if rel.is_empty() || !normal {
        return Err(format!("the source names an object `{rel}` that is not a relative path below it"));
    }
    Ok(root.join(p))
}

/// An S3 client for `bucket`: signed with the team secret's keys alone (unsigned without
/// them), to the secret's endpoint only where `access.egress` allows; or, for a public source
/// and a job with no keys of its own, as the node's environment configures it.
pub(super) fn s3(bucket: &str, access: Access<'_>) -> Result<Arc<AmazonS3>, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let retry =
        RetryConfig { max_retries: 2, retry_timeout: Duration::from_secs(20), ..RetryConfig::default() };
    if access.node_credentials() {
        let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
        let env_endpoint = std::env::var("AWS_ENDPOINT_URL").or_else(|_| std::env::var("AWS_ENDPOINT")).ok();
        if env_endpoint.as_deref().is_some_and(|e| e.starts_with("http://")) {
            b = b.with_allow_http(true);
        }
        return b.with_retry(retry).build().map(Arc::new).map_err(s3_error);
    }
    // Never `from_env`: the node's keys, session token, web identity and instance role stay
    // the node's. Without keys the client signs nothing (it would otherwise ask the instance
    // metadata service for the node role's).
    let mut b = AmazonS3Builder::new().with_bucket_name(bucket).with_region("us-east-1");
    let mut endpoint = None;
    for (k, v) in access.secret {
        b = match k.as_str() {
            "AWS_ACCESS_KEY_ID" => b.with_access_key_id(v),
            "AWS_SECRET_ACCESS_KEY" => b.with_secret_access_key(v),
            "AWS_SESSION_TOKEN" => b.with_token(v),
            "AWS_REGION" | "AWS_DEFAULT_REGION" => b.with_region(v),
            "AWS_ENDPOINT_URL" | "AWS_ENDPOINT_URL_S3" => {
                endpoint = Some(v.clone());
                b.with_endpoint(v)
            }
            _ => b,
        };
    }
    if !has_keys(access.secret) {
        b = b.with_skip_signature(true);
    }
    let allow_http = match &endpoint {
        Some(e) => {
            let url = reqwest::Url::parse(e)
                .map_err(|_| "the secret's AWS_ENDPOINT_URL is not a URL".to_owned())?;
            access.egress.check_url(&url).map_err(|e| format!("S3 endpoint: {e}"))?;
            url.scheme() == "http"
        }
        None => false,
    };
    b = b
        .with_allow_http(allow_http)
        .with_http_connector(S3Connector::new(Arc::clone(access.egress), allow_http));
    b.with_retry(retry).build().map(Arc::new).map_err(s3_error)
}

/// An S3 failure as a sentence: what failed and the status the endpoint answered, never the
/// body it sent (object_store's Display carries it after these words), at most [`MAX_REASON`]
/// characters. Its Display names the operation and the cause; never a credential.
pub(super) fn s3_error(e: object_store::Error) -> String {
    const STATUS: &str = "Server returned non-2xx status code: ";
    const RESPONSE: &str = "Server returned error response";
    let text = e.to_string();
    let text = if let Some(i) = text.find(STATUS) {
        let status = text[i + STATUS.len()..].split(':').next().unwrap_or_default().trim();
        format!("{}the endpoint answered {status}", &text[..i])
    } else if let Some(i) = text.find(RESPONSE) {
        format!("{}the endpoint answered an error", &text[..i])
    } else {
        text
    };
    reason(&format!("S3: {text}"))
}

async fn list_s3(store: &Arc<AmazonS3>, prefix: &str) -> Result<Listing, String> {
    let mut objects = Vec::new();
    let mut versions = Vec::new();
    let trimmed = prefix.trim_end_matches('/');
    if !trimmed.is_empty() && !prefix.ends_with('/') {
        let path = object_store::path::Path::from(trimmed);
        if let Ok(meta) = store.head(&path).await {
            let version = format!("s3:{}:{}", meta.e_tag.unwrap_or_default(), meta.size);
            return Ok(Listing {
                version,
                objects: vec![Object { rel: String::new(), size: meta.size, from: trimmed.into() }],
            });
        }
    }
    let base = (!trimmed.is_empty()).then(|| object_store::path::Path::from(trimmed));
    let mut stream = store.list(base.as_ref());
    while let Some(meta) = stream.next().await {
        let meta = meta.map_err(s3_error)?;
        let key = meta.location.to_string();
        let rel = key.strip_prefix(trimmed).unwrap_or(&key).trim_start_matches('/').to_owned();
        versions.push(format!("{key}\t{}\t{}", meta.e_tag.unwrap_or_default(), meta.size));
        objects.push(Object { rel, size: meta.size, from: key });
        if objects.len() > MAX_OBJECTS {
            return Err(format!("more than {MAX_OBJECTS} objects under the prefix"));
        }
    }
    if objects.is_empty() {
        return Err(format!("no object under `{prefix}`"));
    }
    versions.sort();
    Ok(Listing { version: format!("s3:{}", hex(&Sha256::digest(versions.join("\n").as_bytes()))), objects })
}

/// GETs (or HEADs) `url` through `egress`: a status other than success is an error naming
/// the status alone.
async fn http_get(url: &str, egress: &Arc<Egress>, head: bool) -> Result<reqwest::Response, String> {
    let parsed = reqwest::Url::parse(url).map_err(|_| format!("`{url}` is not a URL"))?;
    egress.check_url(&parsed)?;
    let client = egress.client()?;
    let req = if head { client.head(parsed) } else { client.get(parsed) };
    let resp = req.send().await.map_err(|e| http_error(&e))?;
    if !resp.status().is_success() {
        return Err(format!("{url} answered {}", resp.status()));
    }
    Ok(resp)
}

/// A failed request as a sentence: reqwest's words and each cause (where a refused address says
/// why), never a body.
fn http_error(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(c) = cur {
        let more = c.to_string();
        if !s.contains(&more) {
            s.push_str(": ");
            s.push_str(&more);
        }
        cur = c.source();
    }
    reason(&s)
}

async fn list_http(url: &str, egress: &Arc<Egress>) -> Result<Listing, String> {
    let resp = http_get(url, egress, true).await?;
    let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let size = header("content-length")
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| format!("{url} does not declare its size (Content-Length)"))?;
    let tag = header("etag").or_else(|| header("last-modified")).unwrap_or_default();
    let tag: String = tag.chars().take(200).collect();
    // The URL followed to its end: redirects are checked again when the bytes are fetched.
    let from = resp.url().to_string();
    Ok(Listing {
        version: format!("http:{tag}:{size}"),
        objects: vec![Object { rel: String::new(), size, from }],
    })
}

/// Opens a file of a `file://` source for reading, only if every user of the node may read it.
///
/// The agent reads these sources as root and copies them into a cache its jobs read, so a path
/// is copied only when any user of the node could read it anyway: a regular file readable by
/// others (mode `o+r`), reached through directories every user may enter ([`check_public_dirs`]),
/// opened without following a link in its last component, and checked again on the open file, so
/// a file swapped for a link to `/etc/shadow` between the listing and the copy is refused.
fn open_public(path: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    let meta = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() || meta.permissions().mode() & 0o004 == 0 {
        return Err(format!(
            "{} is not a file every user of the node may read (a file:// input copies only those)",
            path.display()
        ));
    }
    Ok(file)
}

/// Refuses a `file://` root below a directory not every user may enter (`o+x`), or a link.
fn check_public_dirs(root: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let canonical = std::fs::canonicalize(root).map_err(|e| format!("{}: {e}", root.display()))?;
    if canonical != root {
        return Err(format!(
            "{} goes through a symbolic link: name the path it points at ({})",
            root.display(),
            canonical.display()
        ));
    }
    for dir in root.ancestors().skip(1) {
        let m = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if m.permissions().mode() & 0o001 == 0 {
            return Err(format!(
                "{} is below {}, which not every user of the node may enter (a file:// input copies only what any user may read)",
                root.display(),
                dir.display()
            ));
        }
    }
    Ok(())
}

/// A file or directory tree on shared storage, versioned by the SHA-256 of its paths and bytes.
/// Only what every user of the node may read is copied (see [`open_public`]); a directory of the
/// tree must be readable and enterable by others, and links in it are left out.
fn list_files(root: &Path) -> Result<Listing, String> {
    use std::os::unix::fs::PermissionsExt;
    check_public_dirs(root)?;
    let meta = std::fs::metadata(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let mut digest = Sha256::new();
    let mut objects = Vec::new();
    let mut todo = vec![(root.to_owned(), String::new())];
    while let Some((path, rel)) = todo.pop() {
        let m = std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if m.is_dir() {
            if m.permissions().mode() & 0o005 != 0o005 {
                return Err(format!(
                    "{} is a directory not every user of the node may list (a file:// input copies only what any user may read)",
                    path.display()
                ));
            }
            let mut names: Vec<_> = std::fs::read_dir(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            for n in names.into_iter().rev() {
                let r = if rel.is_empty() { n.clone() } else { format!("{rel}/{n}") };
                todo.push((path.join(&n), r));
            }
        } else if m.is_file() {
            digest.update(rel.as_bytes());
            digest.update([0]);
            let mut f = open_public(&path)?;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n =
                    std::io::Read::read(&mut f, &mut buf).map_err(|e| format!("{}: {e}", path.display()))?;
                if n == 0 {
                    break;
                }
                digest.update(&buf[..n]);
            }
            objects.push(Object { rel, size: m.len(), from: path.display().to_string() });
            if objects.len() > MAX_OBJECTS {
                return Err(format!("more than {MAX_OBJECTS} files"));
            }
        }
    }
    if meta.is_file() && objects.len() == 1 {
        objects[0].rel = String::new();
    }
    Ok(Listing { version: format!("sha256:{}", hex(&digest.finalize())), objects })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn a_file_source_copies_only_what_every_user_may_read() {
        let dir = tempfile::tempdir().expect("dir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        chmod(&root, 0o755);
        let data = root.join("data");
        std::fs::create_dir(&data).expect("mkdir");
        chmod(&data, 0o755);
        std::fs::write(data.join("a"), b"public").expect("write");
        chmod(&data.join("a"), 0o644);
        let listing = list_files(&data).expect("a readable tree");
        assert_eq!(listing.objects.len(), 1);

        // A file only its owner may read (as /etc/shadow is) is refused, listed or named.
        std::fs::write(data.join("secret"), b"root only").expect("write");
        chmod(&data.join("secret"), 0o600);
        let err = list_files(&data).expect_err("an owner-only file");
        assert!(err.contains("not a file every user of the node may read"), "{err}");
        assert!(list_files(&data.join("secret")).is_err());
        std::fs::remove_file(data.join("secret")).expect("rm");

        // A file swapped for a link after the listing is not followed.
        std::fs::remove_file(data.join("a")).expect("rm");
        std::os::unix::fs::symlink("/etc/shadow", data.join("a")).expect("link");
        let err = open_public(&data.join("a")).expect_err("a link");
        assert!(err.contains("opening"), "{err}");
        std::fs::remove_file(data.join("a")).expect("rm");

        // Below a directory others may not enter, and through a link to the tree.
        let private = root.join("private");
        std::fs::create_dir(&private).expect("mkdir");
        std::fs::write(private.join("b"), b"x").expect("write");
        chmod(&private.join("b"), 0o644);
        chmod(&private, 0o700);
        let err = list_files(&private.join("b")).expect_err("below a private directory");
        assert!(err.contains("not every user of the node may enter"), "{err}");
        let err = list_files(&private).expect_err("a private directory");
        assert!(err.contains("not every user of the node may list"), "{err}");
        std::os::unix::fs::symlink(&data, root.join("via")).expect("link");
        let err = list_files(&root.join("via")).expect_err("a link");
        assert!(err.contains("symbolic link"), "{err}");
    }
}
