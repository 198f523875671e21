//! Mutual TLS for the extender's listener. `/bind` creates pod `Binding`s with the extender's
//! service account and `/filter` steers placement, so only kube-scheduler may call it: the
//! listener presents `--tls-cert`/`--tls-key` and *requires* a client certificate that chains to
//! `--client-ca` (kube-scheduler's `tlsConfig.certFile`/`keyFile` in its extender entry). A client
//! without one fails the handshake and never reaches HTTP. rustls with ring, like the server.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why the listener's TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no PEM certificate or key (or a malformed one).
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// rustls refused the certificate, key or CA.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client-certificate verifier could not be built from the CA.
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// The listener's rustls configuration: the certificate chain in `cert` and its key in `key`
/// (PEM), and client certificates required and verified against the CA certificates in
/// `client_ca` (PEM). HTTP/1.1 by ALPN (kube-scheduler's client speaks it).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: &Path,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates(cert)?;
    let key_der = PrivateKeyDer::from_pem_slice(&read(key)?)
        .map_err(|e| TlsError::Pem { path: key.to_owned(), what: format!("no usable private key ({e})") })?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in certificates(client_ca)? {
        roots.add(ca)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // No `allow_unauthenticated()`: a handshake without a client certificate signed by the CA fails.
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
            .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key_der)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Every certificate in a PEM file; at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |what: String| TlsError::Pem { path: path.to_owned(), what };
    let certs = CertificateDer::pem_slice_iter(&read(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(format!("malformed PEM certificate ({e})")))?;
    if certs.is_empty() {
        return Err(pem("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned()));
    }
    Ok(certs)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a server certificate it signed, written as PEM files: `(dir, cert, key, ca)`.
    fn files() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::default();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("cert");
        let (c, k, a) = (dir.path().join("tls.crt"), dir.path().join("tls.key"), dir.path().join("ca.crt"));
        std::fs::write(&c, cert.pem()).expect("write");
        std::fs::write(&k, key.serialize_pem()).expect("write");
        std::fs::write(&a, ca.pem()).expect("write");
        (dir, c, k, a)
    }

    #[test]
    fn a_certificate_key_and_ca_make_a_config() {
        let (_dir, cert, key, ca) = files();
        let config = server_config(&cert, &key, &ca).expect("config");
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn a_missing_or_empty_file_is_an_error_naming_it() {
        let (dir, cert, key, _ca) = files();
        let missing = dir.path().join("nope.crt");
        let err = server_config(&cert, &key, &missing).expect_err("missing CA").to_string();
        assert!(err.contains("nope.crt"), "{err}");
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "not pem").expect("write");
        let err = server_config(&cert, &key, &empty).expect_err("no certificate").to_string();
        assert!(err.contains("empty.crt") && err.contains("no PEM certificate"), "{err}");
        let err = server_config(&cert, &cert, &empty).expect_err("no key").to_string();
        assert!(err.contains("tls.crt") && err.contains("private key"), "{err}");
    }
}
