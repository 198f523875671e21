//! The agent side of the v1 agent protocol (HTTP/JSON), and the TLS settings every Gantry
//! client shares: a pinned cluster CA instead of the system's roots, an optional client
//! certificate for mutual TLS, and [`fetch_ca`] for joining with only the CA's SHA-256.
//!
//! The server may be several addresses (`https://a:7070,https://b:7070`: replicas of one control
//! plane). Each request goes to the one that answered last; on a failure that
//! [`gantry_api::failover`] allows to repeat it goes to the next, so an agent that loses its
//! server keeps reporting its jobs to another. Registering and heartbeats are safe to repeat (a
//! heartbeat's reports stand until acknowledged; a repeated registration only takes a newer
//! epoch); a join spends a one-time token, so it moves on only when nothing was sent.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use sha2::{Digest, Sha256};

use gantry_api::failover::{self, Failure, NOT_SERVING_HEADER, Repeat, Rotation};
use gantry_api::model::Heartbeat;
use gantry_api::types::{HeartbeatResponse, JoinRequest, JoinResponse, RegisterRequest, RegisterResponse};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::AgentError;

/// How long a request may take (a held heartbeat: this beyond its hold).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connecting (TCP and the TLS handshake) may take: a dead host is given up on this
/// soon, with nothing sent, and the next address tried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A client for `/v1/agent/*`.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    servers: Arc<[String]>,
    rotation: Arc<Rotation>,
    token: String,
}

impl Client {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:7070`, or several separated by
    /// commas) with a join token.
    pub fn new(base: &str, token: &str) -> Result<Self, AgentError> {
        Self::with_tls(base, token, None, None)
    }

    /// A client that pins `ca_pem` (else trusts the system's roots) and, given a certificate
    /// and key (PEM), presents them for mutual TLS.
    pub fn with_tls(
        base: &str,
        token: &str,
        ca_pem: Option<&str>,
        client_cert: Option<(&str, &str)>,
    ) -> Result<Self, AgentError> {
        Self::with_socket(base, token, ca_pem, client_cert, None)
    }

    /// As [`Self::with_tls`], every request going through the server's unix `socket` when one is
    /// given (the URL still names the server: its certificate is checked against it).
    pub fn with_socket(
        base: &str,
        token: &str,
        ca_pem: Option<&str>,
        client_cert: Option<(&str, &str)>,
        socket: Option<&std::path::Path>,
    ) -> Result<Self, AgentError> {
        let mut builder = builder(ca_pem, client_cert)?.timeout(REQUEST_TIMEOUT);
        if let Some(socket) = socket {
            builder = builder.unix_socket(socket);
        }
        let http = builder.build()?;
        let servers = failover::parse_servers(base).map_err(AgentError::Servers)?.into();
        Ok(Self { http, servers, rotation: Arc::default(), token: token.to_owned() })
    }

    /// The address requests go to first: the one that answered last.
    pub fn server(&self) -> &str {
        &self.servers[self.rotation.current()]
    }

    /// The registry login of a job's image (its team secret's `username` and `password`).
    pub async fn registry_credentials(
        &self,
        job_id: i64,
    ) -> Result<gantry_api::types::RegistryCredentials, AgentError> {
        let path = format!("/v1/agent/jobs/{job_id}/registry-credentials");
        let resp =
            self.request(&path, Repeat::Safe, |url| self.http.get(url).timeout(REQUEST_TIMEOUT)).await?;
        Ok(resp.json().await?)
    }

    /// Tells the server the digest a job's image resolved to (answered 204).
    pub async fn report_image(&self, job_id: i64, attempt: u32, digest: &str) -> Result<(), AgentError> {
        let body = gantry_api::types::ResolvedImage { attempt, digest: digest.to_owned() };
        let path = format!("/v1/agent/jobs/{job_id}/image");
        self.request(&path, Repeat::Safe, |url| self.http.post(url).timeout(REQUEST_TIMEOUT).json(&body))
            .await?;
        Ok(())
    }

    /// Trades the join token this client holds for the node's credential.
    pub async fn join(&self, node_id: &str) -> Result<JoinResponse, AgentError> {
        let body = JoinRequest { node_id: node_id.to_owned() };
        self.send("/v1/agent/join", &body, REQUEST_TIMEOUT, Repeat::Unsafe).await
    }

    /// Registers the node; returns its epoch.
    pub async fn register(&self, req: &RegisterRequest) -> Result<RegisterResponse, AgentError> {
        self.send("/v1/agent/register", req, REQUEST_TIMEOUT, Repeat::Safe).await
    }

    /// Sends a heartbeat, answered at once; a 409 (stale epoch) or 404 (unknown node) means
    /// fenced.
    pub async fn heartbeat(&self, hb: &Heartbeat) -> Result<HeartbeatResponse, AgentError> {
        self.heartbeat_waiting(hb, Duration::ZERO, None).await
    }

    /// Sends a heartbeat that the server may hold for up to `wait` while the node's assignments
    /// are still the ones of version `known` (see `HeartbeatWait`); an older server answers at
    /// once.
    pub async fn heartbeat_waiting(
        &self,
        hb: &Heartbeat,
        wait: Duration,
        known: Option<&str>,
    ) -> Result<HeartbeatResponse, AgentError> {
        let mut path = "/v1/agent/heartbeat".to_owned();
        if !wait.is_zero() {
            path.push_str(&format!("?wait_ms={}", wait.as_millis()));
            if let Some(known) = known.filter(|k| k.bytes().all(|b| b.is_ascii_alphanumeric())) {
                path.push_str(&format!("&known={known}"));
            }
        }
        match self.send(&path, hb, wait + REQUEST_TIMEOUT, Repeat::Safe).await {
            Err(AgentError::Status { status: 404 | 409, body }) => Err(AgentError::Fenced(body)),
            other => other,
        }
    }

    /// Asks the server to answer this node's held heartbeat now (`POST /v1/agent/wake`): the
    /// agent has news for it. An older server answers 404, which changes nothing.
    pub async fn wake(&self, node_id: &str) -> Result<(), AgentError> {
        let body = gantry_api::types::WakeRequest { node_id: node_id.to_owned() };
        self.request("/v1/agent/wake", Repeat::Safe, |url| {
            self.http.post(url).timeout(REQUEST_TIMEOUT).json(&body)
        })
        .await
        .map(drop)
    }

    /// Reports staging and cache; answered what to stage. A 409 (stale epoch) is an error like
    /// any other here: the heartbeat finds it too and registers again.
    pub async fn staging(
        &self,
        req: &gantry_api::types::StagingRequest,
    ) -> Result<gantry_api::types::StagingResponse, AgentError> {
        self.send("/v1/agent/staging", req, REQUEST_TIMEOUT, Repeat::Safe).await
    }

    /// Reports an ended attempt's output uploads; answered the secret to upload with.
    pub async fn outputs(
        &self,
        req: &gantry_api::outputs::OutputReport,
    ) -> Result<gantry_api::outputs::OutputAnswer, AgentError> {
        self.send("/v1/agent/outputs", req, REQUEST_TIMEOUT, Repeat::Safe).await
    }

    /// GETs `path` (a job's upload manifest) as JSON.
    pub async fn get_json<R: DeserializeOwned>(&self, path: &str) -> Result<R, AgentError> {
        Ok(self.get(path, REQUEST_TIMEOUT).await?.json().await?)
    }

    /// GETs `path` (a file of a job's upload) as bytes, allowing `timeout` for it.
    pub async fn get_bytes(&self, path: &str, timeout: Duration) -> Result<bytes::Bytes, AgentError> {
        Ok(self.get(path, timeout).await?.bytes().await?)
    }

    /// GETs `path`: a read, always safe to send to the next server.
    async fn get(&self, path: &str, timeout: Duration) -> Result<reqwest::Response, AgentError> {
        self.request(path, Repeat::Safe, |url| self.http.get(url).timeout(timeout)).await
    }

    /// POSTs `body` as JSON and reads the answer's.
    async fn send<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        timeout: Duration,
        repeat: Repeat,
    ) -> Result<R, AgentError> {
        let resp = self.request(path, repeat, |url| self.http.post(url).timeout(timeout).json(body)).await?;
        Ok(resp.json().await?)
    }

    /// Sends the request `build` makes for a server's URL to the address that answered last,
    /// then to the others while [`failover::try_next`] allows: a success, the server's refusal,
    /// or the last failure when none answered.
    async fn request(
        &self,
        path: &str,
        repeat: Repeat,
        build: impl Fn(String) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, AgentError> {
        let mut last = None;
        for index in self.rotation.order(self.servers.len()) {
            let sent = build(format!("{}{path}", self.servers[index])).bearer_auth(&self.token).send().await;
            let failure = match sent {
                Ok(resp) if resp.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE => {
                    let failure = if resp.headers().contains_key(NOT_SERVING_HEADER) {
                        Failure::NotServing
                    } else {
                        Failure::Unavailable
                    };
                    let body = resp.text().await.unwrap_or_default();
                    last = Some(AgentError::Status { status: 503, body });
                    failure
                }
                Ok(resp) => {
                    self.rotation.worked(index);
                    return success(resp).await;
                }
                Err(e) => {
                    let failure = failure_of(&e);
                    last = Some(with_tls_cause(e));
                    failure
                }
            };
            if !failover::try_next(failure, repeat) {
                break;
            }
            if self.servers.len() > 1 {
                tracing::debug!(server = %self.servers[index], ?failure, "trying the next server");
            }
        }
        Err(last.expect("the list of servers is never empty (parse_servers)"))
    }
}

/// A server's answer when it is a success, else its status and text.
async fn success(resp: reqwest::Response) -> Result<reqwest::Response, AgentError> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body = resp.text().await.unwrap_or_default();
    Err(AgentError::Status { status: status.as_u16(), body })
}

/// What a request error proves: a connect error (refused, no such host, the TCP connect or the
/// TLS handshake failed or ran past [`CONNECT_TIMEOUT`]) happened before the request was
/// written; any other may have reached the server.
pub fn failure_of(e: &reqwest::Error) -> Failure {
    if e.is_connect() { Failure::NotSent } else { Failure::MaybeSent }
}

/// A reqwest builder with Gantry's TLS settings: `ca_pem` pinned as the only root when given
/// (else the system's roots), `client_cert` (certificate PEM, key PEM) presented when given, and
/// idle connections dropped after 5 s, before the server's 10 s idle timeout can close one
/// under a request, and connecting given up after [`CONNECT_TIMEOUT`].
pub fn builder(
    ca_pem: Option<&str>,
    client_cert: Option<(&str, &str)>,
) -> Result<reqwest::ClientBuilder, AgentError> {
    // reqwest is built without a default crypto provider; ring is the workspace's choice.
    // Installing twice fails harmlessly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder =
        reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(5)).connect_timeout(CONNECT_TIMEOUT);
    if let Some(pem) = ca_pem {
        let roots = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
            .map_err(|e| AgentError::Tls(format!("the CA is not a PEM certificate: {e}")))?;
        if roots.is_empty() {
            return Err(AgentError::Tls("the CA file holds no PEM certificate".into()));
        }
        builder = builder.tls_certs_only(roots);
    }
    if let Some((cert, key)) = client_cert {
        let identity = reqwest::Identity::from_pem(format!("{cert}\n{key}").as_bytes())
            .map_err(|e| AgentError::Tls(format!("the client certificate or key is not usable: {e}")))?;
        builder = builder.identity(identity);
    }
    Ok(builder)
}

/// Fetches the cluster CA from `GET <server>/v1/ca.pem` without verifying the connection, and
/// accepts it only if the SHA-256 of its DER bytes is `expected_sha256` (hex, optionally
/// prefixed `sha256:`): kubeadm's discovery-token-ca-cert-hash. The hash is what makes this
/// safe; whoever answered, only the one CA with that hash is returned, re-encoded from the
/// checked bytes so nothing else in the answer can ride along.
///
/// Of several addresses (comma-separated), the first that answers with that CA.
pub async fn fetch_ca(server: &str, expected_sha256: &str) -> Result<String, AgentError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let expected = expected_sha256.trim().trim_start_matches("sha256:").to_ascii_lowercase();
    if expected.len() != 64 || !expected.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(AgentError::Tls("the CA hash must be 64 hex digits (SHA-256)".into()));
    }
    let http = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut last = None;
    for base in failover::parse_servers(server).map_err(AgentError::Servers)? {
        match fetch_ca_from(&http, &base, &expected).await {
            Ok(pem) => return Ok(pem),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("the list of servers is never empty (parse_servers)"))
}

async fn fetch_ca_from(http: &reqwest::Client, server: &str, expected: &str) -> Result<String, AgentError> {
    let url = format!("{server}/v1/ca.pem");
    let resp = http.get(&url).send().await.map_err(with_tls_cause)?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        return Err(AgentError::Status { status: status.as_u16(), body });
    }
    let body = resp.bytes().await?;
    let ca = CertificateDer::from_pem_slice(&body)
        .map_err(|e| AgentError::Tls(format!("{url} did not answer with a PEM certificate: {e}")))?;
    let got: String = Sha256::digest(&ca).iter().map(|b| format!("{b:02x}")).collect();
    if got != expected {
        return Err(AgentError::CaMismatch { expected: expected.to_owned(), got });
    }
    Ok(pem(&ca))
}

/// A DER certificate as PEM.
fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The TLS failure behind a request error, in words, if there is one (an unknown issuer, a
/// name mismatch, a refused client certificate): reqwest's own message leaves it out.
pub fn tls_cause(e: &reqwest::Error) -> Option<String> {
    rustls_error(e).map(ToString::to_string)
}

/// The rustls error somewhere in `e`'s chain of causes, if the request failed in TLS.
pub fn rustls_error(e: &reqwest::Error) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        // An io::Error's `source` skips the error it wraps; `get_ref` is that error.
        next = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

fn with_tls_cause(e: reqwest::Error) -> AgentError {
    match tls_cause(&e) {
        Some(cause) => AgentError::Tls(cause),
        None => AgentError::Http(e),
    }
}
