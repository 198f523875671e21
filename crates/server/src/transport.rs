//! The listener: an accept loop in place of `axum::serve`, which offers none of what a control
//! plane reachable from other machines needs: TLS with optional client certificates, the peer's
//! address and certificate on every request, limits against slow or numerous clients, and a
//! shutdown that finishes requests without waiting for idle keep-alive connections.
//!
//! Each connection:
//! 1. takes a permit: at most [`Limits::max_connections`] are open at once. Beyond that the loop
//!    stops accepting, so new connections wait in the kernel's accept backlog (1024) and are
//!    served as others close; a client that gives up first sees a connect timeout, not a reset.
//!    At most [`Limits::max_connections_per_address`] of them may come from one peer address:
//!    a connection past that is closed at once, so one client holding slow connections open
//!    cannot take every permit and stall everyone else.
//! 2. with TLS, completes the handshake within [`Limits::tls_handshake_timeout`]. A client that
//!    speaks plain HTTP to the TLS port gets a plain HTTP 400 saying so, then the
//!    connection closes.
//! 3. speaks HTTP/1.1 with keep-alive. Every request's headers must arrive within
//!    [`Limits::header_read_timeout`], counted from when the server starts waiting for them, so
//!    the same timeout also closes keep-alive connections that sit idle that long. The whole
//!    request, body included, must be answered within [`Limits::request_timeout`], else it
//!    gets a 408 (a body sent a byte at a time cannot hold a connection slot forever).
//! 4. gets [`axum::extract::ConnectInfo`]`<SocketAddr>` (and, with a verified client certificate,
//!    [`PeerCert`]) inserted into every request.
//!
//! Loopback counts as one address: `127.0.0.0/8` holds 16 million of them, and a local client
//! dialling from `127.0.1.x` must not get a fresh per-address allowance for each. The local CLI
//! and agent then need a way in that no other local client can fill: the unix socket
//! ([`UnixSocket`], `<data>/api.sock`), served the same way (TLS included, so the client keeps
//! its URL and pinned CA) by its own accept loop with its own connection cap. Its peers are
//! reported as `127.0.0.1:0`.
//!
//! HTTP/2 is not offered: HTTP/1.1 keeps one set of timeouts that is easy to reason about, and
//! agents and the CLI send one small request at a time.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

use crate::error::ErrorBody;
use crate::tls::{PeerCert, common_name, sha256_hex};

/// The listener's limits (see the module documentation for what each one does).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections from one peer address at most.
    pub max_connections_per_address: usize,
    /// Count every loopback address as one (the API, whose local clients have the unix
    /// socket); the gateway counts each, its local clients having no other way in.
    pub loopback_is_one_source: bool,
    /// Time allowed for a request's headers, and for an idle keep-alive connection.
    pub header_read_timeout: Duration,
    /// Time allowed for the TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Time allowed for a whole request, from its headers to the response.
    pub request_timeout: Duration,
    /// At shutdown, how long in-flight requests may take before the server stops anyway.
    pub shutdown_grace: Duration,
}

/// The API's unix socket: its own accept loop and cap, so that connections over TCP (from any
/// number of loopback addresses) never hold the local CLI and agent out.
#[derive(Debug)]
pub struct UnixSocket {
    /// The bound socket.
    pub listener: UnixListener,
    /// Open connections at most on it; more wait in the backlog.
    pub max_connections: usize,
}

/// What every connection needs.
#[derive(Debug, Clone)]
struct Shared {
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
}

/// Serves `router` on `listeners` (one address, or both loopback families: see [`crate::listen`])
/// and on `unix` when given, until `shutdown` resolves, then lets in-flight requests finish (up
/// to [`Limits::shutdown_grace`]) and closes idle connections at once.
pub async fn serve(
    listeners: Vec<TcpListener>,
    unix: Option<UnixSocket>,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let graceful = GracefulShutdown::new();
    let shared = Shared { router, tls, limits };
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let signal = async move {
        shutdown.await;
        stop_tx.send_replace(true);
    };
    let tcp = accept_tcp(listeners, &shared, &graceful, stop.clone());
    let local = async {
        if let Some(unix) = unix {
            accept_unix(unix, &shared, &graceful, stop).await;
        }
    };
    tokio::join!(signal, tcp, local);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await.is_err() {
        tracing::warn!(grace = ?limits.shutdown_grace, "requests still running at shutdown were abandoned");
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A connection slot of `permits`, or `None` once `stopped` resolves (the semaphore is never
/// closed: it lives as long as its loop).
async fn next_permit(
    permits: &Arc<Semaphore>,
    stopped: &mut (impl Future<Output = ()> + Unpin),
) -> Option<OwnedSemaphorePermit> {
    tokio::select! {
        permit = Arc::clone(permits).acquire_owned() => permit.ok(),
        () = stopped => None,
    }
}

/// Accepts TCP connections until `stop`, each under the global and its address's cap.
async fn accept_tcp(
    listeners: Vec<TcpListener>,
    shared: &Shared,
    graceful: &GracefulShutdown,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(shared.limits.max_connections.max(1)));
    let mut per_address = PerAddress::new(shared.limits.max_connections_per_address);
    per_address.loopback_is_one = shared.limits.loopback_is_one_source;
    let mut turn = 0;
    let stopped = stopped(stop);
    tokio::pin!(stopped);
    loop {
        let Some(permit) = next_permit(&permits, &mut stopped).await else { break };
        let (stream, peer) = tokio::select! {
            accepted = crate::listen::accept_any(&listeners, &mut turn) => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut stopped => break,
        };
        let Some(slot) = per_address.take(peer.ip()) else {
            tracing::debug!(%peer, "closed a connection past the per-address limit");
            drop(stream);
            continue;
        };
        let span = tracing::info_span!("connection", %peer);
        let permit = (permit, Some(slot));
        tokio::spawn(
            tcp_connection(stream, peer, shared.clone(), graceful.watcher(), permit).instrument(span),
        );
    }
}

/// Accepts unix-socket connections until `stop`, under the socket's own cap.
async fn accept_unix(
    unix: UnixSocket,
    shared: &Shared,
    graceful: &GracefulShutdown,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(unix.max_connections.max(1)));
    let peer = SocketAddr::from(([127, 0, 0, 1], 0));
    let stopped = stopped(stop);
    tokio::pin!(stopped);
    loop {
        let Some(permit) = next_permit(&permits, &mut stopped).await else { break };
        let stream = tokio::select! {
            accepted = unix.listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut stopped => break,
        };
        let span = tracing::info_span!("connection", peer = "unix");
        let shared = shared.clone();
        let watcher = graceful.watcher();
        tokio::spawn(
            async move {
                let _permit = permit;
                match shared.tls.clone() {
                    None => http(TokioIo::new(stream), peer, None, &shared, watcher).await,
                    Some(config) => tls_then_http(stream, config, peer, &shared, watcher).await,
                }
            }
            .instrument(span),
        );
    }
}

/// Open connections per peer address.
#[derive(Debug, Clone)]
struct PerAddress {
    open: Arc<std::sync::Mutex<std::collections::HashMap<IpAddr, usize>>>,
    limit: usize,
    loopback_is_one: bool,
}

/// One open connection of an address; dropping it gives the slot back.
#[derive(Debug)]
struct AddressSlot {
    of: PerAddress,
    ip: IpAddr,
}

impl PerAddress {
    fn new(limit: usize) -> Self {
        Self { open: Arc::default(), limit: limit.max(1), loopback_is_one: true }
    }

    /// A slot for `ip`, unless it has `limit` connections open. Every loopback address (and
    /// an IPv4-mapped one) counts as `127.0.0.1`.
    fn take(&self, ip: IpAddr) -> Option<AddressSlot> {
        let ip = if self.loopback_is_one { source(ip) } else { ip.to_canonical() };
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(AddressSlot { of: self.clone(), ip })
    }
}

/// The source a connection counts against: one for all of loopback.
fn source(ip: IpAddr) -> IpAddr {
    let ip = ip.to_canonical();
    if ip.is_loopback() { IpAddr::from([127, 0, 0, 1]) } else { ip }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.of.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Per-connection errors (the peer went away) are routine; others (out of file descriptors)
/// would spin the loop, so wait a moment, as `axum::serve` does.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if !matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        tracing::error!(error = %e, "accepting a connection failed; retrying in a second");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn tcp_connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Shared,
    watcher: Watcher,
    _permit: (OwnedSemaphorePermit, Option<AddressSlot>),
) {
    let _ = stream.set_nodelay(true);
    let Some(config) = shared.tls.clone() else {
        return http(TokioIo::new(stream), peer, None, &shared, watcher).await;
    };
    match tokio::time::timeout(shared.limits.tls_handshake_timeout, speaks_tls(&stream)).await {
        Ok(true) => {}
        Ok(false) => return refuse_plain_http(stream).await,
        Err(_) => return, // not a byte within the handshake's time
    }
    tls_then_http(stream, config, peer, &shared, watcher).await;
}

/// The TLS handshake (within [`Limits::tls_handshake_timeout`]), then HTTP over it.
async fn tls_then_http<S>(
    stream: S,
    config: Arc<rustls::ServerConfig>,
    peer: SocketAddr,
    shared: &Shared,
    watcher: Watcher,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let acceptor = TlsAcceptor::from(config);
    let tls = match tokio::time::timeout(shared.limits.tls_handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let cert = tls.get_ref().1.peer_certificates().and_then(<[_]>::first);
    let cert = cert.and_then(|c| Some(PeerCert { common_name: common_name(c)?, sha256: sha256_hex(c) }));
    http(TokioIo::new(tls), peer, cert, shared, watcher).await;
}

/// HTTP/1.1 on an established (and, with TLS, handshaken) connection.
async fn http<I>(io: TokioIo<I>, peer: SocketAddr, cert: Option<PeerCert>, shared: &Shared, watcher: Watcher)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let router = shared.router.clone();
    let timeout = shared.limits.request_timeout;
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        if let Some(cert) = &cert {
            req.extensions_mut().insert(cert.clone());
        }
        let answer = tower::ServiceExt::oneshot(router.clone(), req);
        async move {
            match tokio::time::timeout(timeout, answer).await {
                Ok(response) => response,
                Err(_) => Ok(timed_out(timeout)),
            }
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(shared.limits.header_read_timeout).keep_alive(true);
    if let Err(e) = watcher.watch(builder.serve_connection(io, service)).await {
        tracing::debug!(error = %e, "connection closed with an error");
    }
}

/// The 408 for a request that took longer than `limit`.
fn timed_out(limit: Duration) -> Response {
    let error = format!("the request took longer than {} s", limit.as_secs_f64());
    (StatusCode::REQUEST_TIMEOUT, Json(ErrorBody { error })).into_response()
}

/// Whether the first byte is a TLS handshake record (a ClientHello) rather than, say, the `G`
/// of a plain `GET`.
async fn speaks_tls(stream: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first).await, Ok(1) if first[0] == 0x16)
}

/// Answers a plain-HTTP request on the TLS port with a 400 that says what to do, so the client
/// sees a sentence rather than a reset connection.
async fn refuse_plain_http(mut stream: TcpStream) {
    const BODY: &str =
        "{\"error\":\"this port serves HTTPS: use an https:// URL and pin the cluster CA (--ca)\"}";
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    // Read what the client sent first: closing with unread bytes would reset the connection
    // and the client might never see the answer.
    let mut request = [0u8; 16 * 1024];
    let _ = stream.read(&mut request).await;
    if stream.write_all(answer.as_bytes()).await.is_ok() {
        let _ = stream.shutdown().await;
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut request)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_loopback_address_counts_as_one_source() {
        let one = IpAddr::from([127, 0, 0, 1]);
        for ip in ["127.0.1.7", "127.255.255.254", "::1", "::ffff:127.0.3.4"] {
            assert_eq!(source(ip.parse().expect("ip")), one, "{ip}");
        }
        for ip in ["10.0.0.1", "::ffff:10.0.0.1", "2001:db8::1"] {
            let parsed: IpAddr = ip.parse().expect("ip");
            assert_eq!(source(parsed), parsed.to_canonical(), "{ip}");
        }
        let limit = PerAddress::new(2);
        let held: Vec<_> =
            ["127.0.0.1", "127.0.1.1"].iter().filter_map(|ip| limit.take(ip.parse().ok()?)).collect();
        assert_eq!(held.len(), 2);
        assert!(
            limit.take("127.9.9.9".parse().expect("ip")).is_none(),
            "a third loopback address is the same source"
        );
        assert!(limit.take("10.0.0.1".parse().expect("ip")).is_some());
    }
}
