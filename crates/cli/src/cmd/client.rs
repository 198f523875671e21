//! How client commands reach the server. The client config (`$GANTRY_CONFIG`, else
//! `$XDG_CONFIG_HOME/gantry/config.toml`, else `~/.config/gantry/config.toml`, mode 0600) holds
//! one context per cluster (server URL, token, CA), as kubectl's kubeconfig does; `gantry up` and
//! `gantry server` add or update their own and make it current. A command uses `--context`
//! (`GANTRY_CONTEXT`), else the current one; `--server`/`GANTRY_SERVER` and
//! `--token`/`GANTRY_TOKEN` override its fields. An `https://` server is trusted through the
//! cluster CA (`--ca`/`GANTRY_CA`, else the context's `ca`), never through the system's roots when
//! one is set. A config from before contexts (top-level `server`, `token`, `ca`) is read as a
//! context named `default`.
//!
//! A context may name several servers, replicas of one control plane (`servers = [...]`, or
//! `--server https://a:7070,https://b:7070`): each request goes to the one that answered last and,
//! on a failure [`gantry_api::failover`] allows to repeat it, to the next. Reads repeat freely; a
//! submission repeats under its idempotency key; other writes (a cancel, a token) move on only
//! when nothing was sent. Polling commands keep their place themselves (`logs -f` a stream
//! position, `jobs -w` what it has printed), so they carry on at the next server.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use clap::Args;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use gantry_api::failover::{self, Failure, NOT_SERVING_HEADER, Repeat, Rotation};

/// Which cluster, and as whom.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Server URL (default: the current context's), e.g. `--server https://head:7070`; several
    /// replicas' separated by commas (`https://a:7070,https://b:7070`) are tried in turn.
    #[arg(long, env = "GANTRY_SERVER")]
    pub server: Option<String>,
    /// API token (default: the current context's). Prefer the environment variable: a flag
    /// shows in `ps`. Example: `GANTRY_TOKEN=$(cat token) gantry jobs`.
    #[arg(long, env = "GANTRY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The client context to use instead of the current one (`gantry config get-contexts`).
    #[arg(long, env = "GANTRY_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
    /// The cluster CA to trust for an https:// server (default: the context's `ca`).
    #[arg(long, env = "GANTRY_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
}

/// One cluster as the client reaches it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientContext {
    /// Server URL.
    pub server: Option<String>,
    /// More server URLs: replicas of one control plane, tried after `server` (or instead of it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    /// Bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The cluster CA for an `https://` server: a file path, or the PEM itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// The data directory of the `gantry up`/`gantry server` that wrote this context (how a
    /// restart finds its own context again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
}

impl ClientContext {
    /// Every address of the context as one comma-separated list (`server` first), if any.
    pub fn server_list(&self) -> Option<String> {
        let all: Vec<&str> = self.server.iter().chain(&self.servers).map(String::as_str).collect();
        (!all.is_empty()).then(|| all.join(","))
    }

    /// The CA as PEM: the field itself when it holds PEM, else the file it names.
    pub fn ca_pem(&self) -> anyhow::Result<Option<String>> {
        match self.ca.as_deref() {
            None => Ok(None),
            Some(pem) if pem.trim_start().starts_with("-----BEGIN") => Ok(Some(pem.to_owned())),
            Some(path) => read_ca(std::path::Path::new(path)).map(Some),
        }
    }
}

/// The client config file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ClientConfig {
    /// The context commands use without `--context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    /// Clusters by name.
    #[serde(default)]
    pub contexts: BTreeMap<String, ClientContext>,
    /// Before contexts: the one server (read, then moved into the context `default`).
    #[serde(default, skip_serializing)]
    server: Option<String>,
    /// Before contexts: the one token.
    #[serde(default, skip_serializing)]
    token: Option<String>,
    /// Before contexts: the one CA.
    #[serde(default, skip_serializing)]
    ca: Option<String>,
}

/// The context a config from before contexts is read into.
pub const LEGACY_CONTEXT: &str = "default";

impl ClientConfig {
    /// Moves top-level `server`/`token`/`ca` (the format before contexts) into `default`.
    fn migrate(mut self) -> Self {
        if self.server.is_some() || self.token.is_some() || self.ca.is_some() {
            let legacy = ClientContext {
                server: self.server.take(),
                token: self.token.take(),
                ca: self.ca.take(),
                servers: Vec::new(),
                data_dir: None,
            };
            self.contexts.entry(LEGACY_CONTEXT.into()).or_insert(legacy);
            self.current_context.get_or_insert_with(|| LEGACY_CONTEXT.into());
        }
        self
    }

    /// The named context, else the current one; an empty context when the config has none.
    pub fn context(&self, name: Option<&str>) -> anyhow::Result<ClientContext> {
        let Some(name) = name.or(self.current_context.as_deref()) else {
            return Ok(ClientContext::default());
        };
        self.contexts.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.contexts.keys().map(String::as_str).collect();
            let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
            anyhow!("no context named `{name}` in {} (known: {known})", path_text())
        })
    }

    /// The current context, if any.
    pub fn current(&self) -> Option<&ClientContext> {
        self.current_context.as_deref().and_then(|n| self.contexts.get(n))
    }
}

/// Reads a CA file.
pub fn read_ca(path: &std::path::Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read the CA file {}", path.display()))
}

/// The config file's path.
pub fn config_path() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("GANTRY_CONFIG") {
        return Ok(PathBuf::from(p));
    }
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => home()?.join(".config"),
    };
    Ok(base.join("gantry").join("config.toml"))
}

/// `$HOME`.
pub fn home() -> anyhow::Result<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from).ok_or_else(|| anyhow!("HOME is not set"))
}

/// Reads the config (a missing file is an empty config), moving a pre-context one into contexts.
pub fn load_config() -> anyhow::Result<ClientConfig> {
    let path = config_path()?;
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            parse_config(&text).with_context(|| format!("client config {} is invalid", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ClientConfig::default()),
        Err(e) => Err(e).with_context(|| format!("cannot read client config {}", path.display())),
    }
}

/// Parses the config text, moving a pre-context one into contexts.
pub fn parse_config(text: &str) -> anyhow::Result<ClientConfig> {
    Ok(toml::from_str::<ClientConfig>(text)?.migrate())
}

/// Writes the config, readable only by the user.
pub fn save_config(config: &ClientConfig) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = config_path()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = toml::to_string(config)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    // `mode` applies only when the file is created: tighten one that existed too.
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    Ok(path)
}

/// Whether a server was named by flag, environment or the client config.
pub fn server_configured(args: &ServerArgs) -> bool {
    args.server.is_some()
        || load_config()
            .is_ok_and(|c| c.context(args.context.as_deref()).is_ok_and(|c| c.server_list().is_some()))
}

/// An authenticated connection to the server.
#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    servers: Arc<[String]>,
    /// Which of `servers` answered last (shared by clones: the whole process moves on).
    rotation: Arc<Rotation>,
    token: String,
    /// Whether a CA is pinned (for the message when the server's certificate is refused).
    pinned: bool,
}

impl Api {
    /// Resolves server and token from flags, environment and the client context.
    pub fn connect(args: &ServerArgs) -> anyhow::Result<Self> {
        let config = load_config()?;
        let context = config.context(args.context.as_deref())?;
        // The context's CA belongs to the context's server; a server named otherwise brings its own.
        let context_server = args.server.is_none() || args.server == context.server_list();
        let ca = match &args.ca {
            Some(path) => Some(read_ca(path)?),
            None if context_server => context.ca_pem()?,
            None => None,
        };
        // https even without a CA: a token is never sent in clear to whatever holds the port.
        let base =
            args.server.clone().or(context.server_list()).unwrap_or_else(|| "https://127.0.0.1:7070".into());
        // The server this context's data directory belongs to also listens on a unix socket
        // there, which no number of TCP connections to it can fill (see gantry_server::transport).
        let single = failover::parse_servers(&base).is_ok_and(|s| s.len() == 1);
        let socket = context
            .data_dir
            .as_deref()
            .filter(|_| context_server && single)
            .map(|d| d.join(super::control::SOCKET))
            .filter(|s| std::os::unix::net::UnixStream::connect(s).is_ok());
        let token = args.token.clone().filter(|t| !t.is_empty()).or(context.token);
        let token = token.ok_or_else(|| {
            anyhow!(
                "no token: pass --token or set GANTRY_TOKEN, or run `gantry up` once to write {}",
                path_text()
            )
        })?;
        Self::through(&base, &token, ca.as_deref(), socket.as_deref())
    }

    /// A client for `base` with `token`, trusting the system's roots for https.
    pub fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        Self::with_ca(base, token, None)
    }

    /// A client for `base` (one URL, or several separated by commas) with `token` that pins
    /// `ca_pem` for https.
    pub fn with_ca(base: &str, token: &str, ca_pem: Option<&str>) -> anyhow::Result<Self> {
        Self::through(base, token, ca_pem, None)
    }

    /// As [`Self::with_ca`], every request going through the server's unix `socket` when given
    /// (the URL still names the server, and its certificate is checked against it).
    pub fn through(
        base: &str,
        token: &str,
        ca_pem: Option<&str>,
        socket: Option<&std::path::Path>,
    ) -> anyhow::Result<Self> {
        let mut builder =
            gantry_agent::runner::client::builder(ca_pem, None)?.timeout(Duration::from_secs(30));
        if let Some(socket) = socket {
            builder = builder.unix_socket(socket);
        }
        let http = builder.build()?;
        let servers = failover::parse_servers(base).map_err(|e| anyhow!("--server: {e}"))?.into();
        Ok(Self {
            http,
            servers,
            rotation: Arc::default(),
            token: token.to_owned(),
            pinned: ca_pem.is_some(),
        })
    }

    /// The server's base URL: of several, the one that answered last.
    pub fn base(&self) -> &str {
        &self.servers[self.rotation.current()]
    }

    /// GET a JSON resource.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let resp = self.send(reqwest::Method::GET, path, None::<&()>, Repeat::Safe).await?;
        Ok(resp.json().await?)
    }

    /// GET bytes and the value of one response header.
    pub async fn get_bytes_and_header(
        &self,
        path: &str,
        header: &str,
    ) -> anyhow::Result<(Option<String>, Vec<u8>)> {
        let resp = self.send(reqwest::Method::GET, path, None::<&()>, Repeat::Safe).await?;
        let value = resp.headers().get(header).and_then(|v| v.to_str().ok()).map(str::to_owned);
        Ok((value, resp.bytes().await?.to_vec()))
    }

    /// GET a JSON page and the `x-next-before` cursor of the next one.
    pub async fn get_page<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<(T, Option<i64>)> {
        let resp = self.send(reqwest::Method::GET, path, None::<&()>, Repeat::Safe).await?;
        let next =
            resp.headers().get("x-next-before").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        Ok((resp.json().await?, next))
    }

    /// DELETE a resource.
    pub async fn delete(&self, path: &str) -> anyhow::Result<()> {
        self.send(reqwest::Method::DELETE, path, None::<&()>, Repeat::Unsafe).await.map(drop)
    }

    /// PUT JSON; the answer's body is not read.
    pub async fn put<B: Serialize>(&self, path: &str, body: &B) -> anyhow::Result<()> {
        self.send(reqwest::Method::PUT, path, Some(body), Repeat::Unsafe).await.map(drop)
    }

    /// PUT JSON, read JSON. Not repeated at another server once it may have been sent.
    pub async fn put_json<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        let resp = self.send(reqwest::Method::PUT, path, Some(body), Repeat::Unsafe).await?;
        Ok(resp.json().await?)
    }

    /// PUT bytes (a file of an upload, given ten minutes). A file is named by its digest, so
    /// sending it again to another server is harmless.
    pub async fn put_bytes(&self, path: &str, body: Vec<u8>) -> anyhow::Result<()> {
        let build = |req: reqwest::RequestBuilder| {
            req.timeout(Duration::from_secs(600))
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(body.clone())
        };
        self.send_with(reqwest::Method::PUT, path, Repeat::Safe, build).await.map(drop)
    }

    /// POST JSON, read JSON. Not repeated at another server once it may have been sent (a
    /// cancel, a token): [`Api::post_keyed`] is for a body with an idempotency key.
    pub async fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> anyhow::Result<T> {
        let resp = self.send(reqwest::Method::POST, path, Some(body), Repeat::Unsafe).await?;
        Ok(resp.json().await?)
    }

    /// POST JSON whose idempotency key the server honours (a submission's `request_id`): safe
    /// to send again to another server after a connection lost in flight.
    pub async fn post_keyed<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        let resp = self.send(reqwest::Method::POST, path, Some(body), Repeat::Safe).await?;
        Ok(resp.json().await?)
    }

    /// Sends to the server that answered last, then to the others while the failure allows
    /// ([`failover::try_next`]); the server's answer, or why none gave one.
    async fn send<B: Serialize>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
        repeat: Repeat,
    ) -> anyhow::Result<reqwest::Response> {
        self.send_with(method, path, repeat, |req| match body {
            Some(body) => req.json(body),
            None => req,
        })
        .await
    }

    /// [`Api::send`] with the request finished by `build` (a body, headers, a timeout), once
    /// per server tried.
    async fn send_with(
        &self,
        method: reqwest::Method,
        path: &str,
        repeat: Repeat,
        build: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> anyhow::Result<reqwest::Response> {
        let mut failed: Vec<anyhow::Error> = Vec::new();
        for index in self.rotation.order(self.servers.len()) {
            let base = &self.servers[index];
            let req =
                build(self.http.request(method.clone(), format!("{base}{path}")).bearer_auth(&self.token));
            let failure = match req.send().await {
                Ok(resp) if resp.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE => {
                    let marked = resp.headers().contains_key(NOT_SERVING_HEADER);
                    failed.push(refusal(resp).await);
                    if marked { Failure::NotServing } else { Failure::Unavailable }
                }
                Ok(resp) => {
                    self.rotation.worked(index);
                    if resp.status().is_success() {
                        return Ok(resp);
                    }
                    return Err(refusal(resp).await);
                }
                Err(e) => {
                    failed.push(self.unreachable(base, &e));
                    gantry_agent::runner::client::failure_of(&e)
                }
            };
            if !failover::try_next(failure, repeat) {
                break;
            }
        }
        Err(none_answered(failed))
    }

    /// Why `base` gave no answer, in words.
    fn unreachable(&self, base: &str, e: &reqwest::Error) -> anyhow::Error {
        if answered_in_plain_http(e) {
            let plain = base.replacen("https://", "http://", 1);
            anyhow!(
                "TLS with {base} failed: it answered in plain HTTP. A Gantry server started with --no-tls \
                 is reached at {plain}; otherwise another program holds the port (no token was sent)"
            )
        } else if let Some(cause) = gantry_agent::runner::client::tls_cause(e) {
            let hint = if self.pinned {
                "is it the cluster's CA? `gantry up` and `gantry server` keep theirs in <data>/tls/ca.pem"
            } else {
                "pin the cluster's CA with --ca FILE or GANTRY_CA (the server keeps it in <data>/tls/ca.pem)"
            };
            anyhow!("TLS with {base} failed: {cause}; {hint}")
        } else if e.is_connect() {
            anyhow!("cannot reach the Gantry server at {base}; is `gantry up` running?")
        } else {
            anyhow!("request to {base} failed: {e}")
        }
    }
}

/// The failure of the last server tried; with several, each one's in turn (`; then`), so a
/// person sees why each gave no answer (a last 503 stays an [`ApiStatus`] for programs).
fn none_answered(mut failed: Vec<anyhow::Error>) -> anyhow::Error {
    let last = failed.pop().unwrap_or_else(|| anyhow!("no server to send the request to"));
    if failed.is_empty() {
        return last;
    }
    let all: Vec<String> = failed.iter().chain([&last]).map(ToString::to_string).collect();
    let message = all.join("; then ");
    match last.downcast_ref::<ApiStatus>() {
        Some(s) => ApiStatus { status: s.status, message }.into(),
        None => anyhow!(message),
    }
}

/// A server's refusal of a request as an [`ApiStatus`].
async fn refusal(resp: reqwest::Response) -> anyhow::Error {
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or(text);
    ApiStatus { status, message }.into()
}

/// Whether a TLS handshake failed because the peer's first bytes were no TLS record: a
/// plain-HTTP server answering `https://` (its `HTTP/1.1 400` is no record type rustls knows).
fn answered_in_plain_http(e: &reqwest::Error) -> bool {
    matches!(
        gantry_agent::runner::client::rustls_error(e),
        Some(rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType))
    )
}

/// The server refused a request: its sentence, and the HTTP status for programs (people read
/// the sentence; a 5xx also says the status, since its body is generic).
#[derive(Debug)]
pub struct ApiStatus {
    /// The HTTP status code.
    pub status: u16,
    /// The server's message.
    pub message: String,
}

impl std::fmt::Display for ApiStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.status >= 500 {
            write!(f, "{} (HTTP {})", self.message, self.status)
        } else {
            f.write_str(&self.message)
        }
    }
}

impl std::error::Error for ApiStatus {}

impl ApiStatus {
    /// The status of a request that failed with `e`, when the server answered.
    pub fn of(e: &anyhow::Error) -> Option<u16> {
        e.downcast_ref::<ApiStatus>().map(|s| s.status)
    }
}

pub fn path_text() -> String {
    config_path().map_or_else(|_| "the client config".into(), |p| p.display().to_string())
}

/// Runs a future on a fresh runtime (client commands are one request or a short loop).
pub fn block_on<F: Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    Ok(rt.block_on(f))
}

/// `table` or `json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// JSON for programs.
    Json,
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
