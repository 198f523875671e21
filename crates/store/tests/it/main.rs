//! Integration tests of the SQLite store.

mod audit;
mod elastic;
mod gangs;
mod idle;
mod jobs;
mod nodes;
mod props;
mod workflow;

use gantry_store::*;

pub fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path()).expect("open store");
    (dir, store)
}

pub fn new_job(key: &str, gpus: u32, memory: u64) -> NewJob {
    let spec = SubmitRequest {
        request_id: Some(key.to_owned()),
        command: vec!["true".into()],
        gpus: GpuRange::count(gpus),
        gpu_memory_mib: memory,
        max_retries: Some(1),
        ..SubmitRequest::default()
    };
    NewJob { spec, team: "default".into(), name: key.into(), submitted_at: 1, ..NewJob::default() }
}

pub fn register(store: &SqliteStore, gpus: u32) -> u64 {
    let gpus = (0..gpus)
        .map(|i| GpuInfo { uuid: format!("GPU-{i}"), index: i, model: "A100-80GB".into(), memory_mib: 81920 })
        .collect();
    let reg = NodeRegistration {
        request: RegisterRequest {
            attempts: Vec::new(),
            node_id: "n1".into(),
            hostname: "h".into(),
            advertise_addr: None,
            network: Default::default(),
            job_defaults: None,
            labels: Default::default(),
            cpu_milli: 8000,
            memory_mib: 1000,
            gpus,
        },
        at: 10,
    };
    store.register_node(&reg).expect("register")
}

pub fn whole(job_id: JobId, epoch: u64, uuids: &[&str]) -> Placement {
    Placement {
        job_id,
        node_id: "n1".into(),
        epoch,
        grants: uuids
            .iter()
            .map(|u| Grant { uuid: (*u).into(), share_milli: 1000, memory_mib: 81920 })
            .collect(),
        at: 20,
    }
}
