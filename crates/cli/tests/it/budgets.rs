//! Memory budgets against a hostile client (issue 37, point 4), measured on the `gantry up`
//! process itself: 64 unauthenticated 16 MiB bodies to a public service held for a cold start
//! leave its peak resident memory far below what they send (1 GiB): the gateway refuses bodies
//! past its budget with 503.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use crate::services::Serving;

/// Sends `head` and then `bytes` of body on a new connection; the connection, still open.
fn send(addr: &str, head: &str, bytes: usize) -> Option<TcpStream> {
    let mut conn = TcpStream::connect(addr).ok()?;
    conn.set_write_timeout(Some(Duration::from_secs(10))).ok()?;
    conn.write_all(head.as_bytes()).ok()?;
    let block = vec![b'x'; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len());
        if conn.write_all(&block[..n]).is_err() {
            break; // refused and closed: the rest is not read
        }
        left -= n;
    }
    Some(conn)
}

#[test]
fn held_bodies_and_stalled_uploads_do_not_grow_the_servers_memory_with_what_clients_send() {
    let s = Serving::start(&[]);
    // A public service whose replica never becomes ready: every request is held.
    let file = s.cluster.shared().join("held.yaml");
    std::fs::write(
        &file,
        "name: held\nteam: ml\nport: 8000\npublic: true\nreplicas: 1\ncommand: [sleep, '600']\n",
    )
    .expect("file");
    s.apply(&file);
    s.until("held", "its replica starting", 30, |v| {
        v["replica_list"].as_array().is_some_and(|l| !l.is_empty())
    });
    let base = s.cluster.memory_kib("VmRSS");
    let gateway = format!("127.0.0.1:{}", s.gateway);
    let head = format!("POST /ml/held/generate HTTP/1.1\r\nhost: g\r\ncontent-length: {}\r\n\r\n", 16 << 20);
    let senders: Vec<_> = (0..64)
        .map(|_| {
            let (gateway, head) = (gateway.clone(), head.clone());
            std::thread::spawn(move || send(&gateway, &head, 16 << 20))
        })
        .collect();
    let held: Vec<TcpStream> = senders.into_iter().filter_map(|t| t.join().expect("sender")).collect();
    std::thread::sleep(Duration::from_secs(1));
    let after_bodies = s.cluster.memory_kib("VmHWM");
    drop(held);

    eprintln!(
        "server memory: {} MiB before, peak {} MiB after 64 held 16 MiB bodies",
        base >> 10,
        after_bodies >> 10
    );
    assert!(after_bodies < base + (160 << 10), "{} MiB peak from {} MiB", after_bodies >> 10, base >> 10);
    assert!(after_bodies < 200 << 10, "the issue's bound: {} MiB peak", after_bodies >> 10);
    // The API still answers at once.
    let started = std::time::Instant::now();
    s.cluster.gantry(&["jobs"]);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn stalled_blob_uploads_stream_to_disk_and_leave_nothing_behind() {
    use crate::harness::{Cluster, eventually};
    let cluster = Cluster::start(&["--no-tls", "--no-agent"]);
    let token = cluster.token();
    let base = cluster.memory_kib("VmRSS");
    let api = format!("127.0.0.1:{}", cluster.port);
    // Eight uploads that declare 100 MiB, send 96 MiB and stall (the digest is of nothing they
    // send: they are never finished).
    let sha = gantry_api::upload::hex_sha256(b"never sent");
    let head = format!(
        "PUT /v1/uploads/blobs/{sha}?team=ml HTTP/1.1\r\nhost: g\r\nauthorization: Bearer {token}\r\n\
         content-type: application/octet-stream\r\ncontent-length: {}\r\n\r\n",
        100 << 20
    );
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let (api, head) = (api.clone(), head.clone());
            std::thread::spawn(move || send(&api, &head, 96 << 20))
        })
        .collect();
    let stalled: Vec<TcpStream> = senders.into_iter().filter_map(|t| t.join().expect("sender")).collect();
    assert_eq!(stalled.len(), 8);
    let blobs = cluster.data_dir().join("uploads/ml/blobs");
    let partial = || {
        std::fs::read_dir(&blobs)
            .map(|d| d.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
    };
    // What they sent is on disk, not in the server's memory.
    let on_disk: u64 = eventually(Duration::from_secs(30), "the stalled uploads to reach the disk", || {
        partial().ok().filter(|n: &u64| *n >= 8 * (95 << 20))
    });
    let peak = cluster.memory_kib("VmHWM");
    eprintln!(
        "8 stalled 100 MiB uploads: {} MiB on disk; server memory {} MiB before, peak {} MiB",
        on_disk >> 20,
        base >> 10,
        peak >> 10
    );
    assert!(peak < base + (160 << 10), "{} MiB peak from {} MiB", peak >> 10, base >> 10);
    // Clients that go away leave no partial file behind.
    drop(stalled);
    eventually(Duration::from_secs(30), "the partial uploads to be removed", || {
        partial().ok().filter(|n| *n == 0)
    });
    cluster.gantry(&["jobs"]);
}

#[test]
fn eleven_hundred_idle_gateway_connections_under_a_soft_limit_of_1024_leave_the_api_and_jobs_working() {
    use crate::harness::{Cluster, eventually};
    // Debian's soft RLIMIT_NOFILE: the server kept it while the gateway admitted 10,000
    // connections, and 1,100 idle ones took every descriptor (the API timed out, a job could
    // not make its cgroup).
    let gateway = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let listen = format!("127.0.0.1:{gateway}");
    let cluster = Cluster::start_via(&["prlimit", "--nofile=1024:", "--"], &["--gateway-listen", &listen]);
    cluster.wait_for_agent();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", cluster.pid())).expect("limits");
    let files = limits.lines().find(|l| l.starts_with("Max open files")).unwrap_or_default().to_owned();
    eprintln!("{files}");
    let conns: Vec<TcpStream> =
        (0..1100).filter_map(|_| TcpStream::connect(("127.0.0.1", gateway)).ok()).collect();
    eprintln!("{} idle gateway connections open", conns.len());
    std::thread::sleep(Duration::from_millis(500));
    // The API answers over TCP, as a remote client's would, and a job starts and ends.
    let started = std::time::Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let http = cluster.http();
    let url = format!("{}/v1/jobs", cluster.url());
    let status = rt
        .block_on(async { http.get(&url).bearer_auth(cluster.token()).send().await.map(|r| r.status()) })
        .expect("the API answers");
    let took = started.elapsed();
    eprintln!("the API answered {status} in {took:?} with {} gateway connections held", conns.len());
    assert!(status.is_success(), "{status}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let id = cluster.gantry(&["submit", "--", "true"]).trim().to_owned();
    eventually(Duration::from_secs(30), "the job to end", || {
        let j: serde_json::Value = serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).ok()?;
        let state = j["job"]["state"].as_str()?.to_owned();
        (state != "pending" && state != "scheduled" && state != "running").then_some(())
    });
    let j: serde_json::Value =
        serde_json::from_str(&cluster.gantry(&["job", &id, "-o", "json"])).expect("json");
    assert_eq!(j["job"]["state"], "succeeded", "{j}");
    drop(conns);
}
