//! The autoscaler's step of a tick: the gateway's figures (and the replicas' scraped series,
//! GPU levels where the block names them) into the service's [`Scaler`], its decision recorded
//! with its reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use gantry_core::autoscale::Sample;
use gantry_store::Service;

use super::{At, Controller, Effects, decision};
use crate::app::App;
use crate::gateway::ServiceKey;
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
        let elsewhere = at.elsewhere.get(key).copied().unwrap_or_default();
        if let Some(s) = &snapshot {
            let sample = Sample {
                at_s: now_s,
                in_flight: s.in_flight as f64 + elsewhere.in_flight,
                queue_length: s.queue_length as f64 + elsewhere.queue_length,
                // The scaler adds this gateway's arrivals over the sample's interval.
                rps: elsewhere.rps,
                ttft_p95_s: (s.rps > 0.0).then_some(s.ttft_p95_s),
                gpu_utilization,
                sm_active,
                prometheus,
            };
            scaler.observe(sample, total, arrived);
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
