//! The cluster CA and the server certificate, kept in `<data>/tls/` (directory 0700, keys 0600):
//!
//! | file | what |
//! |---|---|
//! | `ca.pem`, `ca.key` | the CA: made once, 10 years; clients pin `ca.pem` |
//! | `server.pem`, `server.key` | the server's certificate, signed by the CA, 2 years |
//! | `server.sans` | its expiry and the names it was issued for |
//!
//! On restart everything is reused; the server certificate alone is re-issued when the names
//! asked for differ from those it holds, or when it has under 30 days left. Replacing the CA is
//! deliberate work (delete both CA files), since every pinned client must then be updated.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::{TlsError, sha256_hex};

const DAY: u64 = 24 * 60 * 60;
const CA_LIFETIME: u64 = 10 * 365 * DAY;
const SERVER_LIFETIME: u64 = 2 * 365 * DAY;
const CLIENT_LIFETIME: u64 = 365 * DAY;
/// A server certificate with less left than this is re-issued at start.
const RENEW_BEFORE: u64 = 30 * DAY;
/// Certificates start an hour in the past, so a peer whose clock is a little behind accepts them.
const BACKDATE: u64 = 60 * 60;

/// The cluster's certificate authority and the server's certificate and key.
pub struct Pki {
    dir: PathBuf,
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    server_cert: CertificateDer<'static>,
    server_key: PrivateKeyDer<'static>,
    sans: Vec<String>,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("Pki")
            .field("dir", &self.dir)
            .field("ca_sha256", &self.ca_sha256())
            .field("sans", &self.sans)
            .finish_non_exhaustive()
    }
}

impl Pki {
    /// Loads the CA and server certificate from `dir`, creating what is missing; re-issues the
    /// server certificate when `sans` changed or it is about to expire.
    pub fn load_or_create(dir: &Path, sans: &[String]) -> Result<Self, TlsError> {
        private_dir(dir)?;
        let (ca_pem, key, fresh_ca) = load_or_create_ca(dir)?;
        let ca_der = CertificateDer::from_pem_slice(ca_pem.as_bytes())
            .map_err(|e| TlsError::Pem(format!("{}: {e}", dir.join("ca.pem").display())))?;
        let issuer = Issuer::new(ca_params(&key, 0)?, key);
        let (server_cert, server_key) = match load_server(dir, sans) {
            Some(loaded) if !fresh_ca => loaded,
            _ => issue_server(dir, &issuer, sans)?,
        };
        Ok(Self { dir: dir.to_owned(), ca_pem, ca_der, issuer, server_cert, server_key, sans: sans.to_vec() })
    }

    /// The TLS directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the CA certificate is (what clients pin with `--ca`).
    pub fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Lowercase hex SHA-256 of the CA certificate's DER bytes (for `--ca-sha256` pinning).
    pub fn ca_sha256(&self) -> String {
        sha256_hex(&self.ca_der)
    }

    /// Base64 SHA-256 of the CA's SubjectPublicKeyInfo: the pin Chromium's
    /// `--ignore-certificate-errors-spki-list` and HTTP public-key pinning take. The server sends
    /// the CA after its own certificate, so a browser pinning this key finds it in the chain.
    pub fn ca_spki_sha256_base64(&self) -> String {
        use base64::Engine;
        use rcgen::PublicKeyData;
        use sha2::Digest;
        let spki = self.issuer.key().subject_public_key_info();
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(spki))
    }

    /// The CA certificate, DER.
    pub fn ca_der(&self) -> &[u8] {
        &self.ca_der
    }

    /// The names the server certificate is valid for.
    pub fn sans(&self) -> &[String] {
        &self.sans
    }

    /// A client certificate for `node_id` (its subject common name), signed by the CA, valid for
    /// a year: `(certificate PEM, private key PEM)`. Nothing is written to disk.
    pub fn issue_client(&self, node_id: &str) -> Result<(String, String), TlsError> {
        if node_id.is_empty() || node_id.len() > 64 || node_id.chars().any(char::is_control) {
            return Err(TlsError::Name(node_id.to_owned()));
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(node_id);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, CLIENT_LIFETIME);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The listener's rustls configuration: this server certificate, then the CA's (so a client
    /// can check the chain against a pinned CA key, as well as a pinned CA); client certificates
    /// optional, but verified against the CA when presented; HTTP/1.1 by ALPN.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone())?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::clone(&provider),
        )
        .allow_unauthenticated()
        .build()?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![self.server_cert.clone(), self.ca_der.clone()],
                self.server_key.clone_key(),
            )?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Reads the CA or makes one: `(certificate PEM, key, whether it is new)`.
fn load_or_create_ca(dir: &Path) -> Result<(String, KeyPair, bool), TlsError> {
    let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca.key"));
    match (cert_path.exists(), key_path.exists()) {
        (true, true) => {
            let key = KeyPair::from_pem(&read(&key_path)?)
                .map_err(|e| TlsError::Pem(format!("{}: {e}", key_path.display())))?;
            Ok((read(&cert_path)?, key, false))
        }
        (false, false) => {
            let key = KeyPair::generate()?;
            let cert = ca_params(&key, CA_LIFETIME)?.self_signed(&key)?;
            write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
            write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
            tracing::info!(dir = %dir.display(), "created the cluster CA");
            Ok((cert.pem(), key, true))
        }
        _ => Err(TlsError::Pem(format!(
            "{} holds only one of ca.pem and ca.key; restore the other, or delete both to make a new CA \
             (every client that pins the old one must then be given the new ca.pem)",
            dir.display()
        ))),
    }
}

/// The CA's parameters. The subject carries a short hash of the CA's public key, so two
/// clusters' CAs never share a name, and the same key always yields the same name (the issuer
/// is rebuilt from the key on every start; rcgen cannot read the certificate back).
fn ca_params(key: &KeyPair, lifetime: u64) -> Result<CertificateParams, TlsError> {
    let id = sha256_hex(key.public_key_raw());
    let mut params = CertificateParams::default();
    params.distinguished_name = name(&format!("Gantry cluster CA {}", &id[..12]));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    validity(&mut params, lifetime);
    Ok(params)
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Gantry");
    dn.push(DnType::CommonName, common_name);
    dn
}

fn validity(params: &mut CertificateParams, lifetime: u64) {
    let now = unix_now();
    params.not_before = datetime(now.saturating_sub(BACKDATE));
    params.not_after = datetime(now + lifetime);
}

fn datetime(secs: u64) -> time::OffsetDateTime {
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

// Certificates carry wall-clock validity; the CA reads the time of day like `clock::now_ms`.
#[allow(clippy::disallowed_methods)]
fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The stored server certificate, if it exists, was issued for exactly `sans` and is not
/// about to expire.
fn load_server(dir: &Path, sans: &[String]) -> Option<(CertificateDer<'static>, PrivateKeyDer<'static>)> {
    let record = std::fs::read_to_string(dir.join("server.sans")).ok()?;
    let mut lines = record.lines();
    let valid_until: u64 = lines.next()?.strip_prefix("valid_until=")?.parse().ok()?;
    if lines.ne(sans.iter().map(String::as_str)) || valid_until < unix_now() + RENEW_BEFORE {
        return None;
    }
    let cert = CertificateDer::from_pem_file(dir.join("server.pem")).ok()?;
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).ok()?;
    Some((cert, key))
}

fn issue_server(
    dir: &Path,
    issuer: &Issuer<'static, KeyPair>,
    sans: &[String],
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), TlsError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(sans.to_vec())?;
    params.distinguished_name = name("Gantry server");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, SERVER_LIFETIME);
    let cert = params.signed_by(&key, issuer)?;
    write_file(&dir.join("server.key"), key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&dir.join("server.pem"), cert.pem().as_bytes(), 0o644)?;
    let record = format!("valid_until={}\n{}\n", unix_now() + SERVER_LIFETIME, sans.join("\n"));
    write_file(&dir.join("server.sans"), record.as_bytes(), 0o644)?;
    tracing::info!(sans = ?sans, "issued the server certificate");
    let key_der = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| TlsError::Pem(e.to_owned()))?;
    Ok((cert.der().clone(), key_der))
}

/// Creates `dir` if needed and makes it private to this user.
fn private_dir(dir: &Path) -> Result<(), TlsError> {
    let io = |source| TlsError::Io { path: dir.to_owned(), source };
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)
}

fn read(path: &Path) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|source| TlsError::Io { path: path.to_owned(), source })
}

/// Writes through a temporary file created with `mode`, then renames: a crash leaves the old
/// file or the new one, and a key is never readable by others, even for a moment.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    let io = |source| TlsError::Io { path: path.to_owned(), source };
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(io)?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
