//! How client commands reach the server: `--server`/`GANTRY_SERVER` and `GANTRY_TOKEN`, else the
//! client config `gantry up` wrote (`$GANTRY_CONFIG`, else `$XDG_CONFIG_HOME/gantry/config.toml`,
//! else `~/.config/gantry/config.toml`). An `https://` server is trusted through the cluster CA
//! (`--ca`/`GANTRY_CA`, else the config's `ca`), never through the system's roots when one is set.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use clap::Args;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Where the server is.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Server URL (default: the client config `gantry up` wrote).
    #[arg(long, env = "GANTRY_SERVER")]
    pub server: Option<String>,
    /// The cluster CA to trust for an https:// server (default: the client config's `ca`).
    #[arg(long, env = "GANTRY_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
}

/// The client config file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Server URL.
    pub server: Option<String>,
    /// Bearer token.
    pub token: Option<String>,
    /// The cluster CA for an `https://` server: a file path, or the PEM itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
}

impl ClientConfig {
    /// The CA as PEM: the field itself when it holds PEM, else the file it names.
    pub fn ca_pem(&self) -> anyhow::Result<Option<String>> {
        match self.ca.as_deref() {
            None => Ok(None),
            Some(pem) if pem.trim_start().starts_with("-----BEGIN") => Ok(Some(pem.to_owned())),
            Some(path) => read_ca(std::path::Path::new(path)).map(Some),
        }
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

/// Reads the config; a missing file is an empty config.
pub fn load_config() -> anyhow::Result<ClientConfig> {
    let path = config_path()?;
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            toml::from_str(&text).with_context(|| format!("client config {} is invalid", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ClientConfig::default()),
        Err(e) => Err(e).with_context(|| format!("cannot read client config {}", path.display())),
    }
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
    args.server.is_some() || load_config().is_ok_and(|c| c.server.is_some())
}

/// An authenticated connection to the server.
#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
    /// Whether a CA is pinned (for the message when the server's certificate is refused).
    pinned: bool,
}

impl Api {
    /// Resolves server and token from flags, environment and the client config.
    pub fn connect(args: &ServerArgs) -> anyhow::Result<Self> {
        let config = load_config()?;
        // The config's CA belongs to the config's server; a server named otherwise brings its own.
        let config_server = args.server.is_none() || args.server == config.server;
        let ca = match &args.ca {
            Some(path) => Some(read_ca(path)?),
            None if config_server => config.ca_pem()?,
            None => None,
        };
        let base = args.server.clone().or(config.server).unwrap_or_else(|| "http://127.0.0.1:7070".into());
        let token = std::env::var("GANTRY_TOKEN").ok().filter(|t| !t.is_empty()).or(config.token);
        let token = token.ok_or_else(|| {
            anyhow!("no token: set GANTRY_TOKEN or run `gantry up` once to write {}", path_text())
        })?;
        Self::with_ca(&base, &token, ca.as_deref())
    }

    /// A client for `base` with `token`, trusting the system's roots for https.
    pub fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        Self::with_ca(base, token, None)
    }

    /// A client for `base` with `token` that pins `ca_pem` for https.
    pub fn with_ca(base: &str, token: &str, ca_pem: Option<&str>) -> anyhow::Result<Self> {
        let http =
            gantry_agent::runner::client::builder(ca_pem, None)?.timeout(Duration::from_secs(30)).build()?;
        let base = base.trim_end_matches('/').to_owned();
        Ok(Self { http, base, token: token.to_owned(), pinned: ca_pem.is_some() })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// GET a JSON resource.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let resp = self.send(self.http.get(self.url(path))).await?;
        Ok(resp.json().await?)
    }

    /// GET raw bytes.
    pub async fn get_bytes(&self, path: &str) -> anyhow::Result<Vec<u8>> {
        let resp = self.send(self.http.get(self.url(path))).await?;
        Ok(resp.bytes().await?.to_vec())
    }

    /// GET a JSON page and the `x-next-before` cursor of the next one.
    pub async fn get_page<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<(T, Option<i64>)> {
        let resp = self.send(self.http.get(self.url(path))).await?;
        let next =
            resp.headers().get("x-next-before").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        Ok((resp.json().await?, next))
    }

    /// DELETE a resource.
    pub async fn delete(&self, path: &str) -> anyhow::Result<()> {
        self.send(self.http.delete(self.url(path))).await.map(drop)
    }

    /// POST JSON, read JSON.
    pub async fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> anyhow::Result<T> {
        let resp = self.send(self.http.post(self.url(path)).json(body)).await?;
        Ok(resp.json().await?)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let resp = req.bearer_auth(&self.token).send().await.map_err(|e| {
            if let Some(cause) = gantry_agent::runner::client::tls_cause(&e) {
                let hint = if self.pinned {
                    "is it the cluster's CA? `gantry up` and `gantry server` keep theirs in <data>/tls/ca.pem"
                } else {
                    "pin the cluster's CA with --ca FILE or GANTRY_CA (the server keeps it in <data>/tls/ca.pem)"
                };
                anyhow!("TLS with {} failed: {cause}; {hint}", self.base)
            } else if e.is_connect() {
                anyhow!("cannot reach the Gantry server at {}; is `gantry up` running?", self.base)
            } else {
                anyhow!("request to {} failed: {e}", self.base)
            }
        })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
            .unwrap_or(text);
        bail!("{message} ({status})")
    }
}

fn path_text() -> String {
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
