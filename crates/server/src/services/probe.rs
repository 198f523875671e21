//! Readiness and liveness: one HTTP `GET` per replica per `interval_s`, and what its answers
//! mean ([`Probe::record`], pure).
//!
//! A replica is ready after one answer in 200..400 within `timeout_s`; `failure_threshold`
//! failures in a row make it unready (no traffic). A replica that was ready and then fails the
//! threshold in a row is dead: the controller restarts it (liveness). A replica that never
//! became ready is left to start for as long as it takes (a model may load for minutes); the
//! probe only keeps it out of the gateway's table.

use std::net::SocketAddr;
use std::time::Duration;

use gantry_api::service::Readiness;
use http_body_util::Empty;
use hyper::body::Bytes;

use super::plan::Phase;

/// What the probe knows of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Probe {
    /// Passing now.
    pub ready: bool,
    /// Passed at least once.
    pub was_ready: bool,
    /// Failures in a row.
    pub failures: u32,
    /// When the last probe was sent (ms), if any.
    pub last_at: Option<i64>,
    /// A probe is out.
    pub in_flight: bool,
}

impl Probe {
    /// The probe after an answer (`ok`) or a failure.
    pub fn record(self, ok: bool, threshold: u32) -> Self {
        if ok {
            return Self { ready: true, was_ready: true, failures: 0, in_flight: false, ..self };
        }
        let failures = self.failures.saturating_add(1);
        let ready = self.ready && failures < threshold;
        Self { ready, failures, in_flight: false, ..self }
    }

    /// The phase of a running replica with this probe.
    pub fn phase(&self, threshold: u32) -> Phase {
        match (self.ready, self.was_ready) {
            (true, _) => Phase::Ready,
            (false, true) if self.failures >= threshold => Phase::Dead,
            (false, true) => Phase::Unready,
            (false, false) => Phase::Starting,
        }
    }

    /// Whether a probe is due at `now` for a replica running since `started_at` (ms).
    pub fn due(&self, spec: &Readiness, started_at: i64, now: i64) -> bool {
        let first = started_at + (spec.initial_delay_s * 1000.0) as i64;
        let interval = (spec.interval_s * 1000.0) as i64;
        !self.in_flight && now >= first && self.last_at.is_none_or(|last| now >= last + interval)
    }
}

/// Sends one probe: whether `GET path` on `addr` answered 200..400 within `timeout`.
pub async fn check(addr: SocketAddr, path: &str, timeout: Duration) -> bool {
    tokio::time::timeout(timeout, get(addr, path))
        .await
        .ok()
        .flatten()
        .is_some_and(|s| (200..400).contains(&s))
}

async fn get(addr: SocketAddr, path: &str) -> Option<u16> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io).await.ok()?;
    let driver = tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, addr.to_string())
        .header(hyper::header::USER_AGENT, "gantry-probe")
        .body(Empty::new())
        .ok()?;
    let status = sender.send_request(req).await.ok().map(|r| r.status().as_u16());
    driver.abort();
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_answer_makes_a_replica_ready_and_the_threshold_of_failures_makes_it_unready_then_dead() {
        let p = Probe::default();
        assert_eq!(p.phase(3), Phase::Starting);
        let p = p.record(false, 3).record(false, 3).record(false, 3);
        assert_eq!(p.phase(3), Phase::Starting, "never ready: still starting, not restarted");
        let p = p.record(true, 3);
        assert_eq!(p.phase(3), Phase::Ready);
        let p = p.record(false, 3);
        assert_eq!(p.phase(3), Phase::Ready, "one failure is below the threshold");
        let p = p.record(false, 3).record(false, 3);
        assert_eq!(p.phase(3), Phase::Dead);
    }

    #[test]
    fn a_probe_is_due_after_the_initial_delay_and_then_every_interval() {
        let spec = Readiness { interval_s: 2.0, initial_delay_s: 5.0, ..Readiness::default() };
        let p = Probe::default();
        assert!(!p.due(&spec, 0, 4_999));
        assert!(p.due(&spec, 0, 5_000));
        let sent = Probe { last_at: Some(5_000), ..p };
        assert!(!sent.due(&spec, 0, 6_999));
        assert!(sent.due(&spec, 0, 7_000));
        assert!(!Probe { in_flight: true, ..sent }.due(&spec, 0, 9_000));
    }
}
