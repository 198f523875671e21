//! Gateway activity shared between server replicas on one database: the leader's autoscaler is
//! the only one that scales, but clients may send to any replica's gateway. Each follower
//! writes what its gateway saw of each service — the last request it answered, forwarded or
//! held, and how many it holds now for a replica (a cold start) — to `service_activity`; the
//! leader reads the other replicas' rows every tick and counts them as its own: a request seen
//! elsewhere keeps a service from scaling to zero, a request held elsewhere starts a service at
//! zero, and the others' requests in flight, queued and per second add to the leader's
//! gateway's own in the autoscaler's sample, and their times to first byte (as histograms that
//! add, [`crate::gateway::histogram`]) join the leader's own in the sample's `ttft_p95`.
//!
//! A follower writes a row at once when its gateway starts or stops holding requests, and
//! otherwise when it saw a request or its figures changed, at most once a [`REFRESH_MS`]: a
//! second of staleness against syncs of a second or more and scale-to-zero windows of minutes.
//! Held counts and figures older than [`HELD_FRESH_MS`] are not counted (a follower that stopped
//! writing is serving nothing any more).

use std::collections::HashMap;

use gantry_store::ServiceActivity;

use crate::gateway::histogram::Histogram;
use crate::gateway::{ServiceKey, ServiceSnapshot};

/// Least time between two rows of a follower for one service while only requests come.
pub const REFRESH_MS: i64 = 1_000;

/// A held count read from another replica is counted this long after it was written.
pub const HELD_FRESH_MS: i64 = 3_000;

/// What the other replicas' gateways saw of one service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Elsewhere {
    /// ms since the epoch: the latest request any of them saw.
    pub last_request_at: i64,
    /// Requests they hold for a ready replica now.
    pub held: usize,
    /// Requests they sent to its replicas and have not had answered.
    pub in_flight: f64,
    /// Requests in their queues.
    pub queue_length: f64,
    /// Requests per second arriving at them.
    pub rps: f64,
    /// Times to first byte they measured over their windows.
    pub ttft: Histogram,
}

/// The other replicas' activity per service, from the rows `rows` (this replica's own left out).
pub fn elsewhere(rows: &[ServiceActivity], me: &str, now: i64) -> HashMap<ServiceKey, Elsewhere> {
    let mut out: HashMap<ServiceKey, Elsewhere> = HashMap::new();
    for row in rows.iter().filter(|r| r.replica != me) {
        let e = out.entry(ServiceKey::new(&row.team, &row.service)).or_default();
        e.last_request_at = e.last_request_at.max(row.last_request_at);
        if now - row.at <= HELD_FRESH_MS {
            e.held += row.held as usize;
            e.in_flight += f64::from(row.in_flight);
            e.queue_length += f64::from(row.queue_length);
            e.rps += row.rps;
            e.ttft.add(&Histogram::from_pairs(&row.ttft_histogram));
        }
    }
    out
}

/// What a follower last wrote and saw of one service.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sent {
    /// The gateway's answered-request count at the last look.
    requests_total: u64,
    /// The last request it saw (ms).
    last_request_at: i64,
    /// The last row's: request time, held count, figures, and when it was written.
    written: Option<(i64, usize, Figures, i64)>,
}

/// A gateway's figures for a service, as a row carries them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Figures {
    in_flight: u32,
    queue_length: u32,
    rps: f64,
}

/// A follower's rows for this tick: per service, its gateway's snapshot and the requests its
/// controller was told are held; `sent` remembers what was written.
pub fn rows(
    me: &str,
    now: i64,
    seen: &[(ServiceKey, Option<ServiceSnapshot>, usize)],
    sent: &mut HashMap<ServiceKey, Sent>,
) -> Vec<ServiceActivity> {
    let mut out = Vec::new();
    for (key, snapshot, held) in seen {
        let s = sent.entry(key.clone()).or_default();
        let (total, busy) = snapshot
            .as_ref()
            .map_or((s.requests_total, false), |g| (g.requests_total, g.in_flight > 0 || g.queue_length > 0));
        let held = (*held).max(snapshot.as_ref().map_or(0, |g| g.queue_length));
        let figures = snapshot.as_ref().map_or_else(Figures::default, |g| Figures {
            in_flight: u32::try_from(g.in_flight).unwrap_or(u32::MAX),
            queue_length: u32::try_from(g.queue_length).unwrap_or(u32::MAX),
            rps: g.rps,
        });
        if total != s.requests_total || busy || held > 0 {
            s.last_request_at = now;
        }
        s.requests_total = total;
        if s.last_request_at == 0 {
            continue;
        }
        let due = match s.written {
            None => true,
            Some((at_request, at_held, at_figures, at)) => {
                at_held != held
                    || ((s.last_request_at > at_request || at_figures != figures) && now - at >= REFRESH_MS)
            }
        };
        if due {
            s.written = Some((s.last_request_at, held, figures, now));
            out.push(ServiceActivity {
                team: key.team.clone(),
                service: key.service.clone(),
                replica: me.to_owned(),
                last_request_at: s.last_request_at,
                held: u32::try_from(held).unwrap_or(u32::MAX),
                in_flight: figures.in_flight,
                queue_length: figures.queue_length,
                rps: figures.rps,
                ttft_histogram: snapshot.as_ref().map_or_else(Vec::new, |g| g.ttft_histogram.pairs()),
                at: now,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(replica: &str, last: i64, held: u32, at: i64) -> ServiceActivity {
        ServiceActivity {
            team: "ml".into(),
            service: "echo".into(),
            replica: replica.into(),
            last_request_at: last,
            held,
            in_flight: 2 * held,
            queue_length: 0,
            rps: 1.5,
            ttft_histogram: vec![(10, held)],
            at,
        }
    }

    #[test]
    fn the_leader_counts_the_others_latest_request_and_their_fresh_held_requests_not_its_own_row() {
        let rows = [
            row("me", 9_000, 5, 9_000),
            row("b", 4_000, 2, 8_000),
            row("c", 7_000, 1, 1_000),
            row("d", 3_000, 3, 9_500),
        ];
        let e = elsewhere(&rows, "me", 10_000);
        let key = ServiceKey::new("ml", "echo");
        let fresh = Elsewhere {
            last_request_at: 7_000,
            held: 5,
            in_flight: 10.0,
            queue_length: 0.0,
            rps: 3.0,
            ttft: Histogram::from_pairs(&[(10, 5)]),
        };
        assert_eq!(
            e[&key], fresh,
            "c's held count and figures are stale, its last request is not; b's and d's add"
        );
    }

    fn snapshot(requests_total: u64, in_flight: usize) -> Option<ServiceSnapshot> {
        let ttft_histogram = Histogram::of(std::iter::repeat_n(0.2, in_flight));
        Some(ServiceSnapshot { requests_total, in_flight, ttft_histogram, ..ServiceSnapshot::default() })
    }

    #[test]
    fn a_follower_writes_on_held_changes_at_once_and_on_requests_at_most_once_a_refresh() {
        let key = ServiceKey::new("ml", "echo");
        let mut sent = HashMap::new();
        // Nothing seen yet: nothing to say.
        assert!(rows("b", 1_000, &[(key.clone(), snapshot(0, 0), 0)], &mut sent).is_empty());
        // A request held for a cold start: written at once, and again when it is let through.
        let held = rows("b", 2_000, &[(key.clone(), snapshot(0, 0), 1)], &mut sent);
        assert_eq!(held.iter().map(|r| (r.held, r.last_request_at)).collect::<Vec<_>>(), [(1, 2_000)]);
        let released = rows("b", 2_250, &[(key.clone(), snapshot(1, 0), 0)], &mut sent);
        assert_eq!(released.iter().map(|r| (r.held, r.last_request_at)).collect::<Vec<_>>(), [(0, 2_250)]);
        // Answered requests: not again within a refresh, then once, with the figures.
        assert!(rows("b", 2_500, &[(key.clone(), snapshot(5, 1), 0)], &mut sent).is_empty());
        let later = rows("b", 3_300, &[(key.clone(), snapshot(9, 3), 0)], &mut sent);
        assert_eq!(later.iter().map(|r| (r.last_request_at, r.in_flight)).collect::<Vec<_>>(), [(3_300, 3)]);
        assert_eq!(later[0].ttft_histogram, Histogram::of([0.2; 3]).pairs(), "its times to first byte");
        // The load gone: its figures, back to 0, a refresh later; then nothing more.
        let idle = rows("b", 4_400, &[(key.clone(), snapshot(9, 0), 0)], &mut sent);
        assert_eq!(idle.iter().map(|r| (r.last_request_at, r.in_flight)).collect::<Vec<_>>(), [(3_300, 0)]);
        assert!(rows("b", 9_000, &[(key.clone(), snapshot(9, 0), 0)], &mut sent).is_empty());
    }
}
