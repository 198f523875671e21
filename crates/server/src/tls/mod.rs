//! TLS between Gantry's components: a small certificate authority per cluster ([`Pki`]), the
//! server's rustls configuration, and the identity a verified client certificate carries
//! ([`PeerCert`]).
//!
//! Why a private CA rather than self-signed server certificates: clients pin one certificate
//! (the CA, by file or by its SHA-256) and keep working when the server certificate is re-issued
//! for a new address, and the same CA signs agents' client certificates for mutual TLS. Keys are
//! ECDSA P-256 made by rcgen; all cryptography is rustls with ring (no aws-lc).
//!
//! Start with [`Pki::load_or_create`]; [`Pki::server_config`] is what the listener uses.

mod der;
mod pki;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use sha2::{Digest, Sha256};

pub use pki::Pki;

/// The identity of a client that presented a certificate signed by the cluster CA. The listener
/// inserts it into every request of that connection; it is absent when the client sent none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCert {
    /// The certificate's subject common name (for agents: the node id it was issued to).
    pub common_name: String,
    /// Hex SHA-256 of the certificate's DER: what a node credential issued with it is bound to.
    pub sha256: String,
}

/// Why certificates could not be made, read or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading or writing a file under the TLS directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Generating or signing a key or certificate failed.
    #[error("cannot make a certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// A client certificate was asked for with an empty, overlong or unprintable name.
    #[error("cannot issue a certificate for {0:?}: use 1 to 64 printable characters")]
    Name(String),
    /// A PEM file or string holds no usable certificate or key.
    #[error("invalid PEM: {0}")]
    Pem(String),
    /// rustls refused the certificates or keys.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client-certificate verifier could not be built from the CA.
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// Lowercase hex SHA-256 of a certificate's DER bytes: what `--ca-sha256` pins.
pub fn sha256_hex(der: &[u8]) -> String {
    Sha256::digest(der).iter().map(|b| format!("{b:02x}")).collect()
}

/// Base64 SHA-256 of a DER certificate's SubjectPublicKeyInfo (what Chromium's
/// `--ignore-certificate-errors-spki-list` takes), if the certificate can be read.
pub fn spki_sha256_base64(cert_der: &[u8]) -> Option<String> {
    use base64::Engine;
    let spki = der::subject_public_key_info(cert_der)?;
    Some(base64::engine::general_purpose::STANDARD.encode(Sha256::digest(spki)))
}

/// Names the server certificate is valid for: `localhost`, `127.0.0.1`, `::1`, this machine's
/// host name, the listen address when it is a specific one, and `extra` (`--tls-san`).
pub fn default_sans(listen: SocketAddr, extra: &[String]) -> Vec<String> {
    let mut sans: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if let Some(host) = hostname() {
        sans.push(host);
    }
    if !listen.ip().is_unspecified() {
        sans.push(listen.ip().to_string());
    }
    sans.extend(extra.iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()));
    let mut seen = std::collections::HashSet::new();
    sans.retain(|s| seen.insert(normalise(s)));
    sans
}

/// IP addresses compare by value (`::1` and `0:0::1` are one name), host names without case.
fn normalise(name: &str) -> String {
    name.parse::<IpAddr>().map_or_else(|_| name.to_ascii_lowercase(), |ip| ip.to_string())
}

fn hostname() -> Option<String> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let host = host.trim();
    (!host.is_empty()).then(|| host.to_owned())
}

/// The subject common name of a DER certificate, if it has one.
pub fn common_name(cert_der: &[u8]) -> Option<String> {
    der::subject_common_name(cert_der)
}
