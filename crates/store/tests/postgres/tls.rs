//! TLS to PostgreSQL: a throwaway server with `ssl=on` and a certificate from a CA made here;
//! the `sslmode` and `sslrootcert` of the URL decide what the store accepts.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use gantry_store::*;

use crate::harness::{self, TempPostgres};

/// A CA: its certificate (PEM) and what signs with it.
fn ca(name: &str) -> (String, rcgen::Issuer<'static, rcgen::KeyPair>) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).expect("CA");
    (cert.pem(), rcgen::Issuer::new(params, key))
}

/// The TLS server, its CA's PEM file, and another CA's, in a directory that lives as long.
struct Tls {
    server: TempPostgres,
    ca: PathBuf,
    other_ca: PathBuf,
    _dir: tempfile::TempDir,
}

fn tls_server() -> Option<&'static Tls> {
    static SERVER: OnceLock<Tls> = OnceLock::new();
    harness::shared()?;
    Some(SERVER.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let (ca_pem, issuer) = ca("gantry test CA");
        let (other_pem, _) = ca("another CA");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("server certificate");
        let server = TempPostgres::start_with_tls(&cert.pem(), &key.serialize_pem()).expect("a TLS server");
        let (ca, other_ca) = (dir.path().join("ca.pem"), dir.path().join("other.pem"));
        std::fs::write(&ca, ca_pem).expect("write");
        std::fs::write(&other_ca, other_pem).expect("write");
        Tls { server, ca, other_ca, _dir: dir }
    }))
}

fn with(url: &str, query: &str) -> String {
    format!("{url}?{query}")
}

fn path(p: &Path) -> String {
    p.display().to_string().replace('/', "%2F")
}

/// Whether the server sees a TLS session on `url`'s database besides psql's own.
fn encrypted_sessions(server: &TempPostgres, url: &str) -> String {
    let db = url.rsplit('/').next().expect("database");
    server
        .psql(
            url,
            &format!(
                "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.datname = '{db}' AND s.ssl AND a.pid <> pg_backend_pid()"
            ),
        )
        .expect("psql")
}

#[test]
fn verify_full_with_the_servers_ca_connects_encrypted() {
    let Some(tls) = tls_server() else { return };
    let url = tls.server.create_database();
    let store = PgStore::open(&with(&url, &format!("sslmode=verify-full&sslrootcert={}", path(&tls.ca))))
        .expect("verify-full against the CA that signed the server");
    let (id, _) = store.submit(&crate::new_job("a", 0, 0)).expect("a write over TLS");
    assert_eq!(store.job(id).expect("read").map(|j| j.id), Some(id));
    assert_ne!(encrypted_sessions(&tls.server, &url), "0", "the store's sessions are TLS");
    // verify-ca and require check the chain; prefer (the default) takes TLS when offered.
    for query in
        [format!("sslmode=verify-ca&sslrootcert={}", path(&tls.ca)), "sslmode=require".into(), String::new()]
    {
        drop(PgStore::open(&with(&url, &query)).unwrap_or_else(|e| panic!("{query}: {e}")));
    }
}

#[test]
fn a_wrong_ca_or_a_host_the_certificate_does_not_name_fails_with_a_sentence() {
    let Some(tls) = tls_server() else { return };
    let url = tls.server.create_database();
    let err = PgStore::open(&with(&url, &format!("sslmode=verify-full&sslrootcert={}", path(&tls.other_ca))))
        .expect_err("a CA that did not sign the server's certificate");
    let said = err.to_string();
    assert!(said.contains("the TLS handshake with the database failed"), "{said}");
    assert!(said.contains("UnknownIssuer") || said.contains("unknown issuer"), "{said}");
    let err = PgStore::open(&with(&url, &format!("sslmode=require&sslrootcert={}", path(&tls.other_ca))))
        .expect_err("require with a root certificate checks it, as libpq");
    assert!(err.to_string().contains("TLS handshake"), "{err}");
    // The certificate names localhost and 127.0.0.1: reach the same server under another name
    // (`hostaddr` connects there, the name is what TLS checks).
    let port = tls.server.port();
    let db = url.rsplit('/').next().expect("database");
    let other_name = format!("postgres://gantry@db.example:{port}/{db}?hostaddr=127.0.0.1");
    let ca = path(&tls.ca);
    let err = PgStore::open(&format!("{other_name}&sslmode=verify-full&sslrootcert={ca}"))
        .expect_err("a host the certificate does not name");
    assert!(err.to_string().contains("not valid for name \"db.example\""), "{err}");
    drop(
        PgStore::open(&format!("{other_name}&sslmode=verify-ca&sslrootcert={ca}"))
            .expect("verify-ca checks the chain, not the name"),
    );
}

#[test]
fn sslmode_require_against_a_server_without_tls_fails_and_verify_without_a_ca_is_refused() {
    let Some(plain) = harness::shared() else { return };
    let url = plain.create_database();
    let err = PgStore::open(&with(&url, "sslmode=require")).expect_err("the server offers no TLS");
    assert!(err.to_string().contains("does not offer TLS"), "{err}");
    let err = PgStore::open(&with(&url, "sslmode=sometimes")).expect_err("not a mode");
    assert!(err.to_string().contains("sslmode=sometimes is none of"), "{err}");
    drop(PgStore::open(&with(&url, "sslmode=disable")).expect("disable needs no TLS"));
    drop(PgStore::open(&url).expect("prefer falls back to plain text"));
}
