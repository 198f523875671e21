//! The autoscaler's step of a tick: the gateway's figures (and the replicas' scraped series,
//! GPU levels where the block names them) into the service's [`Scaler`], its decision recorded
//! with its reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use gantry_core::autoscale::Sample;
use gantry_store::Service;

use super::{At, Controller, Effects, decision};
use crate::app::App;
use crate::gateway::histogram::Histogram;
use crate::gateway::{ServiceKey, ServiceSnapshot};
use crate::services::scale::Scaler;
use crate::services::signals;

impl Controller {
    /// The autoscaler's decision for this tick (recorded when it changes the count); returns
    /// the count to keep.
    pub(super) fn autoscale(
        &mut self,
        app: &App,
        key: &ServiceKey,
        service: &Service,
        ready_replicas: &[(&gantry_store::Job, SocketAddr)],
        at: &At<'_>,
        effects: &mut Effects,
    ) -> u32 {
        let (now, ready) = (at.now, ready_replicas.len() as u32);
        let now_s = now as f64 / 1000.0;
        let generation = service.generation;
        let stale = self.scalers.get(key).is_none_or(|(g, _)| *g != generation);
        if stale {
            match Scaler::new(&service.spec, now_s) {
                Ok(s) => {
                    self.scalers.insert(key.clone(), (generation, s));
                }
                Err(e) => {
                    tracing::warn!(service = %key, error = %e, "a stored service has a bad autoscale block")
                }
            }
        }
        let Some((_, scaler)) = self.scalers.get_mut(key) else { return service.desired };
        let (gpu_utilization, sm_active) = if scaler.gpu_metrics() {
            let uuids = ready_replicas.iter().flat_map(|(job, _)| job.gpu_uuids.iter().map(String::as_str));
            signals::gpu_levels(uuids, &at.signals.gpus, &|node| at.signals.fresh.contains(node))
        } else {
            (None, None)
        };
        let series = scaler.series().to_vec();
        let every = scaler.scrape_every_ms();
        let prometheus = self.scrape(ready_replicas, &series, every, now);
        let Some((_, scaler)) = self.scalers.get_mut(key) else { return service.desired };
        let snapshot = app.gateway.snapshot(key);
        let (queued, total, arrived) =
            snapshot.as_ref().map_or((0, 0, 0), |s| (s.queue_length, s.requests_total, s.arrivals_total));
        // Requests through the other server replicas' gateways count as this one's.
        let elsewhere = at.elsewhere.get(key).cloned().unwrap_or_default();
        if let Some(s) = &snapshot {
            let sample = Sample {
                at_s: now_s,
                in_flight: s.in_flight as f64 + elsewhere.in_flight,
                queue_length: s.queue_length as f64 + elsewhere.queue_length,
                // The scaler adds this gateway's arrivals over the sample's interval.
                rps: elsewhere.rps,
                ttft_p95_s: ttft_p95(s, &elsewhere.ttft),
                gpu_utilization,
                sm_active,
                prometheus,
            };
            scaler.observe(sample, total, arrived);
            // Requests queued here, and none through another gateway: every replica is busy
            // with this gateway's requests, and its answers measure what a busy replica serves.
            let saturated = s.queue_length > 0 && elsewhere.rps == 0.0 && elsewhere.in_flight == 0.0;
            if let Some(note) = scaler.check_rate(now_s, ready, total, saturated) {
                effects.scale.push((
                    service.id,
                    service.desired,
                    decision(now, service.desired, service.desired, note),
                ));
            }
        }
        let held = self.held.get(key).copied().unwrap_or(0).max(if ready == 0 { queued } else { 0 });
        scaler.saw_request_at(elsewhere.last_request_at as f64 / 1000.0);
        let held = held.max(elsewhere.held);
        if let Some(since) = self.cold.get(key).copied().filter(|_| ready > 0) {
            self.cold.remove(key);
            let took = (now - since) as f64 / 1000.0;
            let reason = format!("cold start: the first replica was ready after {took:.1} s");
            effects.scale.push((
                service.id,
                service.desired,
                decision(now, service.desired, service.desired, reason),
            ));
        }
        let Some(d) = scaler.decide(now_s, service.desired, ready, held) else { return service.desired };
        if d.from == 0 {
            self.cold.insert(key.clone(), now);
        }
        effects.scale.push((service.id, d.to, decision(now, d.from, d.to, d.reason)));
        d.to
    }

    /// Sends the scrapes of `ready` replicas that are due (when `series` names any), and
    /// returns the wanted series summed over the ready replicas' recent scrapes.
    fn scrape(
        &mut self,
        ready: &[(&gantry_store::Job, SocketAddr)],
        series: &[String],
        every_ms: i64,
        now: i64,
    ) -> BTreeMap<String, f64> {
        if series.is_empty() {
            return BTreeMap::new();
        }
        for (job, addr) in ready {
            let due = self.scraped_at.get(&job.id).is_none_or(|last| now - last >= every_ms);
            if !due || self.scraping.contains_key(&job.id) {
                continue;
            }
            let Some(tx) = self.scrape_tx.clone() else { break };
            self.scraping.insert(job.id, now);
            self.scraped_at.insert(job.id, now);
            let (id, addr, wanted) = (job.id, *addr, series.to_vec());
            tokio::spawn(async move {
                let scraped = signals::fetch(addr).await.map(|text| signals::parse_series(&text, &wanted));
                let _ = tx.send((id, scraped));
            });
        }
        // A scrape older than three intervals (the replica stopped answering) counts no more.
        let recent = |at: i64| now - at <= 3 * every_ms.max(1000);
        signals::sum_scrapes(
            ready
                .iter()
                .filter_map(|(job, _)| self.scraped.get(&job.id))
                .filter(|(at, _)| recent(*at))
                .map(|(_, s)| s),
        )
    }
}

/// The 95th percentile time to first byte of the service's requests: this gateway's exact
/// figure when no other server replica's gateway measured any (none when none answered a
/// request), else the percentile of every gateway's requests, from their added histograms.
fn ttft_p95(own: &ServiceSnapshot, elsewhere: &Histogram) -> Option<f64> {
    if elsewhere.count() == 0 {
        return (own.rps > 0.0).then_some(own.ttft_p95_s);
    }
    let mut all = own.ttft_histogram.clone();
    all.add(elsewhere);
    all.quantile(0.95)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_p95_is_this_gateways_own_alone_and_every_gateways_once_others_measured() {
        let own = ServiceSnapshot {
            rps: 2.0,
            ttft_p95_s: 0.21,
            ttft_histogram: Histogram::of([0.2; 19].into_iter().chain([0.21])),
            ..ServiceSnapshot::default()
        };
        assert_eq!(ttft_p95(&own, &Histogram::default()), Some(0.21), "exact, as before");
        let idle = ServiceSnapshot::default();
        assert_eq!(ttft_p95(&idle, &Histogram::default()), None, "no request answered");
        // A follower answered 20 slow requests: the service's p95 is theirs, not the leader's.
        let slow = Histogram::of([3.0; 20]);
        let p95 = ttft_p95(&own, &slow).expect("p95");
        assert!((3.0..3.6).contains(&p95), "p95 {p95}");
        assert!(ttft_p95(&idle, &slow).expect("p95") >= 3.0, "only a follower answered");
    }
}
