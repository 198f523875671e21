//! TLS to PostgreSQL with rustls on ring: the `sslmode` and `sslrootcert` of a `--db` URL in
//! libpq's meanings.
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow`, `prefer` (the default) | when the server offers it | not checked (libpq's too) |
//! | `require` | always | not checked; against `sslrootcert` when one is given (libpq: as `verify-ca`) |
//! | `verify-ca` | always | signed by a CA of `sslrootcert` |
//! | `verify-full` | always | signed by a CA of `sslrootcert` and naming the host connected to |
//!
//! `sslrootcert` is a PEM file of CA certificates; without it `verify-ca` and `verify-full` read
//! `~/.postgresql/root.crt`, as libpq does, and refuse with a sentence when that is missing too.
//! tokio-postgres itself knows only `disable`, `prefer` and `require`: [`split`] takes both
//! options out of the URL before it is parsed.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it (`allow` is taken as this too).
    Prefer,
    /// Always TLS; the certificate checked only against an `sslrootcert` given.
    Require,
    /// Always TLS, the certificate signed by a trusted CA.
    VerifyCa,
    /// Always TLS, the certificate signed by a trusted CA and naming the host.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => Self::Disable,
            "allow" | "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other} is none of disable, allow, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }

    /// What tokio-postgres is told: whether TLS is tried, and whether it is a must.
    pub(crate) fn negotiation(self) -> PgSslMode {
        match self {
            Self::Disable => PgSslMode::Disable,
            Self::Prefer => PgSslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => PgSslMode::Require,
        }
    }
}

/// The TLS options of a `--db` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// `sslmode` (`prefer` when absent, as libpq).
    pub mode: SslMode,
    /// `sslrootcert`: a PEM file of trusted CAs.
    pub root_cert: Option<PathBuf>,
}

/// `url` without its `sslmode` and `sslrootcert` (a `postgres://` URL's query parameters, or
/// `key=value` pairs), and what they asked.
pub fn split(url: &str) -> Result<(String, TlsOptions), String> {
    let mut mode = None;
    let mut root_cert = None;
    let mut take = |key: &str, value: &str| -> Result<bool, String> {
        match key {
            "sslmode" => mode = Some(SslMode::parse(value)?),
            "sslrootcert" => root_cert = Some(PathBuf::from(value)),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_owned(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(key, &percent_decoded(value)?)? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) }
            }
        }
    } else {
        let mut kept = Vec::new();
        for pair in url.split_whitespace() {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(key, value.trim_matches('\''))? {
                kept.push(pair);
            }
        }
        kept.join(" ")
    };
    Ok((rest, TlsOptions { mode: mode.unwrap_or(SslMode::Prefer), root_cert }))
}

fn percent_decoded(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or_else(|| format!("a bad escape in `{s}`"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("a bad escape in `{s}`"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{s}` is not UTF-8"))
}

/// The connector for `options`: rustls on ring, checking what the mode asks.
pub fn connector(options: &TlsOptions) -> Result<MakeRustls, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let root_cert = match (&options.root_cert, options.mode) {
        (Some(path), _) => Some(path.clone()),
        (None, SslMode::VerifyCa | SslMode::VerifyFull) => {
            let default = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".postgresql/root.crt"));
            match default.filter(|p| p.is_file()) {
                Some(p) => Some(p),
                None => {
                    return Err(
                        "sslmode=verify-ca and verify-full need the CA to check the server against: \
                         add sslrootcert=/path/to/ca.pem to the URL"
                            .into(),
                    );
                }
            }
        }
        (None, _) => None,
    };
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = match root_cert {
        None => Arc::new(Unchecked(algorithms)),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(&path)
                .map_err(|e| format!("cannot read sslrootcert {}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("sslrootcert {} is not PEM: {e}", path.display()))?;
                roots.add(cert).map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("sslrootcert {} holds no certificate", path.display()));
            }
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::clone(&provider),
            )
            .build()
            .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            let names = options.mode == SslMode::VerifyFull;
            Arc::new(Chain { webpki, names })
        }
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustls { config: Arc::new(config) })
}

/// `prefer` and `require` without a CA: encrypted, the peer not authenticated (as libpq). The
/// handshake's signatures are still checked.
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca` (the chain) and `verify-full` (the chain and the host's name).
#[derive(Debug)]
struct Chain {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    names: bool,
}

impl ServerCertVerifier for Chain {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.names => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// tokio-postgres's TLS hook over tokio-rustls.
#[derive(Debug, Clone)]
pub struct MakeRustls {
    config: Arc<ClientConfig>,
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<RustlsConnect> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("`{domain}` is not a host name"))
        })?;
        Ok(RustlsConnect { config: Arc::clone(&self.config), name })
    }
}

/// One connection's handshake.
#[derive(Debug)]
pub struct RustlsConnect {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let tls = tokio_rustls::TlsConnector::from(self.config).connect(self.name, stream).await?;
            Ok(RustlsStream(tls))
        })
    }
}

/// A TLS connection to the server.
#[derive(Debug)]
pub struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_the_url_and_the_rest_kept() {
        let (rest, tls) = split(
            "postgres://g@db:5432/x?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=a",
        )
        .expect("split");
        assert_eq!(rest, "postgres://g@db:5432/x?application_name=a");
        assert_eq!(tls, TlsOptions { mode: SslMode::VerifyFull, root_cert: Some("/etc/ca.pem".into()) });
        let (rest, tls) = split("postgres://g@db/x").expect("split");
        assert_eq!((rest.as_str(), tls.mode), ("postgres://g@db/x", SslMode::Prefer));
        let (rest, tls) = split("host=db sslmode=require user=g").expect("split");
        assert_eq!((rest.as_str(), tls.mode), ("host=db user=g", SslMode::Require));
        let err = split("postgres://db/x?sslmode=maybe").expect_err("bad mode");
        assert!(err.contains("sslmode=maybe is none of"), "{err}");
    }

    #[test]
    fn verify_full_without_a_ca_is_refused_with_a_sentence() {
        let options = TlsOptions { mode: SslMode::VerifyFull, root_cert: None };
        if std::env::var_os("HOME").is_some_and(|h| PathBuf::from(h).join(".postgresql/root.crt").is_file()) {
            return;
        }
        let err = connector(&options).expect_err("no CA");
        assert!(err.contains("add sslrootcert="), "{err}");
        let missing = TlsOptions { mode: SslMode::Require, root_cert: Some("/nonexistent/ca.pem".into()) };
        assert!(connector(&missing).expect_err("missing file").contains("cannot read sslrootcert"));
    }
}
