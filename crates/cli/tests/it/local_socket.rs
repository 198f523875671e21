//! The local way in (issue 37, point 4): loopback counts as one source, so connections from
//! `127.0.1.x` cannot each take a fresh allowance, and the CLI and the local agent reach `gantry
//! up` through its unix socket (`<data>/api.sock`), which no number of TCP connections fills.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::harness::{Cluster, eventually};

/// Raises this process's soft limit on open files to its hard limit (the flood needs thousands).
#[allow(unsafe_code)] // reason: getrlimit(2)/setrlimit(2) have no wrapper in std.
fn raise_open_files() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, writable rlimit for the call's duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
    // SAFETY: a valid rlimit; raising the soft limit to the hard one needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 { lim.rlim_max } else { lim.rlim_cur }
}

/// A connection from `from` that starts a TLS record (the server speaks TLS) and then sends
/// nothing.
async fn slow(from: Ipv4Addr, to: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::from((from, 0))).ok()?;
    let mut conn = tokio::time::timeout(Duration::from_secs(2), socket.connect(to)).await.ok()?.ok()?;
    conn.write_all(&[0x16, 0x03, 0x01]).await.ok()?;
    Some(conn)
}

/// Whether the server still holds `conn` open (nothing to read, no end of stream).
fn open(conn: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(conn.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[test]
fn slow_connections_from_many_loopback_addresses_neither_fill_the_server_nor_hold_out_the_cli() {
    let cluster = Cluster::start(&["--backend", "simulated", "--simulated-gpus", "1xA100-80GB"]);
    let socket = cluster.data_dir().join("api.sock");
    let meta = std::fs::symlink_metadata(&socket).expect("the API's unix socket");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "the socket is its owner's only");
    eventually(Duration::from_secs(20), "the local agent to register", || {
        cluster.gantry(&["nodes"]).contains("ready").then_some(())
    });

    let limit = raise_open_files();
    let wanted = 3_000.min(limit.saturating_sub(200) as usize);
    let api = SocketAddr::from(([127, 0, 0, 1], cluster.port));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let (held, flooded) = rt.block_on(async {
        let tries = (0..wanted).map(|i| {
            let from = Ipv4Addr::new(127, 0, 1, 1 + (i % 250) as u8);
            tokio::spawn(slow(from, api))
        });
        let mut held = Vec::new();
        for t in tries.collect::<Vec<_>>() {
            held.extend(t.await.expect("task"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let still: Vec<TcpStream> = held.into_iter().filter(open).collect();
        (still, Instant::now())
    });
    eprintln!("{wanted} slow connections from 127.0.1.1-250: the server holds {}", held.len());
    // Loopback is one source: at most its per-address allowance (128) is held, not a thousand.
    assert!(held.len() <= 128, "{} held", held.len());
    assert!(!held.is_empty(), "the server closed every connection at once");

    // The CLI answers through the socket while the server still holds every slow connection:
    // it did not get in because they timed out (handshake timeout 10 s).
    cluster.gantry(&["jobs"]);
    let took = flooded.elapsed();
    let _guard = rt.enter();
    let open_after = held.iter().filter(|c| open(c)).count();
    eprintln!("the CLI answered {took:?} after the flood; {open_after} slow connections still held");
    assert_eq!(open_after, held.len(), "the slow connections were let go before the CLI answered");
    // The local agent's heartbeats go through the socket too: the node stays ready.
    assert!(cluster.gantry(&["nodes"]).contains("ready"));
    drop(held);
}
