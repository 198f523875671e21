//! Binding the API's sockets so that no other process on the machine can stand in for the server
//! on the name clients use.
//!
//! Clients on the server's machine write `localhost`, which resolves to `127.0.0.1` and to
//! `::1`; browsers try `::1` first. A server bound to one family leaves the other free, and any
//! local process (a job, under any user) may bind it and answer `http://localhost:PORT/` in its
//! place. So a listen address of `127.0.0.1:P` or `[::1]:P` is bound in both families, on the
//! same port (and `0.0.0.0:P`, which covers `127.0.0.1`, gets `[::1]:P` beside it):
//! - the other family's address being in use is an error: something else already answers
//!   `localhost:P`, and starting anyway would leave clients to whichever family they try first
//!   (with port 0, a fresh port is tried instead, a few times);
//! - the other family being absent (a kernel or container without IPv6, or without an IPv4
//!   loopback) is not: [`Bound::missing`] says so, and nothing can bind there either.
//!
//! Any other address is bound as given. Sockets get `SO_REUSEADDR` (tokio's default, so a
//! restart finds the port despite connections in `TIME_WAIT`) but never `SO_REUSEPORT`: without it,
//! Linux refuses every other bind of a port that is listening, whoever asks.
//!
//! What this does not stop: a process that binds the port while the server is down (a restart).
//! That one is stopped by TLS, which the `gantry` binary serves on loopback by default: clients pin
//! the cluster CA, and an impostor without the CA's key cannot complete the handshake, so no
//! request, and no token, is ever sent to it (see `docs/security.md`).

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::task::Poll;

use tokio::net::{TcpListener, TcpStream};

/// How many fresh ports are tried for port 0 when the first one is taken in the other family.
const PORT_ZERO_TRIES: usize = 16;

/// The bound listeners: the listen address first, then its other-family partner if any.
#[derive(Debug)]
pub struct Bound {
    /// The sockets, all listening.
    pub listeners: Vec<TcpListener>,
    /// The other loopback family's address when it does not exist on this machine, with why.
    pub missing: Option<(SocketAddr, std::io::Error)>,
}

/// Why the listen address could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Binding the listen address itself failed.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The other loopback family's address is held by another process.
    #[error(
        "cannot listen on {addr}: another process already holds it and would answer clients of \
         localhost:{port} in gantry's place; stop that process or choose another port (see docs/security.md)",
        port = addr.port()
    )]
    PartnerTaken {
        /// The other family's address.
        addr: SocketAddr,
    },
}

/// The other family's loopback address for `addr`, when `addr` is `127.0.0.1` or `::1`; also
/// `::1` for `0.0.0.0`, which holds `127.0.0.1` but leaves `[::1]` free (`::` is left alone: it
/// usually holds both families already).
pub fn loopback_partner(addr: SocketAddr) -> Option<SocketAddr> {
    match addr.ip() {
        IpAddr::V4(ip) if ip == Ipv4Addr::LOCALHOST || ip.is_unspecified() => {
            Some(SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port()))
        }
        IpAddr::V6(ip) if ip == Ipv6Addr::LOCALHOST => {
            Some(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port()))
        }
        _ => None,
    }
}

/// Binds `addr`, and its other loopback family on the same port (see the module documentation).
pub async fn bind(addr: SocketAddr) -> Result<Bound, ListenError> {
    let tries = if addr.port() == 0 { PORT_ZERO_TRIES } else { 1 };
    let mut last = None;
    for _ in 0..tries {
        let first = TcpListener::bind(addr).await.map_err(|source| ListenError::Bind { addr, source })?;
        let port = first.local_addr().map_err(|source| ListenError::Bind { addr, source })?.port();
        let Some(partner) = loopback_partner(SocketAddr::new(addr.ip(), port)) else {
            return Ok(Bound { listeners: vec![first], missing: None });
        };
        match TcpListener::bind(partner).await {
            Ok(second) => return Ok(Bound { listeners: vec![first, second], missing: None }),
            Err(e) if family_absent(&e) => {
                return Ok(Bound { listeners: vec![first], missing: Some((partner, e)) });
            }
            Err(e) if e.kind() == ErrorKind::AddrInUse => {
                last = Some(ListenError::PartnerTaken { addr: partner })
            }
            Err(source) => return Err(ListenError::Bind { addr: partner, source }),
        }
    }
    Err(last.expect("the loop ran at least once and only continues after a taken partner"))
}

/// Whether binding failed because the address family or address does not exist here (no IPv6),
/// rather than because someone holds it.
fn family_absent(e: &std::io::Error) -> bool {
    const EAFNOSUPPORT: i32 = 97;
    e.kind() == ErrorKind::AddrNotAvailable || e.raw_os_error() == Some(EAFNOSUPPORT)
}

/// The next connection on any of `listeners`. Each call starts polling at a different listener,
/// so a busy one cannot starve the other.
pub async fn accept_any(
    listeners: &[TcpListener],
    turn: &mut usize,
) -> std::io::Result<(TcpStream, SocketAddr)> {
    let n = listeners.len().max(1);
    *turn = turn.wrapping_add(1);
    let start = *turn;
    std::future::poll_fn(|cx| {
        for i in 0..listeners.len() {
            if let Poll::Ready(accepted) = listeners[(start + i) % n].poll_accept(cx) {
                return Poll::Ready(accepted);
            }
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6_loopback_exists() -> bool {
        std::net::TcpListener::bind("[::1]:0").is_ok()
    }

    #[tokio::test]
    async fn a_loopback_address_is_bound_in_both_families_on_one_port() {
        let bound = bind("127.0.0.1:0".parse().expect("addr")).await.expect("bind");
        let port = bound.listeners[0].local_addr().expect("addr").port();
        if !v6_loopback_exists() {
            assert!(bound.missing.is_some());
            return;
        }
        assert_eq!(bound.listeners.len(), 2);
        assert_eq!(
            bound.listeners[1].local_addr().expect("addr"),
            format!("[::1]:{port}").parse().expect("addr")
        );
        let squat = std::net::TcpListener::bind(format!("[::1]:{port}"));
        assert!(squat.is_err(), "another process could bind [::1]:{port} beside the server");
    }

    #[tokio::test]
    async fn a_taken_partner_address_is_refused_with_a_sentence() {
        if !v6_loopback_exists() {
            return;
        }
        let squatter = std::net::TcpListener::bind("[::1]:0").expect("bind");
        let port = squatter.local_addr().expect("addr").port();
        let err = bind(format!("127.0.0.1:{port}").parse().expect("addr")).await.expect_err("refused");
        let text = err.to_string();
        assert!(text.contains(&format!("[::1]:{port}")) && text.contains("another process"), "{text}");
    }

    #[tokio::test]
    async fn the_ipv4_wildcard_gets_the_ipv6_loopback_beside_it() {
        let bound = bind("0.0.0.0:0".parse().expect("addr")).await.expect("bind");
        let port = bound.listeners[0].local_addr().expect("addr").port();
        if v6_loopback_exists() {
            assert_eq!(bound.listeners.len(), 2);
            assert!(std::net::TcpListener::bind(format!("[::1]:{port}")).is_err());
        }
    }

    #[tokio::test]
    async fn an_address_other_than_loopback_is_bound_alone() {
        let bound = bind("127.0.0.2:0".parse().expect("addr")).await.expect("bind");
        assert_eq!(bound.listeners.len(), 1);
        assert!(bound.missing.is_none());
    }

    #[tokio::test]
    async fn connections_on_either_listener_are_accepted() {
        let bound = bind("127.0.0.1:0".parse().expect("addr")).await.expect("bind");
        let mut turn = 0;
        for listener in &bound.listeners {
            let addr = listener.local_addr().expect("addr");
            let _client = TcpStream::connect(addr).await.expect("connect");
            let (_, peer) = accept_any(&bound.listeners, &mut turn).await.expect("accept");
            assert_eq!(peer.is_ipv6(), addr.is_ipv6());
        }
    }
}
