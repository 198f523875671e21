//! The job a replica is submitted as, and the port it listens on.

use gantry_api::elastic::GpuRange;
use gantry_store::{NewJob, Service, SubmitRequest};

/// The replica job for a service's current generation, listening on `port`.
pub(super) fn replica_job(s: &Service, volumes: &[gantry_store::Volume], now: i64) -> NewJob {
    let spec = &s.spec;
    let env = spec.env.clone();
    // A node-local volume holds the replicas to its node.
    let node_selector = volumes
        .iter()
        .find_map(|v| v.node.clone())
        .map(|n| [(gantry_api::pools::NODE_ID.to_owned(), n)].into())
        .unwrap_or_default();
    let request = SubmitRequest {
        command: spec.command.clone(),
        gpus: GpuRange::count(spec.gpus),
        gpu_memory_mib: spec.gpu_memory.unwrap_or(0),
        cpu_milli: spec.cpu.map_or(0, |c| (c * 1000.0).round() as u64),
        memory_mib: spec.memory.unwrap_or(0),
        team: Some(s.team.clone()),
        priority: spec.priority,
        name: Some(s.name.clone()),
        max_retries: Some(0),
        env,
        labels: spec.labels.clone(),
        wait_for_capacity: true,
        upload: spec.upload.clone(),
        image: spec.image.clone(),
        registry_secret: spec.registry_secret.clone(),
        volumes: spec.volumes.clone(),
        node_selector,
        ..SubmitRequest::default()
    };
    NewJob {
        spec: request,
        team: s.team.clone(),
        name: s.name.clone(),
        submitted_at: now,
        user: None,
        service: Some((s.name.clone(), s.generation)),
        pending_limit: None,
        pending_bytes_limit: None,
    }
}

pub(super) fn port(job: &gantry_store::Job) -> Option<u16> {
    job.env.get("PORT").and_then(|p| p.parse().ok())
}
