//! A hostile registry: its token challenge names a realm on an address the node may not reach
//! (a stand-in for the cloud metadata service). The client asks the caller's check before it
//! follows the realm, and never dials it when the check refuses.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use gantry_image::Reference;
use gantry_image::registry::{Registry, RegistryConfig, UrlCheck};
use gantry_image::store::ImageStore;

/// Answers every request with a 401 whose challenge names `realm`; counts requests.
fn challenging(ip: &str, realm: String) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind((ip, 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let answer = format!(
                "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer realm=\"{realm}\",service=\"x\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    (port, seen)
}

#[test]
fn a_token_realm_the_check_refuses_is_never_dialled() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The "metadata service": counts whoever reaches it.
    let (metadata, reached) = challenging("127.0.0.2", "http://unused/".into());
    let (port, _) = challenging("127.0.0.1", format!("http://127.0.0.2:{metadata}/latest/meta-data/"));
    let check = UrlCheck(Arc::new(|url: &reqwest::Url| match url.host_str() {
        Some("127.0.0.2") => Err("127.0.0.2 is the node's loopback".into()),
        _ => Ok(()),
    }));
    let config = RegistryConfig {
        insecure: vec![format!("127.0.0.1:{port}")],
        check_url: Some(check),
        ..RegistryConfig::default()
    };
    let registry = Registry::new(reqwest::Client::builder(), config).expect("client");
    let dir = tempfile::tempdir().expect("temp dir");
    let store = ImageStore::open(dir.path()).expect("store");
    let r = Reference::parse(&format!("127.0.0.1:{port}/team/x:v1")).expect("reference");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let err = rt.block_on(registry.pull(&r, None, &store)).expect_err("refused");
    assert!(err.to_string().contains("token realm: 127.0.0.2 is the node's loopback"), "{err}");
    assert_eq!(reached.load(Ordering::SeqCst), 0, "the realm was dialled");
}
