//! Mapping rows to model types.

use crate::db::Row;

use crate::model::*;
use crate::{Result, StoreError};

/// Columns read by [`job`], in order.
pub(super) const JOB_COLUMNS: &str = "id, team, name, priority, \
     CASE WHEN command = '' THEN (SELECT h.command FROM jobs h WHERE h.id = jobs.array_id) ELSE command END, \
     gpus, gpu_memory_mib, \
     gpu_compute_pct, cpu_milli, memory_mib, state, attempt, max_retries, stop, node_id, epoch, \
     gpu_uuids, exit_code, reason, submitted_at, started_at, finished_at, \
     CASE WHEN env = '' THEN (SELECT h.env FROM jobs h WHERE h.id = jobs.array_id) ELSE env END, \
     time_limit_s, \"user\", \
     array_id, array_index, array_max_running, after, labels, gpu_models, workdir, \
     replicas, gang_id, rank, local_rank, master_addr, master_port, gpus_max, service, upload, chdir, node_selector, \
     inputs, input_secret, outputs, output_secret, image, volumes";

/// How many columns [`JOB_COLUMNS`] names: a query selecting more after them reads those from
/// this index on.
pub(super) const JOB_COLUMN_COUNT: usize = 49;

fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::Corrupt(format!("{what}: {value:?}"))
}

pub(super) fn json<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|_| corrupt(what, text))
}

pub(super) fn parse_enum<T>(what: &str, text: &str, parse: fn(&str) -> Option<T>) -> Result<T> {
    parse(text).ok_or_else(|| corrupt(what, text))
}

pub(super) fn job(r: &Row) -> Result<Job> {
    let command: String = r.get(4)?;
    let state: String = r.get(10)?;
    let gpu_uuids: String = r.get(16)?;
    Ok(Job {
        id: r.get(0)?,
        team: r.get(1)?,
        name: r.get(2)?,
        priority: r.get(3)?,
        command: json("command", &command)?,
        request: JobRequest {
            gpus: r.get(5)?,
            gpu_memory_mib: r.get(6)?,
            gpu_compute_pct: r.get(7)?,
            cpu_milli: r.get(8)?,
            memory_mib: r.get(9)?,
            gpus_max: r.get(38)?,
        },
        state: parse_enum("job state", &state, JobState::parse)?,
        attempt: r.get(11)?,
        max_retries: r.get(12)?,
        stop: r.get(13)?,
        node_id: r.get(14)?,
        epoch: r.get(15)?,
        gpu_uuids: json("gpu uuids", &gpu_uuids)?,
        exit_code: r.get(17)?,
        reason: r.get(18)?,
        submitted_at: r.get(19)?,
        started_at: r.get(20)?,
        finished_at: r.get(21)?,
        env: json("env", &r.get::<_, String>(22)?)?,
        time_limit_s: r.get(23)?,
        user: r.get(24)?,
        array: match (r.get::<_, Option<JobId>>(25)?, r.get::<_, Option<u32>>(26)?) {
            (Some(id), Some(index)) => Some(ArrayMember { id, index, max_running: r.get(27)? }),
            _ => None,
        },
        after: json("after", &r.get::<_, String>(28)?)?,
        labels: json("labels", &r.get::<_, String>(29)?)?,
        gpu_models: json("gpu models", &r.get::<_, String>(30)?)?,
        node_selector: json("node selector", &r.get::<_, String>(42)?)?,
        workdir: r.get(31)?,
        gang: gang(r)?,
        service: r.get(39)?,
        upload: r.get::<_, Option<String>>(40)?.map(|t| json("upload", &t)).transpose()?,
        chdir: r.get(41)?,
        inputs: r.get::<_, Option<String>>(43)?.map(|t| json("inputs", &t)).transpose()?.unwrap_or_default(),
        input_secret: r.get(44)?,
        outputs: r
            .get::<_, Option<String>>(45)?
            .map(|t| json("outputs", &t))
            .transpose()?
            .unwrap_or_default(),
        output_secret: r.get(46)?,
        image: r.get::<_, Option<String>>(47)?.map(|t| json("image", &t)).transpose()?,
        volumes: r
            .get::<_, Option<String>>(48)?
            .map(|t| json("volumes", &t))
            .transpose()?
            .unwrap_or_default(),
    })
}

/// The gang columns (25..=30): a gang (replicas > 1, no parent), a worker (a parent), or neither.
fn gang(r: &Row) -> Result<Option<Gang>> {
    let replicas: u32 = r.get(32)?;
    let parent: Option<JobId> = r.get(33)?;
    if replicas <= 1 && parent.is_none() {
        return Ok(None);
    }
    Ok(Some(Gang {
        id: match parent {
            Some(id) => id,
            None => r.get(0)?,
        },
        replicas,
        rank: r.get(34)?,
        local_rank: r.get(35)?,
        master_addr: r.get(36)?,
        master_port: r.get(37)?,
    }))
}

pub(super) const ALLOCATION_COLUMNS: &str =
    "id, job_id, attempt, node_id, epoch, gpu_uuid, share_milli, memory_mib, released_after";

pub(super) fn allocation(r: &Row) -> Result<Allocation> {
    Ok(Allocation {
        id: r.get(0)?,
        job_id: r.get(1)?,
        attempt: r.get(2)?,
        node_id: r.get(3)?,
        epoch: r.get(4)?,
        gpu_uuid: r.get(5)?,
        share_milli: r.get(6)?,
        memory_mib: r.get(7)?,
        released_after: r.get(8)?,
    })
}

pub(super) const NODE_COLUMNS: &str = "id, hostname, state, epoch, cpu_milli, memory_mib, last_heartbeat, advertise_addr, network, job_defaults, \
     scheduling, drain_at, labels";

pub(super) fn node(r: &Row) -> Result<Node> {
    let state: String = r.get(2)?;
    let network: String = r.get(8)?;
    let defaults: Option<String> = r.get(9)?;
    let scheduling: String = r.get(10)?;
    Ok(Node {
        id: r.get(0)?,
        hostname: r.get(1)?,
        advertise_addr: r.get(7)?,
        network: parse_enum("node network", &network, NodeNetwork::parse)?,
        state: parse_enum("node state", &state, NodeState::parse)?,
        epoch: r.get(3)?,
        cpu_milli: r.get(4)?,
        memory_mib: r.get(5)?,
        last_heartbeat: r.get(6)?,
        job_defaults: defaults.map(|d| json("node job defaults", &d)).transpose()?,
        scheduling: parse_enum("node scheduling", &scheduling, NodeScheduling::parse)?,
        drain_at: r.get(11)?,
        labels: json("node labels", &r.get::<_, String>(12)?)?,
    })
}

pub(super) const GPU_COLUMNS: &str = "uuid, idx, model, memory_mib, node_id, health, sample";

pub(super) fn gpu(r: &Row) -> Result<Gpu> {
    let health: String = r.get(5)?;
    let sample: Option<String> = r.get(6)?;
    Ok(Gpu {
        info: GpuInfo { uuid: r.get(0)?, index: r.get(1)?, model: r.get(2)?, memory_mib: r.get(3)? },
        node_id: r.get(4)?,
        health: parse_enum("gpu health", &health, GpuHealth::parse)?,
        sample: sample.map(|s| json("gpu sample", &s)).transpose()?,
    })
}

/// Serialises a value that cannot fail to serialise (plain data, string keys).
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> crate::Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}
